/*
 * pins.c: the rig's logic analyser. It follows the level of each watched
 * pin from simavr's events — PORT and DDR writes, the timers' output
 * compare units, the control registers that connect them — with the cycle
 * each change happened at, and decodes the changes into events: a pulse
 * train's width and period, a level, the start and the end of pulses.
 *
 * The level is worked out the way the silicon does it, not read from
 * simavr's pin IRQs: simavr re-raises every output pin of a port with its
 * PORT bit whenever any PORT or DDR bit of the port is written, so a write
 * to PORTB (the relay) would end a servo pulse on PB1 early. Here a pin
 * whose compare unit is connected (COMnx != 0) and whose DDR bit is set
 * shows its compare unit's output; otherwise an output shows its PORT bit
 * and an input its pull-up.
 *
 * Three differences between simavr 1.6 and an ATmega328P matter to what a
 * servo or a PWM output does, and are corrected here:
 *  - simavr 1.6 takes Timer1's mode 14 (fast PWM, TOP = ICR1: the servo
 *    mode) for one of its phase-correct kinds, whose OCR1x writes it never
 *    applies: a servo would keep its first pulse width forever.
 *  - In fast PWM the silicon double-buffers OCRnx and takes the new value
 *    at BOTTOM; simavr's fast PWM takes it at once, so a write between the
 *    compare match and the end of the period makes a runt pulse.
 *    The rig holds OCRnx writes in fast PWM (by the WGM bits, as the
 *    silicon reads them) and applies them one cycle before the next
 *    overflow, straight to the comparator. (Read back by the firmware,
 *    OCRnx shows the old value until then.)
 *  - With OCRnx at or above TOP in fast PWM the silicon's output stays at
 *    its set level (non-inverting: constantly high); simavr clears it at
 *    every overflow. The rig shows the silicon's level.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rig.h"
#include "avr_ioport.h"
#include "avr_timer.h"
#include "sim_io.h"

/* ATmega328P data-space addresses (datasheet, "Register Summary"). */
#define A_PINB 0x23
#define A_PINC 0x26
#define A_PIND 0x29
#define A_TCCR0A 0x44
#define A_TCCR0B 0x45
#define A_OCR0A 0x47
#define A_OCR0B 0x48
#define A_TCCR1A 0x80
#define A_TCCR1B 0x81
#define A_OCR1AL 0x88
#define A_OCR1AH 0x89
#define A_OCR1BL 0x8A
#define A_OCR1BH 0x8B
#define A_TCCR2A 0xB0
#define A_TCCR2B 0xB1
#define A_OCR2A 0xB3
#define A_OCR2B 0xB4

/* A compare output unit: the timer and comparator behind a pin. */
typedef struct {
	const char *name;
	char timer;        /* '0', '1', '2' */
	int comp;          /* AVR_TIMER_COMPA, AVR_TIMER_COMPB */
	uint16_t tccra;    /* the register holding COMnx */
	int com_shift;     /* COMnx1:0's position in it */
	char port;
	int bit;
	uint16_t ocr_l, ocr_h; /* ocr_h 0: an 8-bit register */
	avr_timer_t *t;
	int state;         /* OCnx as the waveform generator last set it */
	/* The fast-PWM double buffer (see the top of this file). */
	int pending;
	uint16_t shadow;
	uint8_t temp_hi;   /* the high byte written first, as the TEMP register holds it */
	avr_io_write_t saved_l, saved_h;
	void *param_l, *param_h;
} oc_t;

static oc_t ocs[] = {
	{"OC0A", '0', AVR_TIMER_COMPA, A_TCCR0A, 6, 'D', 6, A_OCR0A, 0, NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL},
	{"OC0B", '0', AVR_TIMER_COMPB, A_TCCR0A, 4, 'D', 5, A_OCR0B, 0, NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL},
	{"OC1A", '1', AVR_TIMER_COMPA, A_TCCR1A, 6, 'B', 1, A_OCR1AL, A_OCR1AH, NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL},
	{"OC1B", '1', AVR_TIMER_COMPB, A_TCCR1A, 4, 'B', 2, A_OCR1BL, A_OCR1BH, NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL},
	{"OC2A", '2', AVR_TIMER_COMPA, A_TCCR2A, 6, 'B', 3, A_OCR2A, 0, NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL},
	{"OC2B", '2', AVR_TIMER_COMPB, A_TCCR2A, 4, 'D', 3, A_OCR2B, 0, NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL},
};
#define NOC ((int)(sizeof(ocs) / sizeof(ocs[0])))

/* The decoder of a ROLE_WAVE pin. */
enum { W_STATIC = 0, W_PENDING, W_PULSING };

typedef struct {
	char name[4];
	char port;
	int bit;
	int role;
	int oc; /* index into ocs, -1: none */
	/* now */
	int level, driven, pullup;
	uint64_t since; /* the cycle of the last change of level */
	uint64_t edges;
	/* the last edges and what they measured */
	uint64_t rise, fall, prev_rise;
	uint64_t high, period;
	/* the decoded waveform */
	int w;
	uint64_t whigh, wperiod;
	uint64_t last_event; /* the cycle of its last event */
} pin_t;

#define MAXPINS 16
static pin_t pins[MAXPINS];
static int npins;
static avr_t *A;

/* A pulse width or period that differs by more than this many cycles is a
 * change. Edges are exact to the cycle (see oc_notify), so this only
 * absorbs rounding. */
#define WAVE_TOL 2

/* ---- events ------------------------------------------------------------ */

#define NEVENTS 16384
static event_t ring[NEVENTS];
static uint64_t nevents; /* events ever recorded; ring holds the last NEVENTS */

static void record(int pin, uint64_t cycle, int kind, int level, int driven, int pullup, uint64_t high, uint64_t period)
{
	event_t *e = &ring[nevents % NEVENTS];
	e->cycle = cycle;
	e->mono_ns = cycle_mono_ns(cycle);
	e->real_ns = cycle_real_ns(cycle);
	e->pin = (int16_t)pin;
	e->kind = (uint8_t)kind;
	e->level = (uint8_t)level;
	e->driven = (uint8_t)driven;
	e->pullup = (uint8_t)pullup;
	e->high = high;
	e->period = period;
	nevents++;
}

static void ev_level(pin_t *p, int level, uint64_t cycle)
{
	record((int)(p - pins), cycle, EV_LEVEL, level, p->driven, p->pullup, 0, 0);
	if (cycle > p->last_event)
		p->last_event = cycle;
}

static void ev_pulse(pin_t *p, uint64_t cycle)
{
	record((int)(p - pins), cycle, EV_PULSE, 1, p->driven, p->pullup, p->whigh, p->wperiod);
	if (cycle > p->last_event)
		p->last_event = cycle;
}

static char reset_why[32];
void pins_record_reset(uint64_t cycle, const char *why)
{
	snprintf(reset_why, sizeof reset_why, "%s", why);
	record(-1, cycle, EV_RESET, 0, 0, 0, 0, 0);
}

/* ---- registration -------------------------------------------------------- */

int pins_add(const char *spec)
{
	if (npins == MAXPINS)
		return -1;
	const char *colon = strchr(spec, ':');
	if (strlen(spec) < 3 || spec[0] != 'P' || !strchr("BCD", spec[1]) || spec[2] < '0' || spec[2] > '7' ||
	    (colon && colon != spec + 3) || (!colon && spec[3] != 0))
		return -1;
	pin_t *p = &pins[npins];
	memset(p, 0, sizeof *p);
	memcpy(p->name, spec, 3);
	p->port = spec[1];
	p->bit = spec[2] - '0';
	p->role = ROLE_LEVEL;
	if (colon) {
		if (!strcmp(colon + 1, "wave"))
			p->role = ROLE_WAVE;
		else if (!strcmp(colon + 1, "level"))
			p->role = ROLE_LEVEL;
		else if (!strcmp(colon + 1, "input"))
			p->role = ROLE_INPUT;
		else
			return -1;
	}
	for (int i = 0; i < npins; i++)
		if (pins[i].port == p->port && pins[i].bit == p->bit)
			return -1;
	p->oc = -1;
	for (int i = 0; i < NOC; i++)
		if (ocs[i].port == p->port && ocs[i].bit == p->bit)
			p->oc = i;
	npins++;
	return 0;
}

/* ---- the level of a pin, as the silicon drives it ---------------------- */

static uint16_t port_base(char port)
{
	return port == 'B' ? A_PINB : port == 'C' ? A_PINC : A_PIND;
}

static uint16_t oc_ocr(const oc_t *o)
{
	return (uint16_t)(A->data[o->ocr_l] | (o->ocr_h ? A->data[o->ocr_h] << 8 : 0));
}

static int oc_com(const oc_t *o)
{
	return (A->data[o->tccra] >> o->com_shift) & 3;
}

/* wgm is the timer's waveform generation mode from its WGM bits. */
static int wgm(const oc_t *o)
{
	uint8_t a = A->data[o->tccra], b = A->data[o->tccra + 1]; /* TCCRnB follows TCCRnA */
	if (o->timer == '1')
		return (a & 3) | ((b >> 3) & 3) << 2;
	return (a & 3) | ((b >> 3) & 1) << 2;
}

/* fast_pwm: the timer is in a fast PWM mode (Timer0/2: 3, 7; Timer1: 5,
 * 6, 7, 14, 15). top_reg: this comparator's OCR is the mode's TOP (OCRnA
 * in modes 7 and 15), not a compare output of its own. */
static int fast_pwm(const oc_t *o, int *top_reg)
{
	int m = wgm(o);
	int fast = o->timer == '1' ? (m == 5 || m == 6 || m == 7 || m == 14 || m == 15) : (m == 3 || m == 7);
	*top_reg = o->comp == AVR_TIMER_COMPA && (o->timer == '1' ? m == 15 : m == 7);
	return fast;
}

/* oc_fixed reports whether OCnx is held at one level because OCRnx is at or
 * above TOP in fast PWM, and which. */
static int oc_fixed(const oc_t *o, int *level)
{
	const avr_timer_t *t = o->t;
	int top_reg;
	if (!t || !fast_pwm(o, &top_reg) || top_reg || !t->tov_top)
		return 0;
	if (oc_ocr(o) < t->tov_top)
		return 0;
	switch (oc_com(o)) {
	case 2:
		*level = 1;
		return 1;
	case 3:
		*level = 0;
		return 1;
	}
	return 0;
}

static int oc_level(const oc_t *o)
{
	int l;
	if (oc_fixed(o, &l))
		return l;
	return o->state;
}

/* The e-stop loop: closed (not pressed) holds the input low; open
 * (pressed) leaves it to the pull-up, or floating — read here as low, the
 * reading that misses the press — without it. */
static int estop_is_pressed;
int estop_pressed(void) { return estop_is_pressed; }

static void pin_now(const pin_t *p, int ddr_override, int *level, int *driven, int *pullup)
{
	uint16_t base = port_base(p->port);
	uint8_t ddr = ddr_override >= 0 ? (uint8_t)ddr_override : A->data[base + 1];
	uint8_t port = A->data[base + 2];
	uint8_t m = (uint8_t)(1 << p->bit);
	if ((ddr & m) && p->oc >= 0 && oc_com(&ocs[p->oc])) {
		*driven = 1, *pullup = 0, *level = oc_level(&ocs[p->oc]);
	} else if (ddr & m) {
		*driven = 1, *pullup = 0, *level = !!(port & m);
	} else {
		*driven = 0, *pullup = !!(port & m);
		*level = p->role == ROLE_INPUT ? (estop_is_pressed && *pullup) : *pullup;
	}
}

/* ---- edges and the decoder ------------------------------------------------ */

static uint64_t max_period(void)
{
	/* Longer than any servo frame (20 ms) or PWM period: a pin high for
	 * longer is a level, not a pulse; pulses this far apart are no train. */
	return A->frequency / 20; /* 50 ms */
}

static uint64_t absdiff(uint64_t a, uint64_t b) { return a > b ? a - b : b - a; }

static void pin_edge(pin_t *p, int level, uint64_t c)
{
	p->edges++;
	p->since = c;
	if (level) {
		p->prev_rise = p->rise;
		p->rise = c;
		if (p->prev_rise && c > p->prev_rise)
			p->period = c - p->prev_rise;
	} else {
		p->fall = c;
		if (p->rise && c >= p->rise)
			p->high = c - p->rise;
	}
	if (p->role != ROLE_WAVE) {
		ev_level(p, level, c);
		return;
	}
	if (level) {
		switch (p->w) {
		case W_STATIC:
			p->w = W_PENDING; /* a pulse, or a level: its fall (or none) tells */
			break;
		case W_PULSING:
			if (p->period <= max_period() &&
			    (!p->wperiod || absdiff(p->period, p->wperiod) > WAVE_TOL)) {
				/* The period became known, or changed: restate the pulse. */
				p->wperiod = p->period;
				ev_pulse(p, p->prev_rise);
			}
			break;
		}
		return;
	}
	switch (p->w) {
	case W_PENDING:
		p->w = W_PULSING;
		p->whigh = p->high;
		p->wperiod = p->prev_rise && p->period <= max_period() ? p->period : 0;
		ev_pulse(p, p->rise);
		break;
	case W_PULSING:
		if (absdiff(p->high, p->whigh) > WAVE_TOL) {
			p->whigh = p->high;
			ev_pulse(p, p->rise);
		}
		break;
	case W_STATIC:
		ev_level(p, 0, c); /* a level high, now low */
		break;
	}
}

/* eval looks at every watched pin of port (0: all) and records what
 * changed at cycle c. ddr_override is the port's DDR about to be written
 * (-1: as it is). */
static void eval(char port, int ddr_override, uint64_t c)
{
	for (int i = 0; i < npins; i++) {
		pin_t *p = &pins[i];
		if (port && p->port != port)
			continue;
		int level, driven, pullup;
		pin_now(p, ddr_override, &level, &driven, &pullup);
		int other = driven != p->driven || pullup != p->pullup;
		p->driven = driven, p->pullup = pullup;
		if (level != p->level) {
			p->level = level;
			pin_edge(p, level, c);
		} else if (other && p->role != ROLE_WAVE) {
			ev_level(p, level, c); /* a relay driven low from hi-Z is a change */
		}
	}
}

/* ---- inputs the rig drives ---------------------------------------------------- */

static void apply_inputs(char port, int ddr_override)
{
	for (char pc = 'B'; pc <= 'D'; pc++) {
		if (port && pc != port)
			continue;
		uint8_t mask = 0, value = 0;
		for (int i = 0; i < npins; i++) {
			pin_t *p = &pins[i];
			if (p->port != pc || p->role != ROLE_INPUT)
				continue;
			int level, driven, pullup;
			pin_now(p, ddr_override, &level, &driven, &pullup);
			if (driven)
				continue; /* the firmware made it an output: not ours to drive */
			mask |= (uint8_t)(1 << p->bit);
			value |= (uint8_t)(level << p->bit);
			/* Through the IRQ, so INT0 and pin-change interrupts see the
			 * edge; into PIN too, which a filtered IRQ that did not change
			 * (after a reset) would leave stale. */
			avr_raise_irq(avr_io_getirq(A, AVR_IOCTL_IOPORT_GETIRQ(pc), p->bit), (uint32_t)level);
			uint16_t pin_reg = port_base(pc);
			A->data[pin_reg] = (uint8_t)((A->data[pin_reg] & ~(1 << p->bit)) | (level << p->bit));
		}
		if (mask) {
			avr_ioport_external_t ext = {.name = (unsigned char)pc, .mask = mask, .value = value};
			avr_ioctl(A, AVR_IOCTL_IOPORT_SET_EXTERNAL(pc), &ext);
		}
	}
}

void estop_set(int pressed)
{
	estop_is_pressed = !!pressed;
	apply_inputs(0, -1);
	eval(0, -1, A->cycle);
}

/* ---- simavr's events -------------------------------------------------------- */

static void port_notify(struct avr_irq_t *irq, uint32_t value, void *param)
{
	(void)irq, (void)value;
	char port = (char)(intptr_t)param;
	apply_inputs(port, -1);
	eval(port, -1, A->cycle);
}

static void ddr_notify(struct avr_irq_t *irq, uint32_t value, void *param)
{
	(void)irq;
	char port = (char)(intptr_t)param;
	/* Raised before the DDR register is written: use the new value. */
	apply_inputs(port, (int)(value & 0xff));
	eval(port, (int)(value & 0xff), A->cycle);
}

static void control_notify(struct avr_irq_t *irq, uint32_t value, void *param)
{
	(void)irq, (void)value, (void)param;
	eval(0, -1, A->cycle); /* COMnx changed: pins connect to or leave their compare units */
}

static int near(uint64_t cand, uint64_t now)
{
	/* An event's exact cycle is at most one instruction (or an interrupt
	 * entry) behind simavr's clock when the IRQ is raised. */
	return cand <= now && now - cand <= 64;
}

/* oc_notify: a compare unit set or cleared OCnx. simavr raises the IRQ at
 * the first instruction boundary after the event; the event's own cycle
 * is worked out from the timer: the overflow at tov_base, the compare match
 * comp_cycles after it. */
static void oc_notify(struct avr_irq_t *irq, uint32_t value, void *param)
{
	(void)irq;
	oc_t *o = param;
	int level = (int)(value & 1);
	o->state = level;
	uint64_t now = A->cycle, c = now;
	const avr_timer_t *t = o->t;
	if (t) {
		int com = oc_com(o);
		/* At the overflow: non-inverting sets (COM 2), inverting clears (3). */
		int at_overflow = (com == 2 && level) || (com == 3 && !level);
		uint64_t tov = t->tov_base, match = t->tov_base + t->comp[o->comp].comp_cycles;
		if (at_overflow && near(tov, now))
			c = tov;
		else if (!at_overflow && near(match, now))
			c = match;
		else if (near(tov, now))
			c = tov; /* a match at TOP, dispatched with the overflow */
	}
	eval(o->port, -1, c);
}

/* ---- the fast-PWM double buffer ---------------------------------------- */

static void oc_write_through(oc_t *o, uint16_t v)
{
	if (o->ocr_h) {
		if (o->saved_h)
			o->saved_h(A, o->ocr_h, (uint8_t)(v >> 8), o->param_h);
		else
			A->data[o->ocr_h] = (uint8_t)(v >> 8);
	}
	if (o->saved_l)
		o->saved_l(A, o->ocr_l, (uint8_t)v, o->param_l);
	else
		A->data[o->ocr_l] = (uint8_t)v;
}

/* running: the timer counts from its own clock, so its overflows are due. */
static int running(const avr_timer_t *t)
{
	return t && t->cs_div_value && t->tov_cycles > 1;
}

static void oc_apply(oc_t *o)
{
	if (!o->pending)
		return;
	o->pending = 0;
	int l, top_reg;
	int fixed = oc_fixed(o, &l);
	int before = oc_level(o);
	avr_timer_t *t = o->t;
	if (fast_pwm(o, &top_reg) && !top_reg && running(t)) {
		/* Straight to the comparator, as simavr's own reconfigure would
		 * set it (which mode 14 never gets): armed at the overflow
		 * one cycle from now. */
		A->data[o->ocr_l] = (uint8_t)o->shadow;
		if (o->ocr_h)
			A->data[o->ocr_h] = (uint8_t)(o->shadow >> 8);
		t->comp[o->comp].comp_cycles = o->shadow <= t->tov_top ? t->cs_div_value * ((uint64_t)o->shadow + 1) : 0;
	} else {
		oc_write_through(o, o->shadow);
	}
	if (fixed && !oc_fixed(o, &l))
		o->state = before; /* leaving a held level: OCnx is where the pin was */
	eval(o->port, -1, A->cycle);
}

static avr_cycle_count_t oc_apply_timer(avr_t *avr, avr_cycle_count_t when, void *param)
{
	(void)avr, (void)when;
	oc_apply(param);
	return 0;
}

static void oc_write(oc_t *o, uint16_t v)
{
	const avr_timer_t *t = o->t;
	int top_reg;
	o->shadow = v;
	o->pending = 1;
	if (fast_pwm(o, &top_reg) && running(t)) {
		uint64_t at = t->tov_base + t->tov_cycles - 1; /* one cycle before BOTTOM */
		if (at > A->cycle && at - A->cycle <= t->tov_cycles) {
			avr_cycle_timer_register(A, at - A->cycle, oc_apply_timer, o);
			return;
		}
	}
	avr_cycle_timer_cancel(A, oc_apply_timer, o);
	oc_apply(o);
}

static void ocr_l_write(struct avr_t *avr, avr_io_addr_t addr, uint8_t v, void *param)
{
	(void)avr, (void)addr;
	oc_t *o = param;
	oc_write(o, (uint16_t)(o->ocr_h ? (o->temp_hi << 8 | v) : v));
}

static void ocr_h_write(struct avr_t *avr, avr_io_addr_t addr, uint8_t v, void *param)
{
	(void)avr, (void)addr;
	((oc_t *)param)->temp_hi = v; /* taken with the low byte, as the silicon's TEMP */
}

static void intercept(uint16_t addr, avr_io_write_t w, void *param, avr_io_write_t *saved, void **saved_param)
{
	avr_io_addr_t io = AVR_DATA_TO_IO(addr);
	*saved = A->io[io].w.c;
	*saved_param = A->io[io].w.param;
	A->io[io].w.c = w;
	A->io[io].w.param = param;
}

static avr_timer_t *find_timer(char name)
{
	for (avr_io_t *io = A->io_port; io; io = io->next)
		if (io->kind && !strcmp(io->kind, "timer") && ((avr_timer_t *)io)->name == name)
			return (avr_timer_t *)io;
	return NULL;
}

int pins_attach(avr_t *avr)
{
	A = avr;
	for (int i = 0; i < NOC; i++) {
		oc_t *o = &ocs[i];
		o->t = find_timer(o->timer);
		if (!o->t) {
			fprintf(stderr, "saga-avr-rig: %s: no timer %c in this MCU\n", o->name, o->timer);
			return -1;
		}
		intercept(o->ocr_l, ocr_l_write, o, &o->saved_l, &o->param_l);
		if (o->ocr_h)
			intercept(o->ocr_h, ocr_h_write, o, &o->saved_h, &o->param_h);
		avr_irq_register_notify(avr_io_getirq(avr, AVR_IOCTL_TIMER_GETIRQ(o->timer), TIMER_IRQ_OUT_COMP + o->comp),
					oc_notify, o);
	}
	for (char pc = 'B'; pc <= 'D'; pc++) {
		avr_irq_register_notify(avr_io_getirq(avr, AVR_IOCTL_IOPORT_GETIRQ(pc), IOPORT_IRQ_REG_PORT), port_notify,
					(void *)(intptr_t)pc);
		avr_irq_register_notify(avr_io_getirq(avr, AVR_IOCTL_IOPORT_GETIRQ(pc), IOPORT_IRQ_DIRECTION_ALL), ddr_notify,
					(void *)(intptr_t)pc);
	}
	uint16_t ctl[] = {A_TCCR0A, A_TCCR0B, A_TCCR1A, A_TCCR1B, A_TCCR2A, A_TCCR2B};
	for (size_t i = 0; i < sizeof ctl / sizeof ctl[0]; i++)
		avr_irq_register_notify(avr_iomem_getirq(avr, ctl[i], NULL, AVR_IOMEM_IRQ_ALL), control_notify, NULL);
	for (int i = 0; i < npins; i++) {
		pin_t *p = &pins[i];
		pin_now(p, -1, &p->level, &p->driven, &p->pullup);
		p->since = avr->cycle;
	}
	apply_inputs(0, -1);
	return 0;
}

void pins_after_reset(void)
{
	/* The reset zeroed the registers and cancelled every cycle timer. */
	for (int i = 0; i < NOC; i++)
		ocs[i].state = 0, ocs[i].pending = 0, ocs[i].temp_hi = 0;
	apply_inputs(0, -1);
	eval(0, -1, A->cycle);
}

void pins_tick(uint64_t now)
{
	uint64_t maxp = max_period();
	for (int i = 0; i < npins; i++) {
		pin_t *p = &pins[i];
		if (p->role != ROLE_WAVE)
			continue;
		if (p->w == W_PENDING && now - p->rise > maxp) {
			p->w = W_STATIC; /* high too long for a pulse: a level */
			ev_level(p, 1, p->rise);
		} else if (p->w == W_PULSING) {
			uint64_t T = p->wperiod ? p->wperiod : maxp;
			if (now > p->rise + T + T / 2) {
				/* The next pulse did not come: pulses stopped where it
				 * was due (low), or the last one never ended (high). */
				p->w = W_STATIC;
				ev_level(p, p->level, p->level ? p->rise : p->rise + T);
			}
		}
	}
}

/* ---- JSON ------------------------------------------------------------------ */

static const char *role_name[] = {"wave", "level", "input"};
static const char *wave_name[] = {"static", "pending", "pulsing"};
static const char *kind_name[] = {"level", "pulse", "reset"};

void pins_json(buf_t *b)
{
	buf_printf(b, "\"estop\":{\"pressed\":%s},\"events\":%llu,\"pins\":[", estop_is_pressed ? "true" : "false",
		   (unsigned long long)nevents);
	for (int i = 0; i < npins; i++) {
		const pin_t *p = &pins[i];
		buf_printf(b,
			   "%s{\"name\":\"%s\",\"role\":\"%s\",\"level\":%d,\"driven\":%s,\"pullup\":%s,"
			   "\"since_cycle\":%llu,\"since_mono_ns\":%lld,\"edges\":%llu,\"rise_cycle\":%llu,\"fall_cycle\":%llu,"
			   "\"high_cycles\":%llu,\"period_cycles\":%llu,\"wave\":\"%s\",\"wave_high_cycles\":%llu,"
			   "\"wave_period_cycles\":%llu,\"last_event_cycle\":%llu,\"compare\":\"%s\"}",
			   i ? "," : "", p->name, role_name[p->role], p->level, p->driven ? "true" : "false",
			   p->pullup ? "true" : "false", (unsigned long long)p->since,
			   (long long)cycle_mono_ns(p->since), (unsigned long long)p->edges,
			   (unsigned long long)p->rise, (unsigned long long)p->fall, (unsigned long long)p->high,
			   (unsigned long long)p->period, p->role == ROLE_WAVE ? wave_name[p->w] : "static",
			   (unsigned long long)p->whigh, (unsigned long long)p->wperiod, (unsigned long long)p->last_event,
			   p->oc >= 0 && oc_com(&ocs[p->oc]) ? ocs[p->oc].name : "");
	}
	buf_printf(b, "]");
}

void history_json(buf_t *b, uint64_t since)
{
	uint64_t first = nevents > NEVENTS ? nevents - NEVENTS : 0;
	int lost = first > 0 && ring[first % NEVENTS].cycle > since;
	buf_printf(b, "{\"lost\":%s,\"events\":[", lost ? "true" : "false");
	int n = 0;
	for (uint64_t i = first; i < nevents; i++) {
		const event_t *e = &ring[i % NEVENTS];
		if (e->cycle < since)
			continue;
		buf_printf(b,
			   "%s{\"pin\":\"%s\",\"kind\":\"%s\",\"cycle\":%llu,\"mono_ns\":%lld,\"real_ns\":%lld,\"level\":%d,"
			   "\"driven\":%s,\"pullup\":%s,\"high_cycles\":%llu,\"period_cycles\":%llu}",
			   n++ ? "," : "", e->pin >= 0 ? pins[e->pin].name : "MCU", kind_name[e->kind],
			   (unsigned long long)e->cycle, (long long)e->mono_ns, (long long)e->real_ns, e->level,
			   e->driven ? "true" : "false", e->pullup ? "true" : "false", (unsigned long long)e->high,
			   (unsigned long long)e->period);
	}
	buf_printf(b, "],\"last_reset\":\"%s\"}", reset_why);
}
