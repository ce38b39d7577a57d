/*
 * standin.c: a stand-in for the saga firmware on an ATmega328P at 16 MHz,
 * for the rig's own tests and for trying the HIL profile before the real
 * firmware (firmware/saga_mcu/, `make firmware`) is built. It is NOT the
 * product firmware: it speaks protocol v1 (docs/SERIAL.md) the way the
 * reference sketch does, on the product's fixed pin map, so that the rig's
 * Go side, the HIL profile and the measurements can be exercised end to
 * end. Where the real firmware decides differently (its safe values, its
 * servo range), the real firmware is right and the profile follows it.
 *
 *   ch0 servo  PB1 (OC1A)  0..180 deg -> 1000..2000 us, 0.5 us steps; safe 90
 *   ch1 servo  PB2 (OC1B)  likewise
 *   ch2 PWM    PD5 (OC0B)  duty 0..1 in 1/256 steps (0: pin low); safe 0
 *   ch3 digital PD7        active high; safe 0
 *   ch4 digital PB0        an active-low relay: 1 drives the pin low; safe 0
 *   supply 0   ADC0        1:3 divider, AVcc 5 V: 14.663 mV a count
 *   e-stop     PD2         input, pull-up, active high: outputs safe, SET
 *                          refused (NAK FAULT), fault ESTOP
 *   watchdog   500 ms without a valid in-order request: outputs safe; the
 *              hardware watchdog (120 ms) against a hang
 */
#include <avr/interrupt.h>
#include <avr/io.h>
#include <avr/wdt.h>
#include <stdint.h>
#include <string.h>

#define VERSION 1
#define NCH 5
#define NSUP 1
#define WINDOW 4
#define MAX_DURATION_MS 500
#define TELEMETRY_MS 100
#define GAP_MS 20
#define SYNC 0xA5
#define MAXPAY 200

enum { T_HELLO = 0x01, T_SET = 0x02, T_HALT = 0x03, T_PING = 0x04, T_TELEMETRY = 0xA0, T_NAK = 0xFF };
enum { NAK_BAD_CHANNEL = 1, NAK_RANGE = 2, NAK_MALFORMED = 3, NAK_UNSUPPORTED = 4, NAK_NO_SESSION = 5,
       NAK_VERSION = 6, NAK_FAULT = 7 };
enum { F_WATCHDOG = 1, F_RESET = 2, F_ESTOP = 16 };
enum { SERVO, PWM, DIGITAL, RELAY };

static const uint8_t kind[NCH] = {SERVO, SERVO, PWM, DIGITAL, RELAY};
static const int32_t safe_value[NCH] = {90000, 90000, 0, 0, 0};

static int32_t applied[NCH];
static uint8_t detached[NCH];
static uint16_t faults = F_RESET;
static uint8_t session, expected;

/* ---- time ---- */

static volatile uint16_t ms;
ISR(TIMER2_COMPA_vect) { ms++; }
static uint16_t now(void)
{
	uint8_t s = SREG;
	cli();
	uint16_t v = ms;
	SREG = s;
	return v;
}

/* ---- UART: both ways by interrupt ---- */

static volatile uint8_t rxb[256], txb[256];
static volatile uint8_t rx_w, rx_r, tx_w, tx_r;

ISR(USART_RX_vect)
{
	uint8_t b = UDR0;
	if ((uint8_t)(rx_w + 1) != rx_r)
		rxb[rx_w++] = b;
}

ISR(USART_UDRE_vect)
{
	if (tx_r == tx_w) {
		UCSR0B &= (uint8_t)~(1 << UDRIE0);
		return;
	}
	UDR0 = txb[tx_r++];
}

static void put(const uint8_t *p, uint8_t n)
{
	while (n--) {
		while ((uint8_t)(tx_w + 1) == tx_r)
			wdt_reset(); /* full: wait for the line */
		txb[tx_w++] = *p++;
	}
	UCSR0B |= 1 << UDRIE0;
}

/* ---- frames ---- */

static uint16_t crc16(const uint8_t *p, uint8_t n)
{
	uint16_t crc = 0xFFFF;
	while (n--) {
		crc ^= (uint16_t)(*p++) << 8;
		for (uint8_t i = 0; i < 8; i++)
			crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
	}
	return crc;
}

static void put32(uint8_t *p, int32_t v)
{
	for (uint8_t i = 0; i < 4; i++)
		p[i] = (uint8_t)((uint32_t)v >> (8 * i));
}

static int32_t get32(const uint8_t *p)
{
	return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

static uint8_t build(uint8_t *out, uint8_t seq, uint8_t type, const uint8_t *p, uint8_t n)
{
	out[0] = SYNC, out[1] = n, out[2] = seq, out[3] = type;
	memcpy(out + 4, p, n);
	uint16_t crc = crc16(out + 1, (uint8_t)(3 + n));
	out[4 + n] = (uint8_t)crc, out[5 + n] = (uint8_t)(crc >> 8);
	return (uint8_t)(n + 6);
}

static void send(uint8_t seq, uint8_t type, const uint8_t *p, uint8_t n)
{
	uint8_t f[40];
	put(f, build(f, seq, type, p, n));
}

/* ---- outputs ---- */

static void drive(uint8_t ch, int32_t v)
{
	detached[ch] = 0;
	switch (kind[ch]) {
	case SERVO: {
		/* half microseconds: 2000 + v/90, rounded */
		uint16_t hus = (uint16_t)(2000 + (v + 45) / 90);
		if (ch == 0) {
			OCR1A = hus - 1;
			TCCR1A |= 1 << COM1A1;
		} else {
			OCR1B = hus - 1;
			TCCR1A |= 1 << COM1B1;
		}
		applied[ch] = (int32_t)(hus - 2000) * 90;
		break;
	}
	case PWM: {
		uint16_t steps = (uint16_t)((v * 256 + 500) / 1000); /* high for steps/256 of the period */
		if (steps == 0) {
			TCCR0A &= (uint8_t)~(1 << COM0B1);
			PORTD &= (uint8_t)~(1 << PD5);
		} else {
			OCR0B = (uint8_t)(steps - 1);
			TCCR0A |= 1 << COM0B1;
		}
		applied[ch] = (int32_t)(((uint32_t)steps * 1000 + 128) / 256);
		break;
	}
	case DIGITAL:
		if (v)
			PORTD |= 1 << PD7;
		else
			PORTD &= (uint8_t)~(1 << PD7);
		applied[ch] = v ? 1000 : 0;
		break;
	case RELAY:
		if (v)
			PORTB &= (uint8_t)~(1 << PB0); /* active low: on */
		else
			PORTB |= 1 << PB0;
		applied[ch] = v ? 1000 : 0;
		break;
	}
}

static void detach(uint8_t ch)
{
	if (kind[ch] == SERVO) {
		/* No more pulses; the servo stays where it is, so its value
		 * stays. Cleared at the end of a frame's pulse, never inside one. */
		while (TCNT1 < (ch == 0 ? OCR1A : OCR1B) + 2u)
			;
		TCCR1A &= (uint8_t)~(ch == 0 ? 1 << COM1A1 : 1 << COM1B1);
		PORTB &= (uint8_t)~(ch == 0 ? 1 << PB1 : 1 << PB2);
	} else {
		drive(ch, 0);
	}
	detached[ch] = 1;
}

static void go_safe(void)
{
	for (uint8_t ch = 0; ch < NCH; ch++)
		drive(ch, safe_value[ch]);
}

static uint8_t estop(void) { return (PIND >> PD2) & 1; }

/* ---- requests (docs/SERIAL.md, section 5) ---- */

static struct {
	uint8_t valid, seq, len;
	uint16_t crc;
	uint8_t frame[12];
} cache[WINDOW];
/* Every time below is the loop's one reading of the clock (loop_now): a
 * newer reading compared with an older one wraps as unsigned and fires
 * the watchdog at once. */
static uint16_t last_valid, loop_now;

static void answer(uint8_t slot, uint8_t seq, uint8_t type, const uint8_t *p, uint8_t n)
{
	uint8_t q[6];
	uint8_t *f = cache[slot].frame;
	if (type == T_PING && n == 0) {
		q[0] = (uint8_t)faults, q[1] = (uint8_t)(faults >> 8);
		cache[slot].len = build(f, seq, 0x84, q, 2);
		return;
	}
	if ((type == T_SET && n == 5) || (type == T_HALT && n == 1)) {
		uint8_t ch = p[0];
		q[1] = ch;
		if (ch >= NCH) {
			q[0] = NAK_BAD_CHANNEL;
			cache[slot].len = build(f, seq, T_NAK, q, 2);
			return;
		}
		if (type == T_SET) {
			int32_t v = get32(p + 1);
			int32_t hi = kind[ch] == SERVO ? 180000 : 1000;
			if (v < 0 || v > hi || (kind[ch] >= DIGITAL && v != 0 && v != 1000)) {
				q[0] = NAK_RANGE;
				cache[slot].len = build(f, seq, T_NAK, q, 2);
				return;
			}
			if (faults & F_ESTOP) {
				q[0] = NAK_FAULT;
				cache[slot].len = build(f, seq, T_NAK, q, 2);
				return;
			}
			drive(ch, v);
		} else {
			detach(ch);
		}
		q[0] = ch, q[1] = detached[ch];
		put32(q + 2, applied[ch]);
		cache[slot].len = build(f, seq, type | 0x80, q, 6);
		return;
	}
	if (type == T_SET || type == T_HALT || type == T_PING) {
		q[0] = NAK_MALFORMED, q[1] = 0;
	} else {
		q[0] = NAK_UNSUPPORTED, q[1] = type;
	}
	cache[slot].len = build(f, seq, T_NAK, q, 2);
}

static void handle(uint8_t seq, uint8_t type, const uint8_t *p, uint8_t n, uint16_t crc)
{
	uint8_t q[10];
	if (type & 0x80)
		return;
	if (type == T_HELLO) {
		if (n != 1) {
			q[0] = NAK_MALFORMED, q[1] = 0;
			send(seq, T_NAK, q, 2);
			return;
		}
		if (p[0] != VERSION) {
			q[0] = NAK_VERSION, q[1] = VERSION;
			send(seq, T_NAK, q, 2);
			return;
		}
		uint16_t seen = faults;
		faults &= (uint16_t)~(F_WATCHDOG | F_RESET);
		session = 1;
		expected = (uint8_t)(seq + 1);
		for (uint8_t i = 0; i < WINDOW; i++)
			cache[i].valid = 0;
		last_valid = loop_now;
		q[0] = VERSION, q[1] = NCH, q[2] = NSUP, q[3] = WINDOW;
		q[4] = (uint8_t)MAX_DURATION_MS, q[5] = MAX_DURATION_MS >> 8;
		q[6] = TELEMETRY_MS, q[7] = 0;
		q[8] = (uint8_t)seen, q[9] = (uint8_t)(seen >> 8);
		send(seq, 0x81, q, 10);
		return;
	}
	if (!session) {
		q[0] = NAK_NO_SESSION, q[1] = 0;
		send(seq, T_NAK, q, 2);
		return;
	}
	uint8_t slot = seq % WINDOW;
	uint8_t d = (uint8_t)(seq - expected);
	if (d == 0) {
		answer(slot, seq, type, p, n);
		cache[slot].valid = 1, cache[slot].seq = seq, cache[slot].crc = crc;
		expected++;
		last_valid = loop_now;
		put(cache[slot].frame, cache[slot].len);
	} else if (d >= 256 - WINDOW && cache[slot].valid && cache[slot].seq == seq && cache[slot].crc == crc) {
		last_valid = loop_now;
		put(cache[slot].frame, cache[slot].len);
	}
}

static uint8_t rx[MAXPAY + 6], rxn;

static void drop(uint8_t k)
{
	memmove(rx, rx + k, (uint8_t)(rxn - k));
	rxn = (uint8_t)(rxn - k);
}

static void decode(uint8_t gap)
{
	for (;;) {
		uint8_t i = 0;
		while (i < rxn && rx[i] != SYNC)
			i++;
		drop(i);
		if (rxn < 2) {
			if (gap && rxn == 1)
				drop(1);
			return;
		}
		uint8_t n = rx[1];
		if (n > MAXPAY) {
			drop(1);
			continue;
		}
		if (rxn < n + 6) {
			if (gap) {
				drop(1);
				continue;
			}
			return;
		}
		uint16_t crc = (uint16_t)(rx[4 + n] | rx[5 + n] << 8);
		if (crc16(rx + 1, (uint8_t)(3 + n)) != crc) {
			drop(1);
			continue;
		}
		handle(rx[2], rx[3], rx + 4, n, crc);
		drop((uint8_t)(n + 6));
	}
}

static uint16_t supply_mv(void)
{
	ADCSRA |= 1 << ADSC;
	while (ADCSRA & (1 << ADSC))
		;
	return (uint16_t)(((uint32_t)ADC * 14663 + 500) / 1000);
}

static void telemetry(void)
{
	static uint8_t tseq;
	uint8_t q[4 + 4 * NSUP + 5 * NCH], *w = q;
	*w++ = (uint8_t)faults, *w++ = (uint8_t)(faults >> 8);
	*w++ = NSUP;
	put32(w, supply_mv()), w += 4;
	*w++ = NCH;
	for (uint8_t ch = 0; ch < NCH; ch++, w += 4) {
		*w++ = detached[ch];
		put32(w, applied[ch]);
	}
	send(tseq++, T_TELEMETRY, q, (uint8_t)(w - q));
}

int main(void)
{
	MCUSR = 0;
	wdt_enable(WDTO_120MS);
	PORTB |= 1 << PB0; /* the relay off before the pin is an output */
	DDRB |= (1 << PB0) | (1 << PB1) | (1 << PB2);
	DDRD |= (1 << PD5) | (1 << PD7);
	PORTD |= 1 << PD2; /* e-stop input, pull-up */

	ICR1 = 39999; /* 20 ms at clk/8: 0.5 us steps */
	TCCR1A = 1 << WGM11;
	TCCR1B = (1 << WGM13) | (1 << WGM12) | (1 << CS11);
	TCCR0A = (1 << WGM01) | (1 << WGM00); /* fast PWM, 976 Hz at clk/64 */
	TCCR0B = (1 << CS01) | (1 << CS00);
	OCR2A = 249;
	TCCR2A = 1 << WGM21;
	TCCR2B = 1 << CS22;
	TIMSK2 = 1 << OCIE2A;
	ADMUX = 1 << REFS0;
	ADCSRA = (1 << ADEN) | (7 << ADPS0);
	UBRR0 = 16;
	UCSR0A = 1 << U2X0;
	UCSR0C = 3 << UCSZ00;
	UCSR0B = (1 << RXEN0) | (1 << TXEN0) | (1 << RXCIE0);
	go_safe();
	sei();

	uint16_t last_byte = now(), last_tel = now();
	for (;;) {
		wdt_reset();
		uint16_t t = loop_now = now();
		while (rx_r != rx_w && rxn < sizeof rx) {
			rx[rxn++] = rxb[rx_r++];
			last_byte = t;
		}
		decode(rxn && (uint16_t)(t - last_byte) >= GAP_MS);
		if (estop()) {
			if (!(faults & F_ESTOP))
				go_safe();
			faults |= F_ESTOP;
		} else {
			faults &= (uint16_t)~F_ESTOP;
		}
		if (session && (uint16_t)(t - last_valid) > MAX_DURATION_MS) {
			go_safe();
			faults |= F_WATCHDOG;
			session = 0;
		}
		if ((uint16_t)(t - last_tel) >= TELEMETRY_MS) {
			last_tel = t;
			telemetry();
		}
	}
}
