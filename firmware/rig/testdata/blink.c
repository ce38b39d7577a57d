/*
 * blink.c: the rig's own test program for an ATmega328P at 16 MHz (avr-libc
 * only). It drives the firmware's pin map with known values, so that the
 * rig's measurements can be checked against what the program set:
 *
 *   PB1 (OC1A), PB2 (OC1B)  Timer1 fast PWM (mode 14), 50 Hz, 0.5 us steps:
 *                           1500 us and 1000 us pulses at start
 *   PD5 (OC0B)              Timer0 fast PWM, 8 bits, clk/64: OCR0B 63 at start
 *   PD7                     an output, low at start
 *   PB0                     an output, high at start (set before it is made
 *                           an output, so it never glitches low)
 *   PD2                     an input with its pull-up
 *   ADC0                    read with AVcc as the reference
 *   UART0                   115200 baud (U2X, UBRR 16), received by interrupt
 *
 * Its line commands (each ends with '\n'):
 *   A<us> B<us>  servo pulse widths   a0/a1  detach/attach OC1A (PB1 low)
 *   P<n>         OCR0B                D0/D1  PD7        R0/R1  PB0
 *   Q            answers "adc=<count> pd2=<level>"
 *   X<text>      answers the same line (the echo)
 *   W<ms>        a link watchdog: no byte for <ms> ms drives PD7 low and
 *                detaches OC1A; 0 turns it off
 *   H            hangs with interrupts off: the hardware watchdog resets it
 *   Z            sleeps with interrupts off: likewise
 *   Y<n><n bytes> answers those n bytes, raw
 * At start it prints "boot mcusr=<hex>" (MCUSR: 0x08 after a watchdog reset).
 */
#include <avr/interrupt.h>
#include <avr/io.h>
#include <avr/sleep.h>
#include <avr/wdt.h>
#include <stdint.h>
#include <stdlib.h>

static volatile uint8_t rx[128];
static volatile uint8_t rx_w, rx_r;
static volatile uint16_t ms;
static volatile uint16_t last_byte_ms;

ISR(USART_RX_vect)
{
	uint8_t b = UDR0;
	uint8_t next = (uint8_t)((rx_w + 1) & 127);
	if (next != rx_r) {
		rx[rx_w] = b;
		rx_w = next;
	}
	last_byte_ms = ms;
}

ISR(TIMER2_COMPA_vect) { ms++; }

static void put(uint8_t c)
{
	while (!(UCSR0A & (1 << UDRE0)))
		;
	UDR0 = c;
}

static void puts_(const char *s)
{
	while (*s)
		put((uint8_t)*s++);
}

static void putnum(uint16_t v, uint8_t base)
{
	char s[8];
	utoa(v, s, base);
	puts_(s);
}

static int getb(void)
{
	if (rx_r == rx_w)
		return -1;
	uint8_t b = rx[rx_r];
	rx_r = (uint8_t)((rx_r + 1) & 127);
	return b;
}

static uint8_t waitb(void)
{
	int b;
	while ((b = getb()) < 0)
		wdt_reset();
	return (uint8_t)b;
}

static uint16_t adc0(void)
{
	ADCSRA |= 1 << ADSC;
	while (ADCSRA & (1 << ADSC))
		;
	return ADC;
}

static void attach_a(uint8_t on)
{
	if (on) {
		TCCR1A |= 1 << COM1A1;
	} else {
		TCCR1A &= (uint8_t)~(1 << COM1A1);
		PORTB &= (uint8_t)~(1 << PB1);
	}
}

int main(void)
{
	uint8_t mcusr = MCUSR;
	MCUSR = 0;
	wdt_enable(WDTO_250MS);

	PORTB |= 1 << PB0; /* high first: an active-low load stays off */
	DDRB |= (1 << PB0) | (1 << PB1) | (1 << PB2);
	DDRD |= (1 << PD5) | (1 << PD7);
	PORTD |= 1 << PD2; /* the e-stop input's pull-up */

	ICR1 = 39999; /* 20 ms at clk/8 */
	OCR1A = 2999; /* 1500 us */
	OCR1B = 1999; /* 1000 us */
	TCCR1A = (1 << COM1A1) | (1 << COM1B1) | (1 << WGM11);
	TCCR1B = (1 << WGM13) | (1 << WGM12) | (1 << CS11);

	OCR0B = 63;
	TCCR0A = (1 << COM0B1) | (1 << WGM01) | (1 << WGM00);
	TCCR0B = (1 << CS01) | (1 << CS00);

	OCR2A = 249; /* 1 kHz at clk/64 */
	TCCR2A = 1 << WGM21;
	TCCR2B = 1 << CS22;
	TIMSK2 = 1 << OCIE2A;

	ADMUX = 1 << REFS0;
	ADCSRA = (1 << ADEN) | (7 << ADPS0);

	UBRR0 = 16;
	UCSR0A = 1 << U2X0;
	UCSR0C = 3 << UCSZ00;
	UCSR0B = (1 << RXEN0) | (1 << TXEN0) | (1 << RXCIE0);
	sei();

	puts_("boot mcusr=");
	putnum(mcusr, 16);
	put('\n');

	char line[64];
	uint8_t n = 0;
	uint16_t watchdog_ms = 0;
	uint8_t tripped = 0;
	set_sleep_mode(SLEEP_MODE_IDLE);
	for (;;) {
		wdt_reset();
		cli();
		uint16_t now = ms, last = last_byte_ms;
		uint8_t empty = rx_r == rx_w;
		if (empty) {
			sleep_enable();
			sei();
			sleep_cpu(); /* until a byte or the next millisecond */
			sleep_disable();
		}
		sei();
		if (watchdog_ms && !tripped && (uint16_t)(now - last) >= watchdog_ms) {
			tripped = 1;
			PORTD &= (uint8_t)~(1 << PD7);
			attach_a(0);
		}
		int c = getb();
		if (c < 0)
			continue;
		if (n == 0 && c == 'Y') {
			uint8_t k = waitb();
			while (k--)
				put(waitb());
			continue;
		}
		if (c != '\n') {
			if (n < sizeof line - 1)
				line[n++] = (char)c;
			continue;
		}
		line[n] = 0;
		uint16_t arg = (uint16_t)atoi(line + 1);
		switch (line[0]) {
		case 'A':
			OCR1A = (uint16_t)(arg * 2 - 1);
			break;
		case 'B':
			OCR1B = (uint16_t)(arg * 2 - 1);
			break;
		case 'a':
			attach_a(arg != 0);
			break;
		case 'P':
			OCR0B = (uint8_t)arg;
			break;
		case 'D':
			if (arg)
				PORTD |= 1 << PD7;
			else
				PORTD &= (uint8_t)~(1 << PD7);
			break;
		case 'R':
			if (arg)
				PORTB |= 1 << PB0;
			else
				PORTB &= (uint8_t)~(1 << PB0);
			break;
		case 'Q':
			puts_("adc=");
			putnum(adc0(), 10);
			puts_(" pd2=");
			putnum((PIND >> PD2) & 1, 10);
			put('\n');
			break;
		case 'X':
			puts_(line);
			put('\n');
			break;
		case 'W':
			watchdog_ms = arg;
			tripped = 0;
			break;
		case 'H':
			cli();
			for (;;)
				;
		case 'Z':
			cli();
			sleep_enable();
			sleep_cpu();
			for (;;)
				;
		}
		n = 0;
	}
}
