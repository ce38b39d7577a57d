/*
 * fuzz_core.c: a libFuzzer target for the firmware core (saga_core.c): its
 * decoder and everything behind it. `make firmware-fuzz` runs it under
 * ASan and UBSan.
 *
 * The input is a program for a board. Its first byte picks the table (the
 * ATmega328P's or a wider one) and the window; then each byte is an op:
 *   0x00..0xBF  the next (op & 0x3F) + 1 bytes arrive on the line
 *   0xC0..0xDF  the clock moves (op & 0x1F) * 7 + 1 ms
 *   0xE0..0xE7  the e-stop input goes inactive (even) or active (odd)
 *   0xE8..0xEF  channel (op & 7)'s fault sense toggles
 *   0xF0..0xFF  the clock moves 400 ms (the watchdog)
 * Whatever the bytes, the core must not crash or overflow, and:
 *   - every frame it sends is one valid MCU frame (SYNC, LEN <= 200, its
 *     CRC, an MCU type);
 *   - every pin it drives is within what its kind can be (a servo's pulse
 *     within its calibration, or none; a duty 0..255; a level 0 or 1);
 *   - while ESTOP is set, a pin changes only to the channel's safe or
 *     detached drive (the e-stop holds outputs safe; HALT may detach).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../saga_mcu/src/saga_atmega328p.h"
#include "../saga_mcu/src/saga_core.h"

static const saga_channel_t uno_channels[] = SAGA_ATMEGA328P_CHANNELS;
static const saga_supply_t uno_supplies[] = SAGA_ATMEGA328P_SUPPLIES;
static const saga_channel_t wide_channels[] = {
	{SAGA_KIND_SERVO, 3, 0, 544, 2400, 10000, 170000, 45000},
	{SAGA_KIND_SERVO, 4, SAGA_SAFE_DETACH, 500, 2500, 0, 180000, 0},
	{SAGA_KIND_PWM, 5, SAGA_ACTIVE_LOW, 0, 0, 0, 800, 250},
	{SAGA_KIND_DIGITAL, 7, SAGA_ACTIVE_LOW, 0, 0, 0, 1000, 1000},
	{SAGA_KIND_DIGITAL, 9, SAGA_ACTIVE_LOW | SAGA_SAFE_DETACH, 0, 0, 0, 1000, 0},
};
static const saga_supply_t wide_supplies[] = {{5000, 6000, 13000}, {1000, 0, 0}};

static saga_t core;
static uint32_t clock_ms;
static const uint8_t *in;
static size_t in_len;
static uint8_t estop_in, fault_in[SAGA_MAX_CHANNELS];

static void fail(const char *what) {
	fprintf(stderr, "fuzz_core: %s\n", what);
	abort();
}

static void board_output(void *ctx, uint8_t ch, const saga_channel_t *c, saga_drive_t d) {
	(void)ctx;
	if (ch >= SAGA_MAX_CHANNELS)
		fail("output: no such channel");
	switch (c->kind) {
	case SAGA_KIND_SERVO:
		if (d != 0 && (d < 2 * c->pulse_min_us || d > 2 * c->pulse_max_us))
			fail("servo pulse outside its calibration");
		break;
	case SAGA_KIND_PWM:
		if (d < 0 || d > 255)
			fail("duty outside 0..255");
		break;
	default:
		if (d != 0 && d != 1)
			fail("digital level not 0 or 1");
	}
	if (core.cfg && (saga_faults(&core) & SAGA_F_ESTOP)) {
		uint8_t detach = (c->flags & SAGA_SAFE_DETACH) != 0;
		if (d != saga_drive_for(c, c->safe, detach) && d != saga_drive_for(c, 0, 1))
			fail("an output moved while the e-stop was active");
	}
}

static uint8_t board_estop(void *ctx) {
	(void)ctx;
	return estop_in;
}

static uint8_t board_fault(void *ctx, uint8_t ch) {
	(void)ctx;
	return fault_in[ch % SAGA_MAX_CHANNELS];
}

static uint8_t board_adc(void *ctx, uint8_t i, uint16_t *counts) {
	(void)ctx;
	*counts = (uint16_t)(clock_ms * 7u + i * 1000u) & 0x0FFFu;
	return (clock_ms & 0x40u) == 0;
}

static int board_rx(void *ctx) {
	(void)ctx;
	if (in_len == 0)
		return -1;
	in_len--;
	return *in++;
}

static void board_tx(void *ctx, const uint8_t *p, uint8_t n) {
	(void)ctx;
	if (n < 6 || p[0] != SAGA_SYNC || p[1] > SAGA_MAX_PAYLOAD || n != p[1] + 6 || !(p[3] & 0x80))
		fail("sent a frame that is not one MCU frame");
	if (saga_crc16(0xFFFFu, p + 1, (uint8_t)(n - 3)) != (uint16_t)(p[n - 2] | p[n - 1] << 8))
		fail("sent a frame with a bad CRC");
}

static uint32_t board_millis(void *ctx) {
	(void)ctx;
	return clock_ms;
}

static const saga_board_t board = {
	board_output, board_estop, board_fault, board_adc, board_rx, board_tx, board_millis, 0,
};

static void advance(uint32_t ms) {
	while (ms--) {
		clock_ms++;
		saga_run(&core);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	saga_config_t cfg;
	size_t i = 1;
	if (size < 1)
		return 0;
	memset(&cfg, 0, sizeof cfg);
	memset(&core, 0, sizeof core);
	estop_in = 0;
	memset(fault_in, 0, sizeof fault_in);
	clock_ms = (uint32_t)0 - 1000u; /* the clock wraps during the run */
	if (data[0] & 1) {
		cfg.channels = wide_channels;
		cfg.nch = sizeof wide_channels / sizeof wide_channels[0];
		cfg.supplies = wide_supplies;
		cfg.nsup = 2;
	} else {
		cfg.channels = uno_channels;
		cfg.nch = sizeof uno_channels / sizeof uno_channels[0];
		cfg.supplies = uno_supplies;
		cfg.nsup = 1;
	}
	cfg.window = (uint8_t)(1 + (data[0] >> 1) % SAGA_MAX_WINDOW);
	cfg.max_duration_ms = 300;
	cfg.telemetry_ms = 50;
	cfg.frame_gap_ms = 20;
	cfg.estop_release_ms = (data[0] & 0x80) ? 30 : 0;
	cfg.board = &board;
	if (saga_init(&core, &cfg) != SAGA_OK)
		fail("init refused a good table");
	while (i < size) {
		uint8_t op = data[i++];
		if (op < 0xC0) {
			size_t n = (size_t)(op & 0x3F) + 1;
			if (n > size - i)
				n = size - i;
			in = data + i;
			in_len = n;
			i += n;
			while (in_len > 0)
				saga_run(&core);
		} else if (op < 0xE0) {
			advance((uint32_t)(op & 0x1F) * 7u + 1u);
		} else if (op < 0xE8) {
			estop_in = op & 1;
			saga_run(&core);
		} else if (op < 0xF0) {
			fault_in[op & 7] ^= 1;
			saga_run(&core);
		} else {
			advance(400);
		}
	}
	return 0;
}
