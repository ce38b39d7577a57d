/*
 * rig.h: the parts of saga-avr-rig that its source files share.
 *
 * saga-avr-rig runs an AVR firmware ELF in simavr, in real time, with its
 * UART0 on a pty and a small HTTP control interface, and measures what the
 * firmware's pins do from simavr's cycle-exact events (docs/HIL.md, "The
 * emulated AVR rig"). It is a bench: a logic analyser on the pins, a bench
 * supply on ADC0, a switch on the e-stop input, a cable the test can cut
 * and disturb, and a reset button.
 */
#ifndef SAGA_AVR_RIG_H
#define SAGA_AVR_RIG_H

#include <stddef.h>
#include <stdint.h>

#include "sim_avr.h"
#include "avr_timer.h"

/* ---- time ------------------------------------------------------------- */

/* The rig keeps simulated time in step with the wall clock: cycle c of the
 * MCU happens at monotonic time anchor_mono_ns + c/hz (and at real time
 * anchor_real_ns + c/hz). When the rig falls behind the clock (the machine
 * is busy) it runs the MCU faster than real time until it has caught up;
 * only a lag over LAG_SLIP_NS (the rig was stopped) moves the anchors
 * forward instead (a "slip"), and that time is lost to the MCU. */
int64_t rig_mono_ns(void);
int64_t rig_real_ns(void);
int64_t cycles_to_ns(uint64_t cycles);
uint64_t ns_to_cycles(int64_t ns);
int64_t cycle_mono_ns(uint64_t cycle); /* monotonic ns of a cycle */
int64_t cycle_real_ns(uint64_t cycle); /* real-time (Unix) ns of a cycle */

/* ---- a growable text buffer (HTTP bodies) ----------------------------- */

typedef struct {
	char *p;
	size_t n, cap;
	int oom; /* an allocation failed: the text is cut short */
} buf_t;

void buf_printf(buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_free(buf_t *b);

/* ---- pins (pins.c) ---------------------------------------------------- */

/* What a watched pin's events mean to the decoder:
 *  ROLE_WAVE  a pulse train (servo pulses, hardware PWM): an event when the
 *             pulse width or period changes, when pulses start and stop;
 *  ROLE_LEVEL a level (a digital output, a relay): an event per change;
 *  ROLE_INPUT an input the rig drives (the e-stop): an event per change. */
enum { ROLE_WAVE = 0, ROLE_LEVEL, ROLE_INPUT };

/* A decoded change of one pin. */
enum { EV_LEVEL = 0, EV_PULSE, EV_RESET };
typedef struct {
	uint64_t cycle;   /* when it happened (for a pulse: its rising edge) */
	int64_t mono_ns;  /* cycle on the monotonic clock */
	int64_t real_ns;  /* cycle on the real-time clock */
	int16_t pin;      /* index into the watched pins; -1: the MCU (reset) */
	uint8_t kind;     /* EV_* */
	uint8_t level;    /* EV_LEVEL: the level it settled at */
	uint8_t driven;   /* the pin is an output (not an input: hi-Z or pull-up) */
	uint8_t pullup;   /* an input with its pull-up on */
	uint64_t high;    /* EV_PULSE: high time in cycles */
	uint64_t period;  /* EV_PULSE: rising edge to rising edge, 0 if not yet known */
} event_t;

int pins_add(const char *spec);      /* "PB1:wave", "PD7:level", "PD2:input" */
int pins_attach(avr_t *avr);         /* hook simavr's IRQs; after avr_init */
void pins_after_reset(void);         /* the MCU was reset: re-evaluate */
void pins_tick(uint64_t now);        /* time passes: notice pulses that stop */
void pins_json(buf_t *b);
void history_json(buf_t *b, uint64_t since);
void pins_record_reset(uint64_t cycle, const char *why);

/* The e-stop input (a normally-closed loop to ground on an input with the
 * internal pull-up): pressed opens the loop, so the pin reads high only if
 * the firmware enabled the pull-up. */
void estop_set(int pressed);
int estop_pressed(void);

/* ---- the serial line (link.c) ----------------------------------------- */

int link_open(const char *link_path, long baud); /* the pty; returns its master fd */
const char *link_pty_name(void);
void link_attach(avr_t *avr);          /* hook UART0 */
void link_after_reset(void);           /* re-arm timers simavr's reset cancelled */
void link_read_host(uint64_t now);     /* take what the host wrote */
void link_flush_host(uint64_t now);    /* write what is due to the host */
uint64_t link_next_due(void);          /* when the next byte to the host is due; 0: none */
int link_busy(uint64_t now);           /* bytes moved on the line lately */
void link_json(buf_t *b, uint64_t now);
void link_unplug(int unplugged);
int link_corrupt(const char *dir, long count, long every, long xor_mask);
int link_refuse(long channel, long value); /* channel -1: none */
void link_cleanup(void);
int link_fd(void);

#endif
