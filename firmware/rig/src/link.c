/*
 * link.c: the serial cable between the host and the MCU's UART0.
 *
 * The host end is a pty (the supervisor opens its slave like any serial
 * port). Bytes the host writes reach the MCU one byte time apart on the
 * simulated clock, at the line's baud rate (10 bits a byte, 8N1: 86.8 us
 * at 115200); bytes the MCU sends reach the host when their stop bit has
 * left the MCU's pin, at the rate the firmware configured (UBRR0, U2X0,
 * the frame format). simavr's UART counts a parity bit in every frame
 * whether or not parity is on (11 bits for 8N1), so the rig sets its byte
 * time from the registers itself.
 *
 * The cable can be cut (bytes both ways are lost, as on a cut wire; the
 * host's port stays open, as a USB adapter's does), bytes can be flipped on
 * their way, and SETs to one channel can be made out of range so that the
 * firmware must refuse them (NAK RANGE): the rig's way to make the real
 * firmware refuse a channel without a debug build.
 *
 * A tap on each direction decodes the protocol's frames (docs/SERIAL.md):
 * the host's SETs as the MCU received them, and the MCU's acknowledgements,
 * HELLO_ACK and TELEMETRY. They are reported, never acted on: the pins are
 * what the rig measures; the tap tells when the MCU last heard a valid
 * frame (the watchdog's start) and which faults it reports.
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "rig.h"
#include "avr_uart.h"
#include "sim_io.h"

/* ATmega328P USART0 registers (data space). */
#define A_UCSR0A 0xC0
#define A_UCSR0B 0xC1
#define A_UCSR0C 0xC2
#define A_UBRR0L 0xC4
#define A_UBRR0H 0xC5

static avr_t *A;
static avr_uart_t *U;
static int master = -1, slave_keep = -1;
static char pty_name[PATH_MAX], link_path[PATH_MAX];
static uint64_t line_baud = 115200;
static uint64_t last_activity; /* the last cycle a byte moved on the line */

/* ---- protocol frames (docs/SERIAL.md, section 2) ------------------------- */

#define SYNC 0xA5
#define MAXPAY 200
#define MAXFRAME (MAXPAY + 6)

static uint16_t crc16(const uint8_t *p, size_t n)
{
	uint16_t crc = 0xFFFF;
	while (n--) {
		crc ^= (uint16_t)(*p++) << 8;
		for (int i = 0; i < 8; i++)
			crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
	}
	return crc;
}

typedef struct fparse fparse_t;
typedef void (*on_frame_t)(fparse_t *f, int len, uint64_t cycle);
struct fparse {
	uint8_t buf[MAXFRAME];
	uint64_t pos[MAXFRAME]; /* the to-MCU queue index of each byte */
	int n;
	uint64_t frames, bad;
	on_frame_t on_frame;
};

static void fp_drop(fparse_t *f, int k)
{
	memmove(f->buf, f->buf + k, (size_t)(f->n - k));
	memmove(f->pos, f->pos + k, (size_t)(f->n - k) * sizeof f->pos[0]);
	f->n -= k;
}

/* fp_feed takes one byte and hands every complete, valid frame to
 * on_frame, hunting as a receiver does: a false sync byte is dropped alone. */
static void fp_feed(fparse_t *f, uint8_t b, uint64_t pos, uint64_t cycle)
{
	if (f->n == MAXFRAME)
		fp_drop(f, 1);
	f->buf[f->n] = b;
	f->pos[f->n] = pos;
	f->n++;
	for (;;) {
		int i = 0;
		while (i < f->n && f->buf[i] != SYNC)
			i++;
		if (i)
			fp_drop(f, i);
		if (f->n < 2)
			return;
		int len = f->buf[1];
		if (len > MAXPAY) {
			f->bad++;
			fp_drop(f, 1);
			continue;
		}
		if (f->n < len + 6)
			return;
		uint16_t got = (uint16_t)(f->buf[4 + len] | f->buf[5 + len] << 8);
		if (crc16(f->buf + 1, (size_t)len + 3) != got) {
			f->bad++;
			fp_drop(f, 1);
			continue;
		}
		f->frames++;
		f->on_frame(f, len, cycle);
		fp_drop(f, len + 6);
	}
}

static int32_t get32(const uint8_t *p)
{
	return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* ---- what the taps saw ------------------------------------------------------- */

#define NRECENT 64
typedef struct {
	uint64_t cycle;
	int64_t mono_ns;
	uint8_t seq, type, a, b; /* SET: a = channel; ACK: a = channel, b = flags; NAK: a = code, b = detail */
	int32_t value;
} seen_t;
static seen_t sets[NRECENT], acks[NRECENT];
static uint64_t nsets, nacks;

typedef struct {
	uint64_t cycle;
	uint16_t faults;
} faultseen_t;
static faultseen_t faultlog[NRECENT];
static uint64_t nfaultlog;
static int have_faults;
static uint16_t last_faults;
static uint64_t last_telemetry_cycle, telemetries;

static struct {
	int seen;
	uint64_t cycle;
	uint8_t version, channels, supplies, window;
	uint16_t max_duration_ms, telemetry_ms, faults;
} hello_ack;

/* Silences: a time without a valid frame reaching the MCU, long enough to
 * matter to its watchdog (half its max_duration, or 50 ms before a
 * HELLO_ACK told it). */
typedef struct {
	uint64_t from, to;
} gap_t;
static gap_t gaps[NRECENT];
static uint64_t ngaps;
static uint64_t last_frame_end; /* the end of the last valid frame the MCU received */
static uint64_t to_mcu_frames_seen;

static void push_seen(seen_t *ring, uint64_t *n, uint64_t cycle, const uint8_t *f, uint8_t a, uint8_t b, int32_t v)
{
	seen_t *s = &ring[*n % NRECENT];
	s->cycle = cycle;
	s->mono_ns = cycle_mono_ns(cycle);
	s->seq = f[2];
	s->type = f[3];
	s->a = a;
	s->b = b;
	s->value = v;
	(*n)++;
}

static uint64_t byte_cycles_line(void) { return 10 * A->frequency / line_baud; }

/* A frame the MCU received (its last byte begins at cycle). */
static void on_frame_to_mcu(fparse_t *f, int len, uint64_t cycle)
{
	uint64_t end = cycle + byte_cycles_line();
	uint64_t min_gap = hello_ack.seen ? ns_to_cycles((int64_t)hello_ack.max_duration_ms * 500000) : A->frequency / 20;
	if (to_mcu_frames_seen && end - last_frame_end >= min_gap) {
		gaps[ngaps % NRECENT] = (gap_t){last_frame_end, end};
		ngaps++;
	}
	to_mcu_frames_seen++;
	last_frame_end = end;
	if (f->buf[3] == 0x02 && len == 5)
		push_seen(sets, &nsets, end, f->buf, f->buf[4], 0, get32(f->buf + 5));
}

/* A frame the MCU sent (its last stop bit leaves at cycle). */
static void on_frame_to_host(fparse_t *f, int len, uint64_t cycle)
{
	const uint8_t *p = f->buf + 4;
	switch (f->buf[3]) {
	case 0xA0: /* TELEMETRY */
	case 0x84: /* PONG */
		if (len < 2)
			return;
		if (f->buf[3] == 0xA0)
			telemetries++, last_telemetry_cycle = cycle;
		uint16_t faults = (uint16_t)(p[0] | p[1] << 8);
		if (!have_faults || faults != last_faults) {
			faultlog[nfaultlog % NRECENT] = (faultseen_t){cycle, faults};
			nfaultlog++;
		}
		have_faults = 1;
		last_faults = faults;
		return;
	case 0x81: /* HELLO_ACK */
		if (len != 10)
			return;
		hello_ack.seen = 1;
		hello_ack.cycle = cycle;
		hello_ack.version = p[0], hello_ack.channels = p[1], hello_ack.supplies = p[2], hello_ack.window = p[3];
		hello_ack.max_duration_ms = (uint16_t)(p[4] | p[5] << 8);
		hello_ack.telemetry_ms = (uint16_t)(p[6] | p[7] << 8);
		hello_ack.faults = (uint16_t)(p[8] | p[9] << 8);
		return;
	case 0x82: /* SET_ACK */
	case 0x83: /* HALT_ACK */
		if (len == 6)
			push_seen(acks, &nacks, cycle, f->buf, p[0], p[1], get32(p + 2));
		return;
	case 0xFF: /* NAK */
		if (len == 2)
			push_seen(acks, &nacks, cycle, f->buf, p[0], p[1], 0);
		return;
	}
}

/* ---- the cable's faults -------------------------------------------------------- */

enum { TO_MCU = 0, TO_HOST = 1 };
static int unplugged;
static uint64_t dropped_unplugged[2], corrupted[2], host_not_reading;
static struct {
	long remaining, every, xor_mask, phase;
} cor[2];
static long refuse_channel = -1;
static int32_t refuse_value = INT32_MAX;
static uint64_t refused, refuse_missed;

static uint8_t corrupt_byte(int d, uint8_t b)
{
	if (cor[d].remaining <= 0)
		return b;
	if (++cor[d].phase < cor[d].every)
		return b;
	cor[d].phase = 0;
	cor[d].remaining--;
	corrupted[d]++;
	return (uint8_t)(b ^ cor[d].xor_mask);
}

int link_corrupt(const char *dir, long count, long every, long xor_mask)
{
	if (count < 0 || every < 1 || xor_mask < 1 || xor_mask > 255)
		return -1;
	int both = !strcmp(dir, "both");
	if (!both && strcmp(dir, "to-mcu") && strcmp(dir, "to-host"))
		return -1;
	for (int d = 0; d < 2; d++) {
		if (!both && strcmp(dir, d == TO_MCU ? "to-mcu" : "to-host"))
			continue;
		cor[d].remaining = count, cor[d].every = every, cor[d].xor_mask = xor_mask, cor[d].phase = 0;
	}
	return 0;
}

int link_refuse(long channel, long value)
{
	if (channel < -1 || channel > 255 || value < INT32_MIN || value > INT32_MAX)
		return -1;
	refuse_channel = channel;
	refuse_value = (int32_t)value;
	return 0;
}

/* ---- to the MCU --------------------------------------------------------------- */

#define QN 16384
static struct {
	uint8_t b;
	uint64_t due; /* the cycle its start bit reaches the MCU */
} rxq[QN];
static uint64_t rx_head, rx_tail; /* next to deliver, next free */
static uint64_t rx_line_u;        /* the line is busy until rx_line_u / line_baud (cycles) */
static int feeder_armed;
static uint64_t to_mcu_bytes, rx_max_unread, rx_disabled, last_byte_end;
static fparse_t fp_enq, fp_mcu, fp_host;

/* A SET the host queued: if its channel is refused, its value is replaced
 * (by default with one out of every range) and its CRC fixed while it
 * still waits in the queue. */
static void on_frame_queued(fparse_t *f, int len, uint64_t cycle)
{
	(void)cycle;
	if (f->buf[3] != 0x02 || len != 5 || refuse_channel < 0 || f->buf[4] != refuse_channel)
		return;
	for (int k = 0; k < len + 6; k++)
		if (f->pos[k] < rx_head) {
			refuse_missed++; /* part of it is on the wire already */
			return;
		}
	uint8_t fr[11];
	memcpy(fr, f->buf, sizeof fr);
	for (int k = 0; k < 4; k++)
		fr[5 + k] = (uint8_t)((uint32_t)refuse_value >> (8 * k));
	uint16_t crc = crc16(fr + 1, 8);
	fr[9] = (uint8_t)crc, fr[10] = (uint8_t)(crc >> 8);
	for (int k = 5; k < 11; k++)
		rxq[f->pos[k] % QN].b = fr[k];
	refused++;
}

static unsigned uart_unread(void)
{
	return (unsigned)(((U->input.write + uart_fifo_fifo_size) - U->input.read) & (uart_fifo_fifo_size - 1));
}

static avr_cycle_count_t feeder(avr_t *avr, avr_cycle_count_t when, void *param)
{
	(void)param;
	while (rx_head < rx_tail && rxq[rx_head % QN].due <= when) {
		uint8_t b = corrupt_byte(TO_MCU, rxq[rx_head % QN].b);
		rx_head++;
		unsigned unread = uart_unread();
		if (unread > rx_max_unread)
			rx_max_unread = unread;
		if (!(avr->data[A_UCSR0B] & (1 << 4)))
			rx_disabled++; /* RXEN0 off: the byte is lost, as on the silicon */
		avr_raise_irq(U->io.irq + UART_IRQ_INPUT, b);
		to_mcu_bytes++;
		last_activity = when;
		last_byte_end = when + byte_cycles_line();
		fp_feed(&fp_mcu, b, 0, when);
	}
	if (rx_head < rx_tail)
		return rxq[rx_head % QN].due;
	feeder_armed = 0;
	return 0;
}

static void arm_feeder(void)
{
	if (feeder_armed || rx_head == rx_tail)
		return;
	uint64_t due = rxq[rx_head % QN].due;
	avr_cycle_timer_register(A, due > A->cycle ? due - A->cycle : 0, feeder, NULL);
	feeder_armed = 1;
}

void link_read_host(uint64_t arrival)
{
	uint8_t buf[4096];
	for (;;) {
		ssize_t n = read(master, buf, sizeof buf);
		if (n <= 0)
			break; /* EAGAIN: all taken */
		if (unplugged) {
			dropped_unplugged[TO_MCU] += (uint64_t)n;
			continue;
		}
		if (arrival < A->cycle)
			arrival = A->cycle;
		for (ssize_t i = 0; i < n; i++) {
			if (rx_tail - rx_head == QN) {
				dropped_unplugged[TO_MCU]++; /* cannot happen at any sane rate */
				continue;
			}
			uint64_t start = rx_line_u > arrival * line_baud ? rx_line_u : arrival * line_baud;
			rxq[rx_tail % QN].b = buf[i];
			rxq[rx_tail % QN].due = (start + line_baud - 1) / line_baud;
			fp_feed(&fp_enq, buf[i], rx_tail, arrival);
			rx_tail++;
			rx_line_u = start + 10 * A->frequency; /* 10 bits at line_baud, in cycle*baud units */
		}
	}
	arm_feeder();
}

/* ---- to the host ----------------------------------------------------------------- */

static struct {
	uint8_t b;
	uint64_t done; /* the cycle its stop bit ends */
} txq[QN];
static uint64_t tx_head, tx_tail, tx_line_free, to_host_bytes;

static uint64_t uart_bit_cycles(void)
{
	unsigned ubrr = A->data[A_UBRR0L] | (A->data[A_UBRR0H] & 0x0F) << 8;
	int u2x = A->data[A_UCSR0A] & (1 << 1);
	return (uint64_t)(ubrr + 1) * (u2x ? 8 : 16);
}

static int uart_frame_bits(void)
{
	static const int data_bits[8] = {5, 6, 7, 8, 8, 8, 8, 9};
	int ucsz = ((A->data[A_UCSR0C] >> 1) & 3) | ((A->data[A_UCSR0B] >> 2) & 1) << 2;
	int parity = (A->data[A_UCSR0C] >> 4) & 3 ? 1 : 0;
	int stop = (A->data[A_UCSR0C] >> 3) & 1 ? 2 : 1;
	return 1 + data_bits[ucsz] + parity + stop;
}

static void tx_notify(struct avr_irq_t *irq, uint32_t value, void *param)
{
	(void)irq, (void)param;
	uint64_t start = A->cycle > tx_line_free ? A->cycle : tx_line_free;
	uint64_t done = start + uart_bit_cycles() * (uint64_t)uart_frame_bits();
	tx_line_free = done;
	last_activity = A->cycle;
	uint8_t b = (uint8_t)value;
	fp_feed(&fp_host, b, 0, done);
	if (tx_tail - tx_head == QN) {
		host_not_reading++;
		return;
	}
	txq[tx_tail % QN].b = b;
	txq[tx_tail % QN].done = done;
	tx_tail++;
}

/* The firmware set its baud rate or frame format: give simavr the byte
 * time the silicon would have. */
static void uart_config_notify(struct avr_irq_t *irq, uint32_t value, void *param)
{
	(void)irq, (void)value, (void)param;
	U->cycles_per_byte = uart_bit_cycles() * (uint64_t)uart_frame_bits();
}

void link_flush_host(uint64_t now)
{
	uint8_t buf[4096];
	size_t n = 0;
	while (tx_head < tx_tail && txq[tx_head % QN].done <= now && n < sizeof buf) {
		uint8_t b = corrupt_byte(TO_HOST, txq[tx_head % QN].b);
		tx_head++;
		if (unplugged)
			dropped_unplugged[TO_HOST]++;
		else
			buf[n++] = b;
	}
	if (!n)
		return;
	ssize_t w = write(master, buf, n);
	if (w < (ssize_t)n)
		fprintf(stderr, "saga-avr-rig: the host's side of the pty took %zd of %zu bytes (%s): the rest is lost\n", w, n,
			w < 0 ? strerror(errno) : "full");
	if (w < 0)
		w = 0;
	to_host_bytes += (uint64_t)w;
	host_not_reading += n - (size_t)w; /* the pty's buffer is full: nobody reads the port */
}

uint64_t link_next_due(void) { return tx_head < tx_tail ? txq[tx_head % QN].done : 0; }

/* link_busy: a byte went either way in the last 20 ms, or one is on its
 * way: more are likely to follow (the rest of a frame, an answer). */
int link_busy(uint64_t now)
{
	return tx_head < tx_tail || rx_head < rx_tail || now - last_activity < A->frequency / 50;
}

/* ---- setup ------------------------------------------------------------------------- */

int link_open(const char *path, long baud)
{
	line_baud = (uint64_t)baud;
	master = posix_openpt(O_RDWR | O_NOCTTY);
	if (master < 0 || grantpt(master) || unlockpt(master)) {
		perror("saga-avr-rig: pty");
		return -1;
	}
	const char *name = ptsname(master);
	if (!name) {
		perror("saga-avr-rig: ptsname");
		return -1;
	}
	snprintf(pty_name, sizeof pty_name, "%s", name);
	/* Held open so that the master never reads EIO between the host's
	 * opens, and set raw so that nothing the MCU sends is echoed back to
	 * it before the host sets its own mode. */
	slave_keep = open(pty_name, O_RDWR | O_NOCTTY);
	if (slave_keep < 0) {
		perror("saga-avr-rig: open pty");
		return -1;
	}
	struct termios tio;
	if (tcgetattr(slave_keep, &tio) == 0) {
		tio.c_iflag &= ~(tcflag_t)(IGNBRK | BRKINT | PARMRK | ISTRIP | INLCR | IGNCR | ICRNL | IXON | IXOFF);
		tio.c_oflag &= ~(tcflag_t)OPOST;
		tio.c_lflag &= ~(tcflag_t)(ECHO | ECHONL | ICANON | ISIG | IEXTEN);
		tio.c_cflag &= ~(tcflag_t)(CSIZE | PARENB);
		tio.c_cflag |= CS8 | CLOCAL | CREAD;
		tio.c_cc[VMIN] = 1;
		tio.c_cc[VTIME] = 0;
		cfsetispeed(&tio, B115200);
		cfsetospeed(&tio, B115200);
		tcsetattr(slave_keep, TCSANOW, &tio);
	}
	fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK);
	if (path && *path) {
		snprintf(link_path, sizeof link_path, "%s", path);
		unlink(link_path);
		if (symlink(pty_name, link_path)) {
			perror("saga-avr-rig: link");
			link_path[0] = 0;
			return -1;
		}
	}
	return master;
}

const char *link_pty_name(void) { return link_path[0] ? link_path : pty_name; }
int link_fd(void) { return master; }

void link_cleanup(void)
{
	if (link_path[0])
		unlink(link_path);
}

void link_attach(avr_t *avr)
{
	A = avr;
	for (avr_io_t *io = avr->io_port; io; io = io->next)
		if (io->kind && !strcmp(io->kind, "uart") && ((avr_uart_t *)io)->name == '0')
			U = (avr_uart_t *)io;
	if (!U) {
		fprintf(stderr, "saga-avr-rig: this MCU has no UART0\n");
		exit(2);
	}
	/* No usleep when the firmware polls UCSR0A (the rig paces time
	 * itself), and no echo of the firmware's lines on the console. */
	uint32_t flags = 0;
	avr_ioctl(avr, AVR_IOCTL_UART_SET_FLAGS('0'), &flags);
	avr_irq_register_notify(U->io.irq + UART_IRQ_OUTPUT, tx_notify, NULL);
	uint16_t regs[] = {A_UCSR0A, A_UCSR0B, A_UCSR0C, A_UBRR0L, A_UBRR0H};
	for (size_t i = 0; i < sizeof regs / sizeof regs[0]; i++)
		avr_irq_register_notify(avr_iomem_getirq(avr, regs[i], NULL, AVR_IOMEM_IRQ_ALL), uart_config_notify, NULL);
	fp_enq.on_frame = on_frame_queued;
	fp_mcu.on_frame = on_frame_to_mcu;
	fp_host.on_frame = on_frame_to_host;
}

void link_after_reset(void)
{
	/* The reset cancelled the feeder with every other cycle timer. A byte
	 * half out of the MCU's TX is cut short: lost. */
	feeder_armed = 0;
	arm_feeder();
	while (tx_tail > tx_head && txq[(tx_tail - 1) % QN].done > A->cycle)
		tx_tail--;
	tx_line_free = A->cycle;
}

void link_unplug(int on)
{
	if (on && !unplugged) {
		/* What is still on its way is lost with the cable. */
		dropped_unplugged[TO_MCU] += rx_tail - rx_head;
		rx_head = rx_tail;
		fp_enq.n = 0;
	}
	unplugged = on;
}

/* ---- JSON -------------------------------------------------------------------------------- */

static void seen_json(buf_t *b, const char *name, const seen_t *ring, uint64_t n)
{
	buf_printf(b, ",\"%s\":[", name);
	uint64_t first = n > NRECENT ? n - NRECENT : 0;
	for (uint64_t i = first; i < n; i++) {
		const seen_t *s = &ring[i % NRECENT];
		buf_printf(b, "%s{\"cycle\":%llu,\"mono_ns\":%lld,\"seq\":%u,\"type\":%u,\"a\":%u,\"b\":%u,\"value\":%ld}",
			   i > first ? "," : "", (unsigned long long)s->cycle, (long long)s->mono_ns, s->seq, s->type, s->a,
			   s->b, (long)s->value);
	}
	buf_printf(b, "]");
}

void link_json(buf_t *b, uint64_t now)
{
	(void)now;
	uint64_t cpb = uart_bit_cycles();
	buf_printf(b,
		   "\"link\":{\"pty\":\"%s\",\"plugged\":%s,\"line_baud\":%llu,\"mcu_baud\":%.1f,\"mcu_frame_bits\":%d,"
		   "\"rxen\":%s,\"to_mcu_bytes\":%llu,\"to_host_bytes\":%llu,\"queued_to_mcu\":%llu,"
		   "\"dropped_unplugged_to_mcu\":%llu,\"dropped_unplugged_to_host\":%llu,\"host_not_reading\":%llu,"
		   "\"corrupted_to_mcu\":%llu,\"corrupted_to_host\":%llu,\"corrupt_pending_to_mcu\":%ld,"
		   "\"corrupt_pending_to_host\":%ld,\"refuse_channel\":%ld,\"refuse_value\":%ld,\"refused\":%llu,\"refuse_missed\":%llu,"
		   "\"rx_disabled\":%llu,\"rx_max_unread\":%llu,"
		   "\"frames_to_mcu\":%llu,\"bad_to_mcu\":%llu,\"frames_to_host\":%llu,\"bad_to_host\":%llu,"
		   "\"last_byte_to_mcu_cycle\":%llu,\"last_byte_to_mcu_mono_ns\":%lld,"
		   "\"last_frame_to_mcu_cycle\":%llu,\"last_frame_to_mcu_mono_ns\":%lld,"
		   "\"telemetries\":%llu,\"last_telemetry_cycle\":%llu,\"faults\":%d",
		   link_pty_name(), unplugged ? "false" : "true", (unsigned long long)line_baud,
		   cpb ? (double)A->frequency / (double)cpb : 0.0, uart_frame_bits(),
		   A->data[A_UCSR0B] & (1 << 4) ? "true" : "false", (unsigned long long)to_mcu_bytes,
		   (unsigned long long)to_host_bytes, (unsigned long long)(rx_tail - rx_head),
		   (unsigned long long)dropped_unplugged[TO_MCU], (unsigned long long)dropped_unplugged[TO_HOST],
		   (unsigned long long)host_not_reading, (unsigned long long)corrupted[TO_MCU],
		   (unsigned long long)corrupted[TO_HOST], cor[TO_MCU].remaining, cor[TO_HOST].remaining, refuse_channel, (long)refuse_value,
		   (unsigned long long)refused, (unsigned long long)refuse_missed, (unsigned long long)rx_disabled,
		   (unsigned long long)rx_max_unread, (unsigned long long)fp_mcu.frames, (unsigned long long)fp_mcu.bad,
		   (unsigned long long)fp_host.frames, (unsigned long long)fp_host.bad,
		   (unsigned long long)last_byte_end, (long long)(to_mcu_bytes ? cycle_mono_ns(last_byte_end) : 0),
		   (unsigned long long)last_frame_end, (long long)(to_mcu_frames_seen ? cycle_mono_ns(last_frame_end) : 0),
		   (unsigned long long)telemetries, (unsigned long long)last_telemetry_cycle,
		   have_faults ? (int)last_faults : -1);
	if (hello_ack.seen)
		buf_printf(b,
			   ",\"hello_ack\":{\"cycle\":%llu,\"version\":%u,\"channels\":%u,\"supplies\":%u,\"window\":%u,"
			   "\"max_duration_ms\":%u,\"telemetry_ms\":%u,\"faults\":%u}",
			   (unsigned long long)hello_ack.cycle, hello_ack.version, hello_ack.channels, hello_ack.supplies,
			   hello_ack.window, hello_ack.max_duration_ms, hello_ack.telemetry_ms, hello_ack.faults);
	buf_printf(b, ",\"fault_changes\":[");
	uint64_t first = nfaultlog > NRECENT ? nfaultlog - NRECENT : 0;
	for (uint64_t i = first; i < nfaultlog; i++)
		buf_printf(b, "%s{\"cycle\":%llu,\"mono_ns\":%lld,\"faults\":%u}", i > first ? "," : "",
			   (unsigned long long)faultlog[i % NRECENT].cycle,
			   (long long)cycle_mono_ns(faultlog[i % NRECENT].cycle), faultlog[i % NRECENT].faults);
	buf_printf(b, "],\"silences\":[");
	first = ngaps > NRECENT ? ngaps - NRECENT : 0;
	for (uint64_t i = first; i < ngaps; i++)
		buf_printf(b, "%s{\"from_cycle\":%llu,\"to_cycle\":%llu,\"from_mono_ns\":%lld,\"to_mono_ns\":%lld}",
			   i > first ? "," : "", (unsigned long long)gaps[i % NRECENT].from,
			   (unsigned long long)gaps[i % NRECENT].to, (long long)cycle_mono_ns(gaps[i % NRECENT].from),
			   (long long)cycle_mono_ns(gaps[i % NRECENT].to));
	buf_printf(b, "]");
	seen_json(b, "sets", sets, nsets);
	seen_json(b, "acks", acks, nacks);
	buf_printf(b, "}");
}
