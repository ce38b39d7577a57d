/*
 * saga_atmega328p.h: the ATmega328P board (Arduino Uno, Nano) — its pin map
 * and channel table, in one place. docs/SERIAL.md ("The reference firmware")
 * and docs/HARDWARE.md show the same map; the config's mcu.channel is the
 * index in SAGA_ATMEGA328P_CHANNELS.
 *
 *   ch  kind     pin              polarity     range          safe   calibration
 *   0   servo    D9  = PB1 (OC1A)  -            0..180 deg     90     1000..2000 us
 *   1   servo    D10 = PB2 (OC1B)  -            0..180 deg     90     1000..2000 us
 *   2   pwm      D5  = PD5 (OC0B)  active-high  duty 0..1      0      8-bit
 *   3   digital  D7  = PD7         active-high  0/1            0
 *   4   digital  D8  = PB0         ACTIVE-LOW   0/1            0 (pin HIGH: an active-low relay OFF)
 *
 *   supply 0   A0 = ADC0 (PC0), AVcc 5 V reference, 1:3 divider: 14.663 mV/count
 *              (SUPPLY above 14.9 V: the divider saturates at 15 V)
 *   e-stop     D2 = PD2, input with the internal pull-up, active while HIGH
 *              (a normally-closed contact to GND: pressing it or cutting the
 *              wire stops)
 *   UART0      D0 RX, D1 TX, 115200 baud 8N1 (U2X), interrupt-driven receive
 *   clock      Timer2 CTC, 1 ms interrupt
 *   servos     Timer1 fast PWM mode 14, ICR1 = 39999, prescaler 8: 0.5 us
 *              steps at 50 Hz; a detached servo gets no pulses (pin LOW)
 *   PWM        Timer0 fast PWM, prescaler 64 (976 Hz), as Arduino's own
 *   watchdog   the AVR's (avr/wdt.h), 250 ms, enabled before main and fed
 *              by the main loop
 *
 * Edit the table for your robot: the pulse calibration of your servos
 * (pulse_min_us at 0 degrees, pulse_max_us at 180), the range each channel
 * accepts, the safe values (the same as the config's safe policies), and
 * which digital outputs are active-low. Servos take D9 and D10 only, PWM D5
 * or D6; a digital output any free pin of D3..D13 and A1..A5 (15..19).
 *
 * This header has no AVR code: host tests include it to check the table.
 */
#ifndef SAGA_ATMEGA328P_H
#define SAGA_ATMEGA328P_H

#include "saga_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Pins (Arduino numbers). */
#define SAGA_ATMEGA328P_PIN_SERVO0 9   /* PB1, OC1A */
#define SAGA_ATMEGA328P_PIN_SERVO1 10  /* PB2, OC1B */
#define SAGA_ATMEGA328P_PIN_PWM 5      /* PD5, OC0B */
#define SAGA_ATMEGA328P_PIN_DIGITAL 7  /* PD7 */
#define SAGA_ATMEGA328P_PIN_RELAY 8    /* PB0 */
#define SAGA_ATMEGA328P_PIN_ESTOP 2    /* PD2 */
#define SAGA_ATMEGA328P_ADC_SUPPLY0 0  /* A0, ADC0 */

/* The channel table: kind, pin, flags, pulse_min_us, pulse_max_us, min,
 * max, safe (thousandths of the unit). */
#define SAGA_ATMEGA328P_CHANNELS                                                                   \
	{                                                                                              \
		{SAGA_KIND_SERVO, SAGA_ATMEGA328P_PIN_SERVO0, 0, 1000, 2000, 0, 180000, 90000},            \
		{SAGA_KIND_SERVO, SAGA_ATMEGA328P_PIN_SERVO1, 0, 1000, 2000, 0, 180000, 90000},            \
		{SAGA_KIND_PWM, SAGA_ATMEGA328P_PIN_PWM, 0, 0, 0, 0, 1000, 0},                             \
		{SAGA_KIND_DIGITAL, SAGA_ATMEGA328P_PIN_DIGITAL, 0, 0, 0, 0, 1000, 0},                     \
		{SAGA_KIND_DIGITAL, SAGA_ATMEGA328P_PIN_RELAY, SAGA_ACTIVE_LOW, 0, 0, 0, 1000, 0},         \
	}

/* The supply table: microvolts per count (5000 mV x 3 / 1023), and the
 * readings outside which the board raises SUPPLY (min 0: none below). */
#define SAGA_ATMEGA328P_SUPPLIES  \
	{                             \
		{14663, 0, 14900},        \
	}

/* Protocol timing: window, max_duration_ms, telemetry_ms, frame_gap_ms,
 * estop_release_ms (the e-stop input must read inactive this long before
 * ESTOP clears: a bouncing contact does not release it early). */
#define SAGA_ATMEGA328P_WINDOW 4
#define SAGA_ATMEGA328P_MAX_DURATION_MS 500
#define SAGA_ATMEGA328P_TELEMETRY_MS 100
#define SAGA_ATMEGA328P_FRAME_GAP_MS 20
#define SAGA_ATMEGA328P_ESTOP_RELEASE_MS 50

/* The serial line. */
#define SAGA_ATMEGA328P_BAUD 115200UL

/* The sketch's setup() and loop() (AVR builds only). setup never returns
 * if the table is wrong: nothing is driven, nothing is sent. */
void saga_atmega328p_setup(void);
void saga_atmega328p_loop(void);

/* MCUSR as it was at reset (read and cleared before main). */
extern uint8_t saga_atmega328p_mcusr;

#ifdef __cplusplus
}
#endif

#endif
