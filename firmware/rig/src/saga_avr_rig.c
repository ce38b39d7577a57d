/*
 * saga_avr_rig.c: saga-avr-rig, an emulated bench for AVR firmware.
 *
 *   saga-avr-rig --elf FIRMWARE.elf [--link PATH] [--control HOST:PORT]
 *                [--mcu atmega328p] [--freq 16000000] [--baud 115200]
 *                [--pins PB1:wave,PB2:wave,PD5:wave,PD7:level,PB0:level,PD2:input]
 *                [--adc0-mv 4000] [--estop-pressed] [--verbose]
 *
 * It loads the ELF into simavr, runs the MCU in real time (simulated time
 * follows the monotonic clock, since the host's timeouts are wall time),
 * puts UART0 on a pty (link.c) and measures the pins (pins.c). It prints
 * two lines and serves HTTP on the control address until SIGTERM:
 *
 *   saga-avr-rig pty PATH
 *   saga-avr-rig control on http://127.0.0.1:PORT
 *
 *   GET  /pins                  the pins now, the line, the clock (JSON)
 *   GET  /history?since=CYCLE   what the pins did since CYCLE (JSON events)
 *   POST /adc?ch=N&mv=MV        the voltage at ADC input N, millivolts
 *   POST /estop?pressed=BOOL    open (pressed) or close the e-stop loop
 *   POST /unplug, /replug       cut the cable, restore it
 *   POST /reset?hold_ms=N       the reset button (held N ms: a power cut)
 *   POST /corrupt?dir=D&count=N&every=K&xor=X
 *                               flip bits (XOR X) in N bytes, one in every
 *                               K, going D: to-mcu, to-host or both
 *   POST /refuse?channel=C[&value=V]
 *                               SETs to channel C reach the MCU with value V
 *                               (thousandths; default INT32_MAX, which no
 *                               channel accepts), their CRC fixed; -1: none
 *
 * The pins are the truth the tests check: nothing here reads the
 * firmware's variables or trusts its telemetry.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "rig.h"
#include "avr_adc.h"
#include "avr_extint.h"
#include "sim_elf.h"

/* ---- time ------------------------------------------------------------------ */

static avr_t *avr;
static int64_t anchor_mono_ns, anchor_real_ns;
static uint64_t slips, late_2ms, loops;
static int niced; /* the nice value the rig got, 0 if it could not raise it */
static int64_t slipped_ns, lag_max_ns;

/* The rig fell this far behind the clock (stopped, or starved of CPU):
 * give up catching up (see rig.h). A shorter lag is caught up by running
 * the MCU faster than real time for a moment. */
#define LAG_SLIP_NS 1000000000
/* How often the rig looks at the MCU while the line is busy (less than a
 * byte time at 115200 baud), and while it is quiet (main loop, step 2). */
#define BUSY_STEP_NS 50000
#define IDLE_STEP_NS 1000000

static int64_t clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
int64_t rig_mono_ns(void) { return clock_ns(CLOCK_MONOTONIC); }
int64_t rig_real_ns(void) { return clock_ns(CLOCK_REALTIME); }

int64_t cycles_to_ns(uint64_t c)
{
	uint64_t hz = avr->frequency;
	return (int64_t)((c / hz) * 1000000000u + (c % hz) * 1000000000u / hz);
}

uint64_t ns_to_cycles(int64_t ns)
{
	if (ns <= 0)
		return 0;
	uint64_t hz = avr->frequency, n = (uint64_t)ns;
	return (n / 1000000000u) * hz + (n % 1000000000u) * hz / 1000000000u;
}

int64_t cycle_mono_ns(uint64_t c) { return anchor_mono_ns + cycles_to_ns(c); }
int64_t cycle_real_ns(uint64_t c) { return anchor_real_ns + cycles_to_ns(c); }

/* ---- text ------------------------------------------------------------------- */

void buf_printf(buf_t *b, const char *fmt, ...)
{
	if (b->oom)
		return;
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		size_t room = b->cap - b->n;
		int k = vsnprintf(b->p ? b->p + b->n : NULL, room, fmt, ap);
		va_end(ap);
		if (k < 0)
			return;
		if ((size_t)k < room) {
			b->n += (size_t)k;
			return;
		}
		size_t cap = b->cap ? b->cap * 2 : 4096;
		while (cap - b->n <= (size_t)k)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->oom = 1;
			return;
		}
		b->p = p, b->cap = cap;
	}
}

void buf_free(buf_t *b)
{
	free(b->p);
	memset(b, 0, sizeof *b);
}

/* ---- the MCU ------------------------------------------------------------------ */

static void (*core_reset)(avr_t *);
static int reset_pending;
static const char *reset_cause = "watchdog"; /* simavr resets on its own only for the watchdog */
static uint64_t resets;
static int held;
static int64_t held_until_ns;
static uint32_t adc_mv[8];

/* simavr calls this from avr_reset, after zeroing the registers and the
 * cycle timers and before resetting its peripherals; the rest of the
 * rig's part is done once avr_run returns (after_reset). */
static void reset_hook(avr_t *a)
{
	if (core_reset)
		core_reset(a);
	reset_pending = 1;
}

/* simavr polls a level-triggered INT0/INT1 pin every cycle while it is
 * low, whether or not the interrupt is enabled; the e-stop input (PD2,
 * INT0) is low whenever the loop is closed, which would cost a CPU. The
 * rig turns that off: a low level interrupts once, when the pin goes low. */
static void no_level_polling(void)
{
	avr_extint_set_strict_lvl_trig(avr, 0, 0);
	avr_extint_set_strict_lvl_trig(avr, 1, 0);
}

static void after_reset(void)
{
	reset_pending = 0;
	no_level_polling();
	resets++;
	pins_record_reset(avr->cycle, reset_cause);
	reset_cause = "watchdog";
	pins_after_reset();
	link_after_reset();
	for (int i = 0; i < 8; i++)
		avr_raise_irq(avr_io_getirq(avr, AVR_IOCTL_ADC_GETIRQ, ADC_IRQ_ADC0 + i), adc_mv[i]);
}

static void do_reset(const char *why)
{
	reset_cause = why;
	avr_reset(avr);
	after_reset();
}

/* The firmware slept: time passes at the rig's pace, not simavr's usleep. */
static void rig_sleep(avr_t *a, avr_cycle_count_t how_long)
{
	(void)a, (void)how_long;
}

static const char *state_name(int s)
{
	switch (s) {
	case cpu_Running:
		return "running";
	case cpu_Sleeping:
		return "sleeping";
	case cpu_Done:
		return "done";
	case cpu_Crashed:
		return "crashed";
	case cpu_Stopped:
		return "stopped";
	}
	return "limbo";
}

static void run_until(uint64_t limit)
{
	while (avr->cycle < limit) {
		if (held || (avr->state != cpu_Running && avr->state != cpu_Sleeping)) {
			/* Held in reset, or stopped (slept with interrupts off, or
			 * crashed): time goes on, and with it the cycle timers —
			 * the watchdog among them, which may reset it. */
			avr->cycle = limit;
			avr_cycle_timer_process(avr);
			if (!held && avr->run != avr_callback_run_raw)
				avr_run(avr); /* the watchdog's reset, queued in avr->run */
		} else {
			avr_run(avr);
		}
		if (reset_pending)
			after_reset();
	}
}

/* ---- HTTP ------------------------------------------------------------------------- */

#define MAXCONN 16
#define REQMAX 8192
static struct conn {
	int fd;
	size_t n;
	char req[REQMAX];
} conns[MAXCONN];
static int listen_fd = -1;

static int http_listen(const char *addr, char *bound, size_t boundsz)
{
	char host[128];
	const char *colon = strrchr(addr, ':');
	if (!colon || (size_t)(colon - addr) >= sizeof host)
		return -1;
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = 0;
	struct sockaddr_in sa;
	memset(&sa, 0, sizeof sa);
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)atoi(colon + 1));
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		return -1;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 16))
		return -1;
	socklen_t len = sizeof sa;
	getsockname(fd, (struct sockaddr *)&sa, &len);
	snprintf(bound, boundsz, "%s:%u", host, ntohs(sa.sin_port));
	for (int i = 0; i < MAXCONN; i++)
		conns[i].fd = -1;
	return fd;
}

/* qget copies the value of key in the query string q into out. */
static int qget(const char *q, const char *key, char *out, size_t outsz)
{
	size_t kl = strlen(key);
	for (const char *p = q; p && *p;) {
		const char *amp = strchr(p, '&');
		size_t len = amp ? (size_t)(amp - p) : strlen(p);
		if (len > kl && p[kl] == '=' && !strncmp(p, key, kl)) {
			size_t vl = len - kl - 1;
			if (vl >= outsz)
				return 0;
			memcpy(out, p + kl + 1, vl);
			out[vl] = 0;
			return 1;
		}
		p = amp ? amp + 1 : NULL;
	}
	return 0;
}

static int qlong(const char *q, const char *key, long *v)
{
	char s[32], *end;
	if (!qget(q, key, s, sizeof s))
		return 0;
	errno = 0;
	*v = strtol(s, &end, 0);
	return !errno && end != s && !*end ? 1 : -1;
}

static int qbool(const char *q, const char *key, int *v)
{
	char s[8];
	if (!qget(q, key, s, sizeof s))
		return 0;
	if (!strcmp(s, "true") || !strcmp(s, "1"))
		*v = 1;
	else if (!strcmp(s, "false") || !strcmp(s, "0"))
		*v = 0;
	else
		return -1;
	return 1;
}

static void pins_doc(buf_t *b)
{
	uint64_t now = avr->cycle;
	buf_printf(b,
		   "{\"cycle\":%llu,\"hz\":%u,\"mono_ns\":%lld,\"real_ns\":%lld,\"state\":\"%s\",\"held\":%s,"
		   "\"resets\":%llu,\"slips\":%llu,\"slipped_ns\":%lld,\"lag_max_ns\":%lld,\"late_2ms\":%llu,\"loops\":%llu,\"cpu_ns\":%lld,\"nice\":%d,\"adc_mv\":[",
		   (unsigned long long)now, avr->frequency, (long long)cycle_mono_ns(now), (long long)cycle_real_ns(now),
		   state_name(avr->state), held ? "true" : "false", (unsigned long long)resets, (unsigned long long)slips,
		   (long long)slipped_ns, (long long)lag_max_ns, (unsigned long long)late_2ms, (unsigned long long)loops,
		   (long long)clock_ns(CLOCK_PROCESS_CPUTIME_ID), niced);
	for (int i = 0; i < 8; i++)
		buf_printf(b, "%s%u", i ? "," : "", adc_mv[i]);
	buf_printf(b, "],");
	link_json(b, now);
	buf_printf(b, ",");
	pins_json(b);
	buf_printf(b, "}");
}

/* handle answers one request: its status, and its body in out. */
static int handle(const char *method, const char *path, const char *q, buf_t *out)
{
	int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
	long n, m;
	int on;
	if (!strcmp(path, "/pins")) {
		if (!get)
			return 405;
		pins_doc(out);
		return 200;
	}
	if (!strcmp(path, "/history")) {
		if (!get)
			return 405;
		long since = 0;
		if (qlong(q, "since", &since) < 0 || since < 0)
			return 400;
		history_json(out, (uint64_t)since);
		return 200;
	}
	if (!post)
		return strcmp(path, "/adc") && strcmp(path, "/estop") && strcmp(path, "/unplug") &&
				       strcmp(path, "/replug") && strcmp(path, "/reset") && strcmp(path, "/corrupt") &&
				       strcmp(path, "/refuse")
			       ? 404
			       : 405;
	if (!strcmp(path, "/adc")) {
		if (qlong(q, "ch", &n) != 1 || qlong(q, "mv", &m) != 1 || n < 0 || n > 7 || m < 0 || m > 20000)
			return 400;
		adc_mv[n] = (uint32_t)m;
		avr_raise_irq(avr_io_getirq(avr, AVR_IOCTL_ADC_GETIRQ, ADC_IRQ_ADC0 + (int)n), (uint32_t)m);
	} else if (!strcmp(path, "/estop")) {
		if (qbool(q, "pressed", &on) != 1)
			return 400;
		estop_set(on);
	} else if (!strcmp(path, "/unplug")) {
		link_unplug(1);
	} else if (!strcmp(path, "/replug")) {
		link_unplug(0);
	} else if (!strcmp(path, "/reset")) {
		long hold = 0;
		if (qlong(q, "hold_ms", &hold) < 0 || hold < 0 || hold > 60000)
			return 400;
		do_reset(hold ? "power" : "external");
		if (hold) {
			held = 1;
			held_until_ns = rig_mono_ns() + hold * 1000000;
		}
	} else if (!strcmp(path, "/corrupt")) {
		char dir[16] = "to-mcu";
		long count = 1, every = 1, x = 0x01;
		qget(q, "dir", dir, sizeof dir);
		if (qlong(q, "count", &count) < 0 || qlong(q, "every", &every) < 0 || qlong(q, "xor", &x) < 0 ||
		    link_corrupt(dir, count, every, x))
			return 400;
	} else if (!strcmp(path, "/refuse")) {
		long v = INT32_MAX;
		if (qlong(q, "channel", &n) != 1 || qlong(q, "value", &v) < 0 || link_refuse(n, v))
			return 400;
	} else {
		return 404;
	}
	pins_doc(out);
	return 200;
}

static void respond(int fd, int status, buf_t *body)
{
	const char *reason = status == 200 ? "OK" : status == 400 ? "Bad Request" : status == 404 ? "Not Found" : "Method Not Allowed";
	if (status != 200) {
		buf_free(body);
		buf_printf(body, "%d %s\n", status, reason);
	}
	char head[256];
	int hl = snprintf(head, sizeof head,
			  "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", status,
			  reason, status == 200 ? "application/json" : "text/plain", body->oom ? 0 : body->n);
	/* Blocking, with a time limit: the reader is a test on this machine. */
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	struct timeval tv = {1, 0};
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	const char *parts[2] = {head, body->p};
	size_t lens[2] = {(size_t)hl, body->oom ? 0 : body->n};
	for (int i = 0; i < 2; i++)
		for (size_t off = 0; off < lens[i];) {
			ssize_t w = send(fd, parts[i] + off, lens[i] - off, MSG_NOSIGNAL);
			if (w <= 0)
				return;
			off += (size_t)w;
		}
}

static void conn_read(struct conn *c)
{
	ssize_t r = recv(c->fd, c->req + c->n, REQMAX - 1 - c->n, 0);
	if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return;
	if (r <= 0)
		goto done;
	c->n += (size_t)r;
	c->req[c->n] = 0;
	if (!strstr(c->req, "\r\n\r\n")) {
		if (c->n < REQMAX - 1)
			return;
		buf_t none = {0};
		respond(c->fd, 400, &none);
		buf_free(&none);
		goto done;
	}
	char method[8], target[1024];
	buf_t body = {0};
	if (sscanf(c->req, "%7s %1023s", method, target) != 2) {
		respond(c->fd, 400, &body);
	} else {
		char *q = strchr(target, '?');
		if (q)
			*q++ = 0;
		respond(c->fd, handle(method, target, q ? q : "", &body), &body);
	}
	buf_free(&body);
done:
	close(c->fd);
	c->fd = -1;
	c->n = 0;
}

/* ---- main ------------------------------------------------------------------------------ */

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig, stop = 1; }

static void usage(void)
{
	fprintf(stderr, "usage: saga-avr-rig --elf FIRMWARE.elf [--link PATH] [--control HOST:PORT] [--mcu NAME]\n"
			"       [--freq HZ] [--baud N] [--pins LIST] [--adc0-mv MV] [--estop-pressed] [--verbose]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *elf = NULL, *link = NULL, *control = "127.0.0.1:0", *mcu = "atmega328p";
	const char *pinlist = "PB1:wave,PB2:wave,PD5:wave,PD7:level,PB0:level,PD2:input";
	long freq = 16000000, baud = 115200, adc0 = 4000;
	int estop = 0, verbose = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--estop-pressed"))
			estop = 1;
		else if (!strcmp(a, "--verbose"))
			verbose = 1;
		else if (!v)
			usage();
		else if (!strcmp(a, "--elf"))
			elf = v, i++;
		else if (!strcmp(a, "--link"))
			link = v, i++;
		else if (!strcmp(a, "--control"))
			control = v, i++;
		else if (!strcmp(a, "--mcu"))
			mcu = v, i++;
		else if (!strcmp(a, "--pins"))
			pinlist = v, i++;
		else if (!strcmp(a, "--freq"))
			freq = strtol(v, NULL, 10), i++;
		else if (!strcmp(a, "--baud"))
			baud = strtol(v, NULL, 10), i++;
		else if (!strcmp(a, "--adc0-mv"))
			adc0 = strtol(v, NULL, 10), i++;
		else
			usage();
	}
	if (!elf || freq < 1000000 || freq > 32000000 || baud < 300 || baud > 2000000 || adc0 < 0 || adc0 > 20000)
		usage();
	char *pl = strdup(pinlist);
	for (char *tok = strtok(pl, ","); tok; tok = strtok(NULL, ","))
		if (pins_add(tok)) {
			fprintf(stderr, "saga-avr-rig: --pins: bad pin %s (want P[BCD][0-7][:wave|:level|:input], each once)\n", tok);
			return 2;
		}
	free(pl);

	elf_firmware_t fw;
	memset(&fw, 0, sizeof fw);
	if (elf_read_firmware(elf, &fw)) {
		fprintf(stderr, "saga-avr-rig: %s: not a firmware ELF simavr can load\n", elf);
		return 1;
	}
	if (fw.mmcu[0] && strcmp(fw.mmcu, mcu)) {
		fprintf(stderr, "saga-avr-rig: %s is built for %s, not %s\n", elf, fw.mmcu, mcu);
		return 1;
	}
	avr = avr_make_mcu_by_name(mcu);
	if (!avr) {
		fprintf(stderr, "saga-avr-rig: simavr knows no MCU %s\n", mcu);
		return 1;
	}
	avr_init(avr);
	avr_load_firmware(avr, &fw);
	avr->frequency = (uint32_t)freq;
	avr->vcc = avr->avcc = avr->aref = 5000; /* a 5 V board; AREF unconnected, as with AVcc reference */
	avr->log = verbose ? LOG_WARNING : LOG_ERROR;
	avr->sleep = rig_sleep;
	core_reset = avr->reset;
	avr->reset = reset_hook;

	no_level_polling();
	if (pins_attach(avr))
		return 1;
	if (link_open(link, baud) < 0)
		return 1;
	link_attach(avr);
	adc_mv[0] = (uint32_t)adc0;
	for (int i = 0; i < 8; i++)
		avr_raise_irq(avr_io_getirq(avr, AVR_IOCTL_ADC_GETIRQ, ADC_IRQ_ADC0 + i), adc_mv[i]);
	if (estop)
		estop_set(1);

	char bound[160];
	listen_fd = http_listen(control, bound, sizeof bound);
	if (listen_fd < 0) {
		fprintf(stderr, "saga-avr-rig: --control %s: cannot listen\n", control);
		return 1;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
#ifdef __linux__
	prctl(PR_SET_TIMERSLACK, 1UL); /* wake from ppoll on time, not 50 us late */
#endif
	/* The rig's timing is the MCU's: ask to be scheduled ahead of the
	 * builds and tests around it. Allowed to root (CI) or with
	 * CAP_SYS_NICE; without, the rig runs at the priority it has. */
	if (setpriority(PRIO_PROCESS, 0, -10) == 0)
		niced = -10;
	printf("saga-avr-rig pty %s\n", link_pty_name());
	printf("saga-avr-rig control on http://%s\n", bound);
	fflush(stdout);

	anchor_mono_ns = rig_mono_ns() - cycles_to_ns(avr->cycle);
	anchor_real_ns = rig_real_ns() - cycles_to_ns(avr->cycle);
	pins_record_reset(avr->cycle, "power-on");
	uint64_t busy_step = ns_to_cycles(BUSY_STEP_NS), idle_step = ns_to_cycles(IDLE_STEP_NS);

	while (!stop) {
		loops++;
		/* 1. The MCU catches up with the clock. */
		int64_t now = rig_mono_ns();
		/* How far the MCU is behind the clock: up to IDLE_STEP_NS by
		 * design (the rig looks every millisecond while the line is
		 * quiet); more is the machine's doing. */
		int64_t behind = now - cycle_mono_ns(avr->cycle);
		if (behind > lag_max_ns)
			lag_max_ns = behind;
		if (behind > 2 * IDLE_STEP_NS)
			late_2ms++;
		if (behind > LAG_SLIP_NS) {
			/* The rig was stopped, or the machine starved it, for too
			 * long to catch up: the lost time is lost to the MCU too. */
			anchor_mono_ns += behind, anchor_real_ns += behind;
			slips++, slipped_ns += behind;
		}
		if (held && now >= held_until_ns) {
			held = 0;
			do_reset("power");
		}
		uint64_t target = ns_to_cycles(now - anchor_mono_ns);
		if (target > avr->cycle)
			run_until(target < avr->cycle + idle_step ? target : avr->cycle + idle_step);
		link_flush_host(avr->cycle);
		pins_tick(avr->cycle);

		/* 2. Wait. The pins need no waking: they are measured in cycles,
		 * however late the rig computes them. What the host sees does:
		 * while the line is busy the rig looks every BUSY_STEP_NS (less
		 * than a byte time, so a byte the MCU starts is found before its
		 * stop bit is due, and written on time); while it is quiet, every
		 * IDLE_STEP_NS (an unasked frame, telemetry, may then reach the
		 * host up to that late). The host's bytes wake the rig at once. */
		int64_t timeout_ns = 0;
		if (avr->cycle >= target) {
			uint64_t next = avr->cycle + (link_busy(avr->cycle) ? busy_step : idle_step);
			uint64_t due = link_next_due();
			if (due && due < next)
				next = due > avr->cycle ? due : avr->cycle + 1;
			timeout_ns = cycle_mono_ns(next) - rig_mono_ns();
			if (timeout_ns < 0)
				timeout_ns = 0;
		}

		struct pollfd fds[2 + MAXCONN];
		int nf = 0;
		fds[nf++] = (struct pollfd){.fd = link_fd(), .events = POLLIN};
		fds[nf++] = (struct pollfd){.fd = listen_fd, .events = POLLIN};
		for (int i = 0; i < MAXCONN; i++)
			if (conns[i].fd >= 0)
				fds[nf++] = (struct pollfd){.fd = conns[i].fd, .events = POLLIN};
		struct timespec ts = {timeout_ns / 1000000000, timeout_ns % 1000000000};
		int r = ppoll(fds, (nfds_t)nf, &ts, NULL);
		if (r < 0 && errno != EINTR) {
			perror("saga-avr-rig: ppoll");
			break;
		}
		if (r <= 0)
			continue;

		/* 3. Input: the host's bytes reach the cable now; requests are
		 * answered between two instructions of the MCU. */
		now = rig_mono_ns();
		if (now - cycle_mono_ns(avr->cycle) > 0) {
			uint64_t t2 = ns_to_cycles(now - anchor_mono_ns);
			run_until(t2 < avr->cycle + idle_step ? t2 : avr->cycle + idle_step);
		}
		if (fds[0].revents & POLLIN)
			link_read_host(ns_to_cycles(now - anchor_mono_ns));
		if (fds[1].revents & POLLIN) {
			int fd;
			while ((fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
				int i = 0;
				while (i < MAXCONN && conns[i].fd >= 0)
					i++;
				if (i == MAXCONN) {
					close(fd);
					continue;
				}
				conns[i].fd = fd, conns[i].n = 0;
			}
		}
		for (int k = 2; k < nf; k++)
			if (fds[k].revents)
				for (int i = 0; i < MAXCONN; i++)
					if (conns[i].fd == fds[k].fd)
						conn_read(&conns[i]);
	}
	link_cleanup();
	return 0;
}
