/*
 * saga_atmega328p.c: the ATmega328P board layer (Arduino Uno, Nano), on
 * avr-libc alone. The pin map and the channel table are in
 * saga_atmega328p.h. Compiled to nothing for any other MCU.
 */
#if defined(__AVR_ATmega328P__)

#include "saga_atmega328p.h"

#include <avr/interrupt.h>
#include <avr/io.h>
#include <avr/wdt.h>
#include <util/atomic.h>

#ifndef F_CPU
#define F_CPU 16000000UL
#endif

/* --- reset cause and the hardware watchdog ----------------------------------- */

uint8_t saga_atmega328p_mcusr __attribute__((section(".noinit")));

/* Runs before main (and before Arduino's init): reads and clears MCUSR, so
 * that WDRF no longer forces the watchdog on, and starts the watchdog
 * against a hung firmware. Every boot, a watchdog reset's included, then
 * reports RESET and drives every output safe (saga_init). */
void saga_atmega328p_boot(void) __attribute__((naked, used, section(".init3")));
void saga_atmega328p_boot(void) {
	saga_atmega328p_mcusr = MCUSR;
	MCUSR = 0;
	wdt_enable(WDTO_250MS);
}

/* --- the millisecond clock: Timer2 CTC ------------------------------------------ */

static volatile uint32_t ms;

ISR(TIMER2_COMPA_vect) { ms++; }

static uint32_t board_millis(void *ctx) {
	uint32_t t;
	(void)ctx;
	ATOMIC_BLOCK(ATOMIC_RESTORESTATE) { t = ms; }
	return t;
}

/* --- UART0: interrupt-driven receive, polled transmit ---------------------------- */

#define RX_RING 64 /* a power of two */
static volatile uint8_t ring[RX_RING];
static volatile uint8_t ring_head, ring_tail; /* head: written by the ISR */

ISR(USART_RX_vect) {
	uint8_t c = UDR0;
	uint8_t next = (uint8_t)((ring_head + 1) & (RX_RING - 1));
	if (next != ring_tail) { /* full: the byte is lost, as on a noisy line */
		ring[ring_head] = c;
		ring_head = next;
	}
}

static int board_rx(void *ctx) {
	uint8_t c;
	(void)ctx;
	if (ring_tail == ring_head)
		return -1;
	c = ring[ring_tail];
	ring_tail = (uint8_t)((ring_tail + 1) & (RX_RING - 1));
	return c;
}

static void board_tx(void *ctx, const uint8_t *p, uint8_t n) {
	(void)ctx;
	while (n--) {
		while (!(UCSR0A & _BV(UDRE0)))
			;
		UDR0 = *p++;
	}
}

/* --- pins --------------------------------------------------------------------------- */

/* pin_bit finds an Arduino pin's port: D0..D7 port D, D8..D13 port B,
 * A0..A5 (14..19) port C. */
static uint8_t pin_bit(uint8_t pin, volatile uint8_t **port, volatile uint8_t **ddr) {
	if (pin < 8) {
		*port = &PORTD;
		*ddr = &DDRD;
		return _BV(pin);
	}
	if (pin < 14) {
		*port = &PORTB;
		*ddr = &DDRB;
		return _BV(pin - 8);
	}
	*port = &PORTC;
	*ddr = &DDRC;
	return _BV(pin - 14);
}

/* level sets a pin's level, then makes it an output: the level is right
 * before the driver is on, so an active-low relay never sees a LOW it was
 * not meant to. */
static void level(uint8_t pin, uint8_t high) {
	volatile uint8_t *port, *ddr;
	uint8_t bit = pin_bit(pin, &port, &ddr);
	ATOMIC_BLOCK(ATOMIC_RESTORESTATE) {
		if (high)
			*port |= bit;
		else
			*port &= (uint8_t)~bit;
		*ddr |= bit;
	}
}

static void servo(uint8_t pin, saga_drive_t half_us) {
	uint8_t com = pin == SAGA_ATMEGA328P_PIN_SERVO0 ? _BV(COM1A1) : _BV(COM1B1);
	if (half_us <= 0) { /* detached: no pulses, the pin low */
		TCCR1A &= (uint8_t)~com;
		level(pin, 0);
		return;
	}
	/* The pulse is OCRx + 1 ticks of 0.5 us. */
	if (pin == SAGA_ATMEGA328P_PIN_SERVO0)
		OCR1A = (uint16_t)(half_us - 1);
	else
		OCR1B = (uint16_t)(half_us - 1);
	level(pin, 0);
	TCCR1A |= com;
}

static void pwm(uint8_t pin, saga_drive_t duty) {
	uint8_t com = pin == 6 ? _BV(COM0A1) : _BV(COM0B1);
	if (duty <= 0 || duty >= 255) { /* always low or always high: no timer, no glitch */
		TCCR0A &= (uint8_t)~com;
		level(pin, duty > 0);
		return;
	}
	/* Fast PWM is high for OCR0x + 1 of 256 ticks: duty/256, near enough
	 * duty/255. */
	if (pin == 6)
		OCR0A = (uint8_t)(duty - 1);
	else
		OCR0B = (uint8_t)(duty - 1);
	level(pin, 0);
	TCCR0A |= com;
}

static void board_output(void *ctx, uint8_t ch, const saga_channel_t *c, saga_drive_t drive) {
	(void)ctx;
	(void)ch;
	switch (c->kind) {
	case SAGA_KIND_SERVO:
		servo(c->pin, drive);
		break;
	case SAGA_KIND_PWM:
		pwm(c->pin, drive);
		break;
	default:
		level(c->pin, drive != 0);
		break;
	}
}

/* --- e-stop and supply ---------------------------------------------------------------- */

static uint8_t board_estop(void *ctx) {
	(void)ctx;
	return (PIND & _BV(PD2)) != 0; /* HIGH: pressed (the contact opened) or the wire cut */
}

static const uint8_t adc_channel[] = {SAGA_ATMEGA328P_ADC_SUPPLY0};

static uint8_t board_adc(void *ctx, uint8_t i, uint16_t *counts) {
	(void)ctx;
	if (i >= sizeof adc_channel)
		return 0;
	ADMUX = (uint8_t)(_BV(REFS0) | adc_channel[i]); /* AVcc reference */
	ADCSRA |= _BV(ADSC);
	while (ADCSRA & _BV(ADSC))
		;
	*counts = ADC;
	return 1;
}

/* --- the tables ---------------------------------------------------------------------- */

static const saga_channel_t channels[] SAGA_ROM = SAGA_ATMEGA328P_CHANNELS;
static const saga_supply_t supplies[] SAGA_ROM = SAGA_ATMEGA328P_SUPPLIES;

static const saga_board_t board = {
	board_output, board_estop, 0, board_adc, board_rx, board_tx, board_millis, 0,
};

static const saga_config_t config = {
	channels,
	sizeof channels / sizeof channels[0],
	supplies,
	sizeof supplies / sizeof supplies[0],
	SAGA_ATMEGA328P_WINDOW,
	SAGA_ATMEGA328P_MAX_DURATION_MS,
	SAGA_ATMEGA328P_TELEMETRY_MS,
	SAGA_ATMEGA328P_FRAME_GAP_MS,
	SAGA_ATMEGA328P_ESTOP_RELEASE_MS,
	&board,
};

static saga_t saga;

/* pins_ok checks what the core cannot: each channel is on a pin that can
 * do its kind, and no pin is taken twice or by the UART, the e-stop or
 * the supply. */
static uint8_t pins_ok(void) {
	uint32_t used = _BV(0) | _BV(1) | _BV(SAGA_ATMEGA328P_PIN_ESTOP) | (1UL << (14 + SAGA_ATMEGA328P_ADC_SUPPLY0));
	uint8_t i;
	for (i = 0; i < config.nch; i++) {
		saga_channel_t c;
		uint32_t bit;
		memcpy_P(&c, &channels[i], sizeof c);
		if (c.pin > 19)
			return 0;
		bit = 1UL << c.pin;
		if (used & bit)
			return 0;
		used |= bit;
		if (c.kind == SAGA_KIND_SERVO && c.pin != SAGA_ATMEGA328P_PIN_SERVO0 && c.pin != SAGA_ATMEGA328P_PIN_SERVO1)
			return 0;
		if (c.kind == SAGA_KIND_PWM && c.pin != 5 && c.pin != 6)
			return 0;
	}
	return 1;
}

void saga_atmega328p_setup(void) {
	cli();
	wdt_reset();
	/* Timers first (they touch no pin until an output connects them). */
	TCCR0A = _BV(WGM01) | _BV(WGM00); /* Timer0: fast PWM, outputs disconnected */
	TCCR0B = _BV(CS01) | _BV(CS00);   /* /64 */
	TCCR1A = _BV(WGM11);              /* Timer1: mode 14, TOP = ICR1 */
	TCCR1B = _BV(WGM13) | _BV(WGM12) | _BV(CS11); /* /8: 0.5 us */
	ICR1 = 39999;                     /* 20 ms */
	TCCR2A = _BV(WGM21);              /* Timer2: CTC */
	TCCR2B = _BV(CS22);               /* /64: 250 kHz */
	OCR2A = 249;                      /* 1 ms */
	TIMSK2 = _BV(OCIE2A);
	if (!pins_ok() || saga_init(&saga, &config) != SAGA_OK) {
		/* A wrong table: drive nothing, say nothing. The host sees a
		 * silent board. */
		wdt_disable();
		for (;;)
			;
	}
	/* The e-stop: input, pulled up. */
	DDRD &= (uint8_t)~_BV(PD2);
	PORTD |= _BV(PD2);
	/* The supply: ADC on, /128 (125 kHz). */
	ADCSRA = _BV(ADEN) | _BV(ADPS2) | _BV(ADPS1) | _BV(ADPS0);
	/* UART0: 115200 8N1, double speed. */
	UBRR0 = (uint16_t)((F_CPU / 8 / SAGA_ATMEGA328P_BAUD) - 1);
	UCSR0A = _BV(U2X0);
	UCSR0C = _BV(UCSZ01) | _BV(UCSZ00);
	UCSR0B = _BV(RXEN0) | _BV(TXEN0) | _BV(RXCIE0);
	sei();
}

void saga_atmega328p_loop(void) {
	wdt_reset();
	saga_run(&saga);
}

#endif
