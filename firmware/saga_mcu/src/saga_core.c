/*
 * saga_core.c: the portable core of protocol v1 (docs/SERIAL.md). See
 * saga_core.h for what it does and what a board gives it.
 */
#include "saga_core.h"

#include <string.h>

#if defined(__AVR__)
#include <util/crc16.h>
#define ROM_READ(dst, src, n) memcpy_P((dst), (src), (n))
#else
#define ROM_READ(dst, src, n) memcpy((dst), (src), (n))
#endif

/* The kinds' own ranges, thousandths. */
#define SERVO_MAX 180000L
#define DUTY_MAX 1000L
#define ON 1000L

/* Payload lengths (docs/SERIAL.md, section 4). */
#define DESCRIBE_ACK_LEN 20
#define TEL_MAX (4 + 4 * SAGA_MAX_SUPPLIES + 5 * SAGA_MAX_CHANNELS)
#define TX_MAX (6 + (TEL_MAX > DESCRIBE_ACK_LEN ? TEL_MAX : DESCRIBE_ACK_LEN))

/* C99 has no static_assert: a negative array size stops the build. */
typedef char saga_assert_capacity[(SAGA_MAX_CHANNELS <= 32 && SAGA_MAX_SUPPLIES <= 8 &&
                                   SAGA_MAX_WINDOW >= 1 && SAGA_MAX_WINDOW <= 8 && TEL_MAX <= SAGA_MAX_PAYLOAD)
                                      ? 1
                                      : -1];

uint16_t saga_crc16(uint16_t crc, const uint8_t *p, uint8_t n) {
	while (n--) {
#if defined(__AVR__)
		crc = _crc_xmodem_update(crc, *p++); /* the same polynomial, unreflected */
#else
		uint8_t i;
		crc ^= (uint16_t)((uint16_t)(*p++) << 8);
		for (i = 0; i < 8; i++)
			crc = (crc & 0x8000u) ? (uint16_t)((uint16_t)(crc << 1) ^ 0x1021u) : (uint16_t)(crc << 1);
#endif
	}
	return crc;
}

static void put16(uint8_t *p, uint16_t v) {
	p[0] = (uint8_t)(v & 0xFFu);
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, int32_t v) {
	uint32_t u = (uint32_t)v;
	p[0] = (uint8_t)(u & 0xFFu);
	p[1] = (uint8_t)((u >> 8) & 0xFFu);
	p[2] = (uint8_t)((u >> 16) & 0xFFu);
	p[3] = (uint8_t)(u >> 24);
}

static int32_t get32(const uint8_t *p) {
	uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	return (int32_t)u;
}

static void channel(const saga_t *s, uint8_t ch, saga_channel_t *c) {
	ROM_READ(c, &s->cfg->channels[ch], sizeof *c);
}

/* --- values and pins ------------------------------------------------------ */

static uint32_t servo_span(const saga_channel_t *c) {
	return 2u * (uint32_t)(c->pulse_max_us - c->pulse_min_us); /* half-microseconds for 180 degrees */
}

static uint32_t servo_steps(const saga_channel_t *c, int32_t v) {
	return ((uint32_t)v * servo_span(c) + (uint32_t)SERVO_MAX / 2) / (uint32_t)SERVO_MAX;
}

static uint8_t pwm_duty(int32_t v) {
	return (uint8_t)(((uint32_t)v * 255u + 500u) / 1000u);
}

int32_t saga_quantise(const saga_channel_t *c, int32_t v) {
	switch (c->kind) {
	case SAGA_KIND_SERVO: {
		uint32_t span = servo_span(c);
		return (int32_t)((servo_steps(c, v) * (uint32_t)SERVO_MAX + span / 2) / span);
	}
	case SAGA_KIND_PWM:
		return (int32_t)(((uint32_t)pwm_duty(v) * 1000u + 127u) / 255u);
	default:
		return v;
	}
}

saga_drive_t saga_drive_for(const saga_channel_t *c, int32_t v, uint8_t detached) {
	uint8_t low = (c->flags & SAGA_ACTIVE_LOW) != 0;
	switch (c->kind) {
	case SAGA_KIND_SERVO:
		if (detached)
			return 0;
		return (saga_drive_t)(2u * (uint32_t)c->pulse_min_us + servo_steps(c, v));
	case SAGA_KIND_PWM: {
		uint8_t d = detached ? 0 : pwm_duty(v);
		return low ? (saga_drive_t)(255 - d) : (saga_drive_t)d;
	}
	default: {
		uint8_t on = !detached && v != 0;
		return (saga_drive_t)(on ^ low);
	}
	}
}

/* apply drives channel ch to the logical value v (attached), or detaches it,
 * and records what it now is. The one path every output change takes. */
static void apply(saga_t *s, uint8_t ch, int32_t v, uint8_t detach) {
	saga_channel_t c;
	channel(s, ch, &c);
	if (detach) {
		/* A servo without pulses stays about where it was: keep its
		 * value. PWM and digital outputs de-energise: report 0. */
		if (c.kind != SAGA_KIND_SERVO)
			s->value[ch] = 0;
		s->cflags[ch] |= SAGA_CF_DETACHED;
	} else {
		s->value[ch] = saga_quantise(&c, v);
		s->cflags[ch] &= (uint8_t)~SAGA_CF_DETACHED;
	}
	s->cfg->board->output(s->cfg->board->ctx, ch, &c, saga_drive_for(&c, v, detach));
}

static void go_safe(saga_t *s) {
	uint8_t ch;
	for (ch = 0; ch < s->cfg->nch; ch++) {
		saga_channel_t c;
		channel(s, ch, &c);
		apply(s, ch, c.safe, (c.flags & SAGA_SAFE_DETACH) != 0);
	}
}

/* --- checking the board's tables -------------------------------------------- */

int saga_check_config(const saga_config_t *cfg, uint8_t *where) {
	uint8_t i;
	*where = 0;
	if (cfg->nch > SAGA_MAX_CHANNELS || cfg->nsup > SAGA_MAX_SUPPLIES || cfg->window < 1 ||
	    cfg->window > SAGA_MAX_WINDOW || cfg->board == 0 || cfg->board->output == 0 || cfg->board->rx == 0 ||
	    cfg->board->tx == 0 || cfg->board->millis == 0)
		return SAGA_ERR_COUNTS;
	if (cfg->max_duration_ms == 0 || cfg->telemetry_ms == 0 || cfg->frame_gap_ms == 0)
		return SAGA_ERR_TIMES;
	for (i = 0; i < cfg->nch; i++) {
		saga_channel_t c;
		int32_t top;
		ROM_READ(&c, &cfg->channels[i], sizeof c);
		*where = i;
		switch (c.kind) {
		case SAGA_KIND_SERVO:
			if (c.flags & SAGA_ACTIVE_LOW)
				return SAGA_ERR_KIND;
			if (c.pulse_min_us >= c.pulse_max_us || (uint16_t)(c.pulse_max_us - c.pulse_min_us) > 5000u || c.pulse_max_us > 20000u)
				return SAGA_ERR_PULSE;
			top = SERVO_MAX;
			break;
		case SAGA_KIND_PWM:
		case SAGA_KIND_DIGITAL:
			top = DUTY_MAX;
			break;
		default:
			return SAGA_ERR_KIND;
		}
		if (c.min < 0 || c.min > c.max || c.max > top)
			return SAGA_ERR_RANGE;
		if (c.flags & SAGA_SAFE_DETACH) {
			if (c.safe != 0)
				return SAGA_ERR_SAFE;
		} else if (c.safe < c.min || c.safe > c.max || (c.kind == SAGA_KIND_DIGITAL && c.safe != 0 && c.safe != ON)) {
			return SAGA_ERR_SAFE;
		}
	}
	for (i = 0; i < cfg->nsup; i++) {
		saga_supply_t p;
		ROM_READ(&p, &cfg->supplies[i], sizeof p);
		*where = i;
		if (p.uv_per_count == 0 || p.uv_per_count > 1000000ul || p.min_mv > p.max_mv)
			return SAGA_ERR_SUPPLY;
	}
	*where = 0;
	return SAGA_OK;
}

/* --- sending ------------------------------------------------------------------ */

static void send(saga_t *s, uint8_t seq, uint8_t type, const uint8_t *p, uint8_t n) {
	uint8_t f[TX_MAX];
	uint16_t crc;
	f[0] = SAGA_SYNC;
	f[1] = n;
	f[2] = seq;
	f[3] = type;
	if (n)
		memcpy(f + 4, p, n);
	crc = saga_crc16(0xFFFFu, f + 1, (uint8_t)(3 + n));
	put16(f + 4 + n, crc);
	s->cfg->board->tx(s->cfg->board->ctx, f, (uint8_t)(n + 6));
}

static uint8_t describe(const saga_t *s, uint8_t ch, uint8_t *q) {
	saga_channel_t c;
	channel(s, ch, &c);
	q[0] = ch;
	q[1] = c.kind;
	q[2] = (uint8_t)(c.flags & (SAGA_ACTIVE_LOW | SAGA_SAFE_DETACH));
	q[3] = c.pin;
	put32(q + 4, c.min);
	put32(q + 8, c.max);
	put32(q + 12, c.safe);
	put16(q + 16, c.kind == SAGA_KIND_SERVO ? c.pulse_min_us : 0);
	put16(q + 18, c.kind == SAGA_KIND_SERVO ? c.pulse_max_us : 0);
	return DESCRIBE_ACK_LEN;
}

/* send_answer sends a cached answer; a DESCRIBE_ACK is rebuilt from the
 * table, which does not change. */
static void send_answer(saga_t *s, const saga_cached_t *a) {
	if (a->atype == SAGA_T_DESCRIBE_ACK) {
		uint8_t q[DESCRIBE_ACK_LEN];
		send(s, a->seq, a->atype, q, describe(s, a->ans[0], q));
	} else {
		send(s, a->seq, a->atype, a->ans, a->alen);
	}
}

static void nak(saga_cached_t *a, uint8_t code, uint8_t detail) {
	a->atype = SAGA_T_NAK;
	a->alen = 2;
	a->ans[0] = code;
	a->ans[1] = detail;
}

static void report(const saga_t *s, saga_cached_t *a, uint8_t type, uint8_t ch) {
	a->atype = type;
	a->alen = 6;
	a->ans[0] = ch;
	a->ans[1] = s->cflags[ch];
	put32(a->ans + 2, s->value[ch]);
}

/* --- requests ----------------------------------------------------------------- */

/* act acts on an in-order request and writes its answer into a. */
static void act(saga_t *s, saga_cached_t *a, uint8_t type, const uint8_t *p, uint8_t n) {
	uint8_t ch;
	saga_channel_t c;
	switch (type) {
	case SAGA_T_PING:
		if (n != 0)
			break;
		a->atype = SAGA_T_PONG;
		a->alen = 2;
		put16(a->ans, s->faults);
		return;
	case SAGA_T_SET:
	case SAGA_T_HALT:
	case SAGA_T_DESCRIBE:
		if (n != (type == SAGA_T_SET ? 5 : 1))
			break;
		ch = p[0];
		if (ch >= s->cfg->nch) {
			nak(a, SAGA_NAK_BAD_CHANNEL, ch);
			return;
		}
		if (type == SAGA_T_DESCRIBE) {
			a->atype = SAGA_T_DESCRIBE_ACK;
			a->alen = DESCRIBE_ACK_LEN;
			a->ans[0] = ch;
			return;
		}
		if (type == SAGA_T_HALT) {
			/* Always obeyed, e-stop or fault: HALT only ever makes an
			 * output inert. */
			apply(s, ch, 0, 1);
			report(s, a, SAGA_T_HALT_ACK, ch);
			return;
		}
		if ((s->faults & SAGA_F_ESTOP) || (s->cflags[ch] & SAGA_CF_FAULT)) {
			nak(a, SAGA_NAK_FAULT, ch);
			return;
		}
		channel(s, ch, &c);
		{
			int32_t v = get32(p + 1);
			if (v < c.min || v > c.max || (c.kind == SAGA_KIND_DIGITAL && v != 0 && v != ON)) {
				nak(a, SAGA_NAK_RANGE, ch);
				return;
			}
			apply(s, ch, v, 0);
		}
		report(s, a, SAGA_T_SET_ACK, ch);
		return;
	default:
		nak(a, SAGA_NAK_UNSUPPORTED, type);
		return;
	}
	nak(a, SAGA_NAK_MALFORMED, 0);
}

static uint8_t same_request(const saga_cached_t *a, uint8_t type, const uint8_t *p, uint8_t n, uint16_t crc) {
	uint8_t k = n < sizeof a->req ? n : (uint8_t)sizeof a->req;
	if (a->type != type || a->len != n || memcmp(a->req, p, k) != 0)
		return 0;
	/* A payload over 8 bytes is no request that is acted on: its answer
	 * is a NAK whatever the bytes. Its CRC stands for the rest. */
	return n <= sizeof a->req || a->crc == crc;
}

static void handle(saga_t *s, uint8_t seq, uint8_t type, const uint8_t *p, uint8_t n, uint16_t crc, uint32_t now) {
	uint8_t q[10];
	saga_cached_t *a;
	uint8_t d;
	if (type & 0x80)
		return; /* an MCU's type: our own frame echoed back */
	if (type == SAGA_T_HELLO) {
		uint16_t seen = s->faults;
		const saga_config_t *cfg = s->cfg;
		if (n != 1) {
			q[0] = SAGA_NAK_MALFORMED;
			q[1] = 0;
			send(s, seq, SAGA_T_NAK, q, 2);
			return;
		}
		if (p[0] != SAGA_VERSION) {
			q[0] = SAGA_NAK_VERSION;
			q[1] = SAGA_VERSION;
			send(s, seq, SAGA_T_NAK, q, 2);
			return;
		}
		s->faults &= (uint16_t)~(SAGA_F_WATCHDOG | SAGA_F_RESET);
		s->session = 1;
		s->expected = (uint8_t)(seq + 1);
		memset(s->cache, 0, sizeof s->cache);
		s->last_valid = now;
		q[0] = SAGA_VERSION;
		q[1] = cfg->nch;
		q[2] = cfg->nsup;
		q[3] = cfg->window;
		put16(q + 4, cfg->max_duration_ms);
		put16(q + 6, cfg->telemetry_ms);
		put16(q + 8, seen);
		send(s, seq, SAGA_T_HELLO_ACK, q, 10);
		return;
	}
	if (!s->session) {
		q[0] = SAGA_NAK_NO_SESSION;
		q[1] = 0;
		send(s, seq, SAGA_T_NAK, q, 2);
		return;
	}
	a = &s->cache[seq % s->cfg->window];
	d = (uint8_t)(seq - s->expected);
	if (d == 0) { /* in order: act once, remember the answer */
		act(s, a, type, p, n);
		a->valid = 1;
		a->seq = seq;
		a->type = type;
		a->len = n;
		memset(a->req, 0, sizeof a->req);
		memcpy(a->req, p, n < sizeof a->req ? n : sizeof a->req);
		a->crc = crc;
		s->expected++;
		s->last_valid = now;
		send_answer(s, a);
	} else if (d >= (uint8_t)(256 - s->cfg->window) && a->valid && a->seq == seq && same_request(a, type, p, n, crc)) {
		s->last_valid = now; /* a retransmission: answer again, do not act again */
		send_answer(s, a);
	} /* otherwise ahead of a lost request: drop it */
}

/* --- receiving (docs/SERIAL.md, section 2) ------------------------------------ */

/* decode takes every complete valid frame from the buffer. After a pause
 * (gap) no partial frame is waited for: it cannot be real. */
static void decode(saga_t *s, uint8_t gap, uint32_t now) {
	for (;;) {
		uint8_t *b;
		uint8_t avail, n;
		uint16_t crc;
		while (s->rr < s->rn && s->rx[s->rr] != SAGA_SYNC)
			s->rr++;
		avail = (uint8_t)(s->rn - s->rr);
		b = s->rx + s->rr;
		if (avail < 2) {
			if (gap && avail == 1)
				s->rr++;
			break;
		}
		n = b[1];
		if (n > SAGA_MAX_PAYLOAD) {
			s->rr++;
			continue;
		}
		if (avail < n + 6) {
			if (gap) {
				s->rr++;
				continue;
			}
			break;
		}
		crc = (uint16_t)(b[4 + n] | (uint16_t)b[5 + n] << 8);
		if (saga_crc16(0xFFFFu, b + 1, (uint8_t)(3 + n)) != crc) {
			s->rr++;
			continue;
		}
		s->rr = (uint8_t)(s->rr + n + 6); /* before handle: it may not come back here */
		handle(s, b[2], b[3], b + 4, n, crc, now);
	}
	if (s->rr == s->rn)
		s->rr = s->rn = 0;
}

static void rx_byte(saga_t *s, uint8_t c, uint32_t now) {
	s->last_byte = now;
	if (s->rn == sizeof s->rx) { /* make room: drop what was consumed */
		memmove(s->rx, s->rx + s->rr, (size_t)(s->rn - s->rr));
		s->rn = (uint8_t)(s->rn - s->rr);
		s->rr = 0;
	}
	/* A whole frame fits, and decode never leaves one whole frame
	 * buffered, so there is always room here. */
	s->rx[s->rn++] = c;
	decode(s, 0, now);
}

/* --- time --------------------------------------------------------------------- */

static void telemetry(saga_t *s) {
	const saga_config_t *cfg = s->cfg;
	const saga_board_t *b = cfg->board;
	uint8_t q[TEL_MAX];
	uint8_t *w = q + 3;
	uint8_t i, bad = 0;
	q[2] = cfg->nsup;
	for (i = 0; i < cfg->nsup; i++, w += 4) {
		saga_supply_t p;
		uint16_t counts = 0;
		int32_t mv = INT32_MIN; /* no reading */
		ROM_READ(&p, &cfg->supplies[i], sizeof p);
		if (b->adc && b->adc(b->ctx, i, &counts) && counts <= SAGA_ADC_MAX) {
			mv = (int32_t)(((uint32_t)counts * p.uv_per_count + 500u) / 1000u);
			if ((p.min_mv != 0 || p.max_mv != 0) && (mv < p.min_mv || mv > p.max_mv))
				bad = 1;
		}
		put32(w, mv);
	}
	if (bad)
		s->faults |= SAGA_F_SUPPLY;
	else
		s->faults &= (uint16_t)~SAGA_F_SUPPLY;
	put16(q, s->faults);
	*w++ = cfg->nch;
	for (i = 0; i < cfg->nch; i++, w += 4) {
		*w++ = s->cflags[i];
		put32(w, s->value[i]); /* no position feedback: the value applied */
	}
	send(s, ++s->tel_seq, SAGA_T_TELEMETRY, q, (uint8_t)(w - q));
}

static void poll(saga_t *s, uint32_t now) {
	const saga_config_t *cfg = s->cfg;
	const saga_board_t *b = cfg->board;
	if (s->rn > s->rr && now - s->last_byte >= cfg->frame_gap_ms) {
		decode(s, 1, now);
		s->last_byte = now;
	}
	if (b->estop) {
		if (b->estop(b->ctx)) {
			if (!(s->faults & SAGA_F_ESTOP)) {
				go_safe(s);
				s->faults |= SAGA_F_ESTOP;
			}
			s->estop_in = 1;
		} else {
			if (s->estop_in) {
				s->estop_in = 0;
				s->estop_quiet = now;
			}
			if ((s->faults & SAGA_F_ESTOP) && now - s->estop_quiet >= cfg->estop_release_ms)
				s->faults &= (uint16_t)~SAGA_F_ESTOP;
		}
	}
	if (b->fault) {
		uint8_t ch, any = 0;
		for (ch = 0; ch < cfg->nch; ch++) {
			if (b->fault(b->ctx, ch)) {
				s->cflags[ch] |= SAGA_CF_FAULT;
				any = 1;
			} else {
				s->cflags[ch] &= (uint8_t)~SAGA_CF_FAULT;
			}
		}
		if (any)
			s->faults |= SAGA_F_OUTPUT;
		else
			s->faults &= (uint16_t)~SAGA_F_OUTPUT;
	}
	if (s->session && now - s->last_valid >= cfg->max_duration_ms) { /* the link watchdog */
		go_safe(s);
		s->faults |= SAGA_F_WATCHDOG;
		s->session = 0;
	}
	if (now - s->last_tel >= cfg->telemetry_ms) {
		s->last_tel = now;
		telemetry(s);
	}
}

/* --- entry points --------------------------------------------------------------- */

int saga_init(saga_t *s, const saga_config_t *cfg) {
	uint8_t where;
	int err = saga_check_config(cfg, &where);
	uint32_t now;
	memset(s, 0, sizeof *s);
	s->cfg = cfg;
	if (err != SAGA_OK)
		return err;
	go_safe(s);
	s->faults = SAGA_F_RESET;
	now = cfg->board->millis(cfg->board->ctx);
	s->last_tel = s->last_byte = s->last_valid = s->estop_quiet = now;
	return SAGA_OK;
}

void saga_run(saga_t *s) {
	const saga_board_t *b = s->cfg->board;
	uint32_t now = b->millis(b->ctx);
	uint8_t i;
	poll(s, now);
	for (i = 0; i < SAGA_RX_BURST; i++) {
		int c = b->rx(b->ctx);
		if (c < 0)
			break;
		rx_byte(s, (uint8_t)c, now);
	}
}

uint16_t saga_faults(const saga_t *s) { return s->faults; }

int32_t saga_value(const saga_t *s, uint8_t ch) { return ch < SAGA_MAX_CHANNELS ? s->value[ch] : 0; }

uint8_t saga_channel_flags(const saga_t *s, uint8_t ch) { return ch < SAGA_MAX_CHANNELS ? s->cflags[ch] : 0; }

uint8_t saga_in_session(const saga_t *s) { return s->session; }
