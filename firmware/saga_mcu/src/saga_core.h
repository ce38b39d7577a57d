/*
 * saga_core.h: the portable core of the saga-supervisor serial protocol,
 * version 1 (docs/SERIAL.md), the MCU's side: framing and CRC, sessions,
 * sequence numbers and the duplicate cache, HELLO/SET/HALT/PING/DESCRIBE,
 * acks and NAKs, telemetry, the link watchdog, the SUPPLY/OUTPUT/ESTOP
 * fault flags and an e-stop input that holds every output safe.
 *
 * C99, no heap, fixed buffers. It knows nothing of the hardware: a board
 * gives it a table of channels (saga_channel_t), a table of supplies
 * (saga_supply_t) and a few functions (saga_board_t), and calls saga_run
 * from its main loop. drivers/sim/mcu implements the same rules in Go; the
 * differential test (drivers/sim/mcu, TestDifferential) holds the two to
 * byte-identical replies.
 *
 * Values are thousandths of the channel's unit, as on the wire:
 * milli-degrees for a servo (0..180000), duty x 1000 for PWM (0..1000),
 * 0 or 1000 for a digital output.
 *
 * Polarity: every value here is LOGICAL. The core turns it into what the
 * pin does (saga_board_t.output) in one place, honouring the channel's
 * SAGA_ACTIVE_LOW: power-on, the watchdog, the e-stop and HALT go through
 * that same place, so an active-low relay is OFF (pin HIGH) after each.
 */
#ifndef SAGA_CORE_H
#define SAGA_CORE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Capacity. A build may set other values with -D (up to the protocol's 32
 * channels, 8 supplies and window 8); an AVR's 2 KiB of RAM gets a smaller
 * cache. */
#if defined(__AVR__) && !defined(SAGA_MAX_WINDOW)
#define SAGA_MAX_WINDOW 4
#endif
#ifndef SAGA_MAX_CHANNELS
#define SAGA_MAX_CHANNELS 8
#endif
#ifndef SAGA_MAX_SUPPLIES
#define SAGA_MAX_SUPPLIES 4
#endif
#ifndef SAGA_MAX_WINDOW
#define SAGA_MAX_WINDOW 8
#endif

/* Protocol constants (docs/SERIAL.md). */
#define SAGA_VERSION 1
#define SAGA_SYNC 0xA5
#define SAGA_MAX_PAYLOAD 200
#define SAGA_MAX_FRAME (SAGA_MAX_PAYLOAD + 6)

enum {
	SAGA_T_HELLO = 0x01,
	SAGA_T_SET = 0x02,
	SAGA_T_HALT = 0x03,
	SAGA_T_PING = 0x04,
	SAGA_T_DESCRIBE = 0x05,
	SAGA_T_HELLO_ACK = 0x81,
	SAGA_T_SET_ACK = 0x82,
	SAGA_T_HALT_ACK = 0x83,
	SAGA_T_PONG = 0x84,
	SAGA_T_DESCRIBE_ACK = 0x85,
	SAGA_T_TELEMETRY = 0xA0,
	SAGA_T_NAK = 0xFF
};

enum {
	SAGA_NAK_BAD_CHANNEL = 1,
	SAGA_NAK_RANGE = 2,
	SAGA_NAK_MALFORMED = 3,
	SAGA_NAK_UNSUPPORTED = 4,
	SAGA_NAK_NO_SESSION = 5,
	SAGA_NAK_VERSION = 6,
	SAGA_NAK_FAULT = 7
};

/* Fault flags (faults u16). */
#define SAGA_F_WATCHDOG 0x0001u
#define SAGA_F_RESET 0x0002u
#define SAGA_F_SUPPLY 0x0004u
#define SAGA_F_OUTPUT 0x0008u
#define SAGA_F_ESTOP 0x0010u

/* Channel flags (flags u8 of SET_ACK, HALT_ACK, TELEMETRY). */
#define SAGA_CF_DETACHED 0x01u
#define SAGA_CF_FAULT 0x02u

/* Channel kinds, as DESCRIBE_ACK reports them. */
enum {
	SAGA_KIND_SERVO = 1,   /* pulses of pulse_min_us..pulse_max_us for 0..180 degrees */
	SAGA_KIND_PWM = 2,     /* 8-bit duty 0..1000 */
	SAGA_KIND_DIGITAL = 3  /* 0 (off) or 1000 (on) */
};

/* saga_channel_t.flags */
#define SAGA_ACTIVE_LOW 0x01u   /* logical on/duty drives the pin LOW; off is pin HIGH */
#define SAGA_SAFE_DETACH 0x02u  /* power-on, watchdog and e-stop detach it instead of driving safe */

/* The board's pin number of a channel without one. */
#define SAGA_NO_PIN 0xFF

/* One output channel: one row of the board's table. */
typedef struct {
	uint8_t kind;          /* SAGA_KIND_* */
	uint8_t pin;           /* the board's pin (Arduino numbering on an Uno), for DESCRIBE */
	uint8_t flags;         /* SAGA_ACTIVE_LOW | SAGA_SAFE_DETACH */
	uint16_t pulse_min_us; /* servo: the pulse at 0 degrees */
	uint16_t pulse_max_us; /* servo: the pulse at 180 degrees */
	int32_t min, max;      /* the values SET accepts (within the kind's own range) */
	int32_t safe;          /* the safe value (0 when SAGA_SAFE_DETACH) */
} saga_channel_t;

/* One supply the board measures. */
typedef struct {
	uint32_t uv_per_count;  /* microvolts per ADC count, divider included (<= 1000000) */
	int32_t min_mv, max_mv; /* outside this: SUPPLY; both 0: not checked */
} saga_supply_t;

/* ADC counts above this are no reading. */
#define SAGA_ADC_MAX 4095u

/* What the pin of a channel does, as saga_board_t.output receives it:
 * a servo's pulse width in half-microseconds (0: no pulses, the pin low),
 * a PWM's share of each period the pin is HIGH (0..255: 0 is always low,
 * 255 always high), a digital pin's level (0 LOW, 1 HIGH). Polarity has
 * been applied: this is the pin, not the logical value. */
typedef int32_t saga_drive_t;

/* The board. Functions that a board has no use for may be NULL where
 * marked. */
typedef struct {
	/* Drive channel ch's pin. Required. */
	void (*output)(void *ctx, uint8_t ch, const saga_channel_t *c, saga_drive_t drive);
	/* 1 while the e-stop input is active (pressed, or its wire cut). NULL:
	 * no e-stop. */
	uint8_t (*estop)(void *ctx);
	/* 1 while channel ch's driver reports a fault (over-current, stall).
	 * NULL: no fault sensing. */
	uint8_t (*fault)(void *ctx, uint8_t ch);
	/* Read supply i into *counts; 0 if it cannot be read. NULL: none. */
	uint8_t (*adc)(void *ctx, uint8_t i, uint16_t *counts);
	/* The next received byte, or -1 if none is waiting. Required. */
	int (*rx)(void *ctx);
	/* Send n bytes (one whole frame). Required. */
	void (*tx)(void *ctx, const uint8_t *p, uint8_t n);
	/* Milliseconds since some fixed moment; wraps at 2^32. Required. */
	uint32_t (*millis)(void *ctx);
	void *ctx; /* passed to each */
} saga_board_t;

/* Everything that makes one MCU. The tables may live in flash on AVR
 * (SAGA_ROM, see below). */
typedef struct {
	const saga_channel_t *channels;
	uint8_t nch;                 /* 0..SAGA_MAX_CHANNELS */
	const saga_supply_t *supplies;
	uint8_t nsup;                /* 0..SAGA_MAX_SUPPLIES */
	uint8_t window;              /* duplicate cache, 1..SAGA_MAX_WINDOW */
	uint16_t max_duration_ms;    /* the link watchdog, 1..65535 */
	uint16_t telemetry_ms;       /* 1..65535 */
	uint16_t frame_gap_ms;       /* a pause this long ends a partial frame (>= 30 byte times) */
	uint16_t estop_release_ms;   /* the e-stop input must stay inactive this long to clear ESTOP */
	const saga_board_t *board;
} saga_config_t;

/* Tables in program memory on AVR, so that they take no RAM. */
#if defined(__AVR__)
#include <avr/pgmspace.h>
#define SAGA_ROM PROGMEM
#else
#define SAGA_ROM
#endif

/* Errors of saga_check_config. */
enum {
	SAGA_OK = 0,
	SAGA_ERR_COUNTS = 1,      /* nch, nsup or window out of range; a required function missing */
	SAGA_ERR_KIND = 2,        /* unknown kind, or an active-low servo */
	SAGA_ERR_RANGE = 3,       /* min > max, or outside the kind's range */
	SAGA_ERR_SAFE = 4,        /* the safe value outside min..max, or a detached channel's not 0 */
	SAGA_ERR_PULSE = 5,       /* a servo's pulse_min_us >= pulse_max_us, or beyond 65535 half-us */
	SAGA_ERR_SUPPLY = 6,      /* uv_per_count 0 or too large, min_mv > max_mv */
	SAGA_ERR_TIMES = 7        /* a zero duration */
};

/* One entry of the duplicate cache: a request acted on and its answer. */
typedef struct {
	uint8_t valid, seq, type, len;
	uint8_t req[8];  /* the request's payload (its first 8 bytes) */
	uint16_t crc;    /* the request frame's CRC: compared for payloads over 8 bytes */
	uint8_t atype, alen;
	uint8_t ans[6];  /* the answer's payload; a DESCRIBE_ACK is rebuilt from ans[0] */
} saga_cached_t;

/* The state of one MCU. Treat as opaque. */
typedef struct {
	const saga_config_t *cfg;
	int32_t value[SAGA_MAX_CHANNELS]; /* the value applied, logical */
	uint8_t cflags[SAGA_MAX_CHANNELS];
	uint16_t faults;       /* WATCHDOG, RESET, ESTOP as latched; SUPPLY and OUTPUT as last seen */
	uint8_t session, expected, tel_seq, estop_in;
	uint32_t last_valid, last_tel, last_byte, estop_quiet;
	uint8_t rx[SAGA_MAX_FRAME];
	uint8_t rr, rn;        /* rx[rr..rn) is buffered */
	saga_cached_t cache[SAGA_MAX_WINDOW];
} saga_t;

/* saga_check_config returns SAGA_OK or the first SAGA_ERR_* found, and in
 * *where the channel or supply it was found at. */
int saga_check_config(const saga_config_t *cfg, uint8_t *where);

/* saga_init powers the MCU up: every output to its safe value (through the
 * polarity-aware path), no session, RESET set. Call it before anything
 * else, and before the board enables its output drivers where it can. It
 * returns saga_check_config's verdict, and on an error drives nothing. */
int saga_init(saga_t *s, const saga_config_t *cfg);

/* saga_run is one turn of the main loop: it reads the clock once, does
 * what time asks for (a stalled partial frame, the e-stop, output faults,
 * the watchdog, telemetry) and then takes up to SAGA_RX_BURST received
 * bytes. */
void saga_run(saga_t *s);

#ifndef SAGA_RX_BURST
#define SAGA_RX_BURST 64
#endif

/* saga_crc16 is CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF): "123456789"
 * gives 0x29B1. */
uint16_t saga_crc16(uint16_t crc, const uint8_t *p, uint8_t n);

/* Accessors for tests and boards. */
uint16_t saga_faults(const saga_t *s);
int32_t saga_value(const saga_t *s, uint8_t ch);
uint8_t saga_channel_flags(const saga_t *s, uint8_t ch);
uint8_t saga_in_session(const saga_t *s);

/* saga_drive_for returns what the pin of channel c does for the logical
 * value v (attached), or for a detached channel (detached != 0): the one
 * place polarity is applied. */
saga_drive_t saga_drive_for(const saga_channel_t *c, int32_t v, uint8_t detached);

/* saga_quantise returns the value channel c actually takes for v (v within
 * the kind's range): the servo pulse in half-microseconds of its
 * calibration, 8-bit PWM. */
int32_t saga_quantise(const saga_channel_t *c, int32_t v);

#ifdef __cplusplus
}
#endif

#endif
