/*
 * saga_host.c: the protocol core (saga_core.c) on a host "board" whose pins,
 * e-stop, ADC and clock are driven by a script on stdin, for the
 * differential test (drivers/sim/mcu, TestDifferential) and for checks at
 * the board interface. Time is virtual: it moves only when the script says.
 *
 * Usage: saga_host [-t table] [-w window] [-m max_duration_ms]
 *                  [-T telemetry_ms] [-g frame_gap_ms] [-r estop_release_ms]
 *
 * Tables: 0 the ATmega328P board's (saga_atmega328p.h, with its timing
 * unless overridden), 1 a wider test table.
 *
 * At start it prints the table:
 *   info nch N nsup N window W max_duration MS telemetry MS gap MS release MS
 *   chan I kind K pin P flags F pulse_min US pulse_max US min V max V safe V
 *   supply I uv UV min MV max MV
 * then reads one command a line and answers:
 *   t MS          advance the clock to MS, running the main loop every ms
 *   rx HEX        these bytes arrive now (the main loop runs until all taken)
 *   estop 0|1     the e-stop input goes inactive / active (the loop runs)
 *   fault CH 0|1  channel CH's driver reports no fault / a fault (the loop runs)
 *   adc I N|none  supply I reads N counts from now on, or cannot be read
 *   pins          prints "pins MS d0 d1 ...": what each pin is driven with
 *   state         prints "state MS faults F session S v0/f0 v1/f1 ..."
 * Every frame the core sends is printed as "tx MS HEX". Errors go to
 * stderr with exit status 2.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../saga_mcu/src/saga_atmega328p.h"
#include "../saga_mcu/src/saga_core.h"

static const saga_channel_t uno_channels[] = SAGA_ATMEGA328P_CHANNELS;
static const saga_supply_t uno_supplies[] = SAGA_ATMEGA328P_SUPPLIES;

/* A wider table: a servo with another calibration and a narrow range, a
 * servo that detaches when safe, PWM active-low with a safe value, an
 * active-low output that is ON when safe, and two supplies with limits. */
static const saga_channel_t wide_channels[] = {
	{SAGA_KIND_SERVO, 3, 0, 544, 2400, 10000, 170000, 45000},
	{SAGA_KIND_SERVO, 4, SAGA_SAFE_DETACH, 500, 2500, 0, 180000, 0},
	{SAGA_KIND_PWM, 5, SAGA_ACTIVE_LOW, 0, 0, 0, 800, 250},
	{SAGA_KIND_PWM, 6, SAGA_SAFE_DETACH, 0, 0, 0, 1000, 0},
	{SAGA_KIND_DIGITAL, 7, SAGA_ACTIVE_LOW, 0, 0, 0, 1000, 1000},
	{SAGA_KIND_DIGITAL, 8, 0, 0, 0, 1000, 1000, 1000},
	{SAGA_KIND_DIGITAL, 9, SAGA_ACTIVE_LOW | SAGA_SAFE_DETACH, 0, 0, 0, 1000, 0},
};
static const saga_supply_t wide_supplies[] = {
	{5000, 6000, 13000},
	{1000, 0, 0},
};

static uint32_t clock_ms;
static uint8_t queue[4096];
static size_t q_head, q_len;
static uint8_t estop_in;
static uint8_t fault_in[SAGA_MAX_CHANNELS];
static int32_t adc_in[SAGA_MAX_SUPPLIES]; /* -1: no reading */
static saga_drive_t pins[SAGA_MAX_CHANNELS];
static uint8_t driven[SAGA_MAX_CHANNELS];

static void die(const char *what, const char *line) {
	fprintf(stderr, "saga_host: %s: %s\n", what, line);
	exit(2);
}

static void board_output(void *ctx, uint8_t ch, const saga_channel_t *c, saga_drive_t drive) {
	(void)ctx;
	(void)c;
	if (ch >= SAGA_MAX_CHANNELS)
		die("output", "channel out of range");
	pins[ch] = drive;
	driven[ch] = 1;
}

static uint8_t board_estop(void *ctx) {
	(void)ctx;
	return estop_in;
}

static uint8_t board_fault(void *ctx, uint8_t ch) {
	(void)ctx;
	return ch < SAGA_MAX_CHANNELS ? fault_in[ch] : 0;
}

static uint8_t board_adc(void *ctx, uint8_t i, uint16_t *counts) {
	(void)ctx;
	if (i >= SAGA_MAX_SUPPLIES || adc_in[i] < 0)
		return 0;
	*counts = (uint16_t)adc_in[i];
	return 1;
}

static int board_rx(void *ctx) {
	(void)ctx;
	if (q_len == 0)
		return -1;
	q_len--;
	return queue[q_head++];
}

static void board_tx(void *ctx, const uint8_t *p, uint8_t n) {
	uint8_t i;
	(void)ctx;
	printf("tx %lu ", (unsigned long)clock_ms);
	for (i = 0; i < n; i++)
		printf("%02x", p[i]);
	printf("\n");
}

static uint32_t board_millis(void *ctx) {
	(void)ctx;
	return clock_ms;
}

static const saga_board_t board = {
	board_output, board_estop, board_fault, board_adc, board_rx, board_tx, board_millis, 0,
};

static long number(const char *s, const char *line) {
	char *end;
	long v;
	if (s == NULL)
		die("missing number", line);
	v = strtol(s, &end, 10);
	if (*end != '\0' && *end != '\n')
		die("bad number", line);
	return v;
}

static int hexval(int c) {
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int main(int argc, char **argv) {
	saga_config_t cfg;
	saga_t s;
	char line[16384];
	int i, err;
	uint8_t where;
	long table = 0;

	memset(&cfg, 0, sizeof cfg);
	for (i = 1; i + 1 < argc; i += 2)
		if (strcmp(argv[i], "-t") == 0)
			table = number(argv[i + 1], "-t");
	if (table == 0) {
		cfg.channels = uno_channels;
		cfg.nch = sizeof uno_channels / sizeof uno_channels[0];
		cfg.supplies = uno_supplies;
		cfg.nsup = sizeof uno_supplies / sizeof uno_supplies[0];
		cfg.window = SAGA_ATMEGA328P_WINDOW;
		cfg.max_duration_ms = SAGA_ATMEGA328P_MAX_DURATION_MS;
		cfg.telemetry_ms = SAGA_ATMEGA328P_TELEMETRY_MS;
		cfg.frame_gap_ms = SAGA_ATMEGA328P_FRAME_GAP_MS;
		cfg.estop_release_ms = SAGA_ATMEGA328P_ESTOP_RELEASE_MS;
	} else if (table == 1) {
		cfg.channels = wide_channels;
		cfg.nch = sizeof wide_channels / sizeof wide_channels[0];
		cfg.supplies = wide_supplies;
		cfg.nsup = sizeof wide_supplies / sizeof wide_supplies[0];
		cfg.window = 8;
		cfg.max_duration_ms = 200;
		cfg.telemetry_ms = 30;
		cfg.frame_gap_ms = 20;
		cfg.estop_release_ms = 0;
	} else {
		die("unknown table", argv[2]);
	}
	for (i = 1; i + 1 < argc; i += 2) {
		long v = number(argv[i + 1], argv[i]);
		if (strcmp(argv[i], "-w") == 0)
			cfg.window = (uint8_t)v;
		else if (strcmp(argv[i], "-m") == 0)
			cfg.max_duration_ms = (uint16_t)v;
		else if (strcmp(argv[i], "-T") == 0)
			cfg.telemetry_ms = (uint16_t)v;
		else if (strcmp(argv[i], "-g") == 0)
			cfg.frame_gap_ms = (uint16_t)v;
		else if (strcmp(argv[i], "-r") == 0)
			cfg.estop_release_ms = (uint16_t)v;
		else if (strcmp(argv[i], "-t") != 0)
			die("unknown flag", argv[i]);
	}
	cfg.board = &board;
	for (i = 0; i < SAGA_MAX_SUPPLIES; i++)
		adc_in[i] = -1;

	err = saga_check_config(&cfg, &where);
	if (err != SAGA_OK) {
		fprintf(stderr, "saga_host: table error %d at %u\n", err, where);
		return 2;
	}
	printf("info nch %u nsup %u window %u max_duration %u telemetry %u gap %u release %u\n", cfg.nch, cfg.nsup,
	       cfg.window, cfg.max_duration_ms, cfg.telemetry_ms, cfg.frame_gap_ms, cfg.estop_release_ms);
	for (i = 0; i < cfg.nch; i++) {
		const saga_channel_t *c = &cfg.channels[i];
		printf("chan %d kind %u pin %u flags %u pulse_min %u pulse_max %u min %ld max %ld safe %ld\n", i, c->kind,
		       c->pin, c->flags, c->pulse_min_us, c->pulse_max_us, (long)c->min, (long)c->max, (long)c->safe);
	}
	for (i = 0; i < cfg.nsup; i++) {
		const saga_supply_t *p = &cfg.supplies[i];
		printf("supply %d uv %lu min %ld max %ld\n", i, (unsigned long)p->uv_per_count, (long)p->min_mv,
		       (long)p->max_mv);
	}
	if (saga_init(&s, &cfg) != SAGA_OK)
		die("init", "failed");
	for (i = 0; i < cfg.nch; i++)
		if (!driven[i])
			die("init", "a channel was not driven at power-on");

	while (fgets(line, sizeof line, stdin)) {
		char *save = NULL;
		char *cmd = strtok_r(line, " \n", &save);
		char *a1 = strtok_r(NULL, " \n", &save);
		char *a2 = strtok_r(NULL, " \n", &save);
		if (cmd == NULL)
			continue;
		if (strcmp(cmd, "t") == 0) {
			long to = number(a1, "t");
			if (to < (long)clock_ms)
				die("time goes back", a1);
			while (clock_ms < (uint32_t)to) {
				clock_ms++;
				saga_run(&s);
			}
		} else if (strcmp(cmd, "rx") == 0) {
			size_t n = a1 ? strlen(a1) : 0, k;
			if (n % 2 || n / 2 > sizeof queue)
				die("bad hex", a1 ? a1 : "");
			q_head = 0;
			q_len = n / 2;
			for (k = 0; k < q_len; k++) {
				int hi = hexval(a1[2 * k]), lo = hexval(a1[2 * k + 1]);
				if (hi < 0 || lo < 0)
					die("bad hex", a1);
				queue[k] = (uint8_t)(hi << 4 | lo);
			}
			while (q_len > 0)
				saga_run(&s);
		} else if (strcmp(cmd, "estop") == 0) {
			estop_in = number(a1, "estop") != 0;
			saga_run(&s);
		} else if (strcmp(cmd, "fault") == 0) {
			long ch = number(a1, "fault");
			if (ch < 0 || ch >= SAGA_MAX_CHANNELS)
				die("bad channel", a1);
			fault_in[ch] = number(a2, "fault") != 0;
			saga_run(&s);
		} else if (strcmp(cmd, "adc") == 0) {
			long sup = number(a1, "adc");
			if (sup < 0 || sup >= SAGA_MAX_SUPPLIES)
				die("bad supply", a1);
			if (a2 && strcmp(a2, "none") == 0) {
				adc_in[sup] = -1;
			} else {
				long n = number(a2, "adc");
				if (n < 0 || n > 65535)
					die("bad count", a2);
				adc_in[sup] = (int32_t)n;
			}
		} else if (strcmp(cmd, "pins") == 0) {
			printf("pins %lu", (unsigned long)clock_ms);
			for (i = 0; i < cfg.nch; i++)
				printf(" %ld", (long)pins[i]);
			printf("\n");
		} else if (strcmp(cmd, "state") == 0) {
			printf("state %lu faults %u session %u", (unsigned long)clock_ms, saga_faults(&s), saga_in_session(&s));
			for (i = 0; i < cfg.nch; i++)
				printf(" %ld/%u", (long)saga_value(&s, (uint8_t)i), saga_channel_flags(&s, (uint8_t)i));
			printf("\n");
		} else {
			die("unknown command", cmd);
		}
		fflush(stdout);
	}
	return 0;
}
