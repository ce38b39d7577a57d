package serial

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/internal/retrylog"
)

// handshakeRetry is the pause before HELLO is tried again after the MCU
// refused it or answered with something unusable (another protocol version,
// a bad HELLO_ACK): firmware does not change by itself, so hammering it
// helps nobody, but it may be re-flashed while the host runs.
const handshakeRetry = time.Second

// Stats counts what a Link has seen and done since Open.
type Stats struct {
	DecoderStats        // frames in, and what the decoder dropped
	FramesOut    uint64 // frames written, retransmissions included
	OutDropped   uint64 // frames not written because the writer was behind (a retransmission covers them)
	Retransmits  uint64 // frames written again for want of an answer
	Unmatched    uint64 // answers no request waited for: duplicates, late answers
	Malformed    uint64 // valid frames with an unusable payload or an unexpected type
	Foreign      uint64 // valid frames of a host type: an echo or a loopback, never an MCU
	Naks         uint64 // requests the MCU refused
	Handshakes   uint64 // sessions started
	SessionsLost uint64 // sessions ended: silence, no answer, port gone, MCU reset or watchdog
	Opens        uint64 // times the port was opened
	MCUWatchdog  uint64 // times the MCU reported that its watchdog had fired
	MCUResets    uint64 // times the MCU reported that it had restarted
}

// Link is the host end of the framed link to one MCU. It keeps the port
// open (reopening it after it fails), keeps a session with the MCU
// (HELLO, heartbeats, retransmission) and hands out the MCU's channels as
// actuators.Driver values and its supplies as voltage sources. All methods
// are safe for concurrent use.
type Link struct {
	cfg    Config
	open   Opener
	log    *slog.Logger
	tick   time.Duration
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced when the session or the window changes
	closed   bool
	conn     *conn
	sess     *session
	hello    *request      // HELLO in flight
	helloNot time.Time     // no HELLO before this
	downErr  error         // why there is no session
	openGate retrylog.Gate // when a port that keeps failing to open is logged again
	nextSeq  uint8
	pending  []*request // in flight, in seq order
	dec      Decoder
	decPast  DecoderStats // counters of the decoders of closed connections
	lastByte time.Time    // any byte received
	lastRx   time.Time    // a valid frame from the MCU received
	lastTx   time.Time
	chans    [MaxChannels]report
	volts    [MaxSupplies]int32
	voltsAt  time.Time
	faults   Faults
	stats    Stats
	tableMsg string // the last channel-table refusal logged
}

type session struct {
	ack       HelloAck
	window    int
	heartbeat time.Duration
	stale     time.Duration // a report older than this is not believed

	// The channel-table check (table.go).
	checking    bool                       // not done yet: not ready, Set waits
	describe    []int                      // channels still to DESCRIBE
	described   map[int]ChannelDescription // the MCU's answers
	describeNak []string                   // DESCRIBEs the MCU refused
	noDescribe  bool                       // the MCU does not know DESCRIBE
	tableErr    *Error                     // the table disagrees with Config.Expect
}

type report struct {
	ok bool
	st ChannelState
	at time.Time
}

type request struct {
	seq   uint8
	typ   Type
	ch    int // -1: none
	frame []byte
	sent  time.Time
	tries int
	done  chan result // buffered; receives exactly once
}

type result struct {
	f   Frame
	err *Error // nil: answered
}

// errFor returns the result's error, if any, naming the call.
func (r result) errFor(what string) error {
	if r.err == nil {
		return nil
	}
	e := *r.err
	e.Msg = what + ": " + e.Msg
	return &e
}

type conn struct {
	rwc        io.ReadWriteCloser
	out        chan []byte
	dead       chan struct{}
	readerDone chan struct{}
	once       sync.Once
	err        error
}

func (c *conn) fail(err error) {
	c.once.Do(func() {
		c.err = err
		close(c.dead)
	})
}

// Open checks cfg and starts the link in the background: it opens the
// port, starts a session with the MCU, and keeps doing so after the port
// fails or the MCU falls silent, until Close. Open does not wait for the
// MCU — an MCU that is not there yet is not an error, and blocking start-up
// on hardware would leave a supervisor without even its status page — so
// use WaitReady to wait, and Ready to ask. Only an invalid Config, or a ctx
// that is already done (nothing is started then), is an error.
func Open(ctx context.Context, cfg Config) (*Link, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l := &Link{
		cfg:     c,
		open:    c.Opener,
		log:     c.Logger,
		changed: make(chan struct{}),
		downErr: errorf(CodeLinkLost, actuators.ErrLinkLost, "%s: not connected yet", c.Name),
	}
	if l.open == nil {
		l.open = portOpener(c)
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	l.log = l.log.With("link", c.Name)
	l.tick = min(max(min(c.AckTimeout, c.FrameGap)/4, time.Millisecond), 10*time.Millisecond)
	runCtx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	l.wg.Add(1)
	go l.run(runCtx)
	return l, nil
}

// OpenConn is Open over a stream that is already open, e.g. one end of a
// net.Pipe. The stream is never reopened: once it fails, the link stays
// down. cfg must name no port and no Opener.
func OpenConn(ctx context.Context, rwc io.ReadWriteCloser, cfg Config) (*Link, error) {
	if cfg.Opener != nil {
		return nil, errorf(CodeConfig, nil, "OpenConn with an Opener")
	}
	var mu sync.Mutex
	cfg.Opener = func(context.Context) (io.ReadWriteCloser, error) {
		mu.Lock()
		defer mu.Unlock()
		if rwc == nil {
			return nil, errors.New("the stream given to OpenConn failed and cannot be reopened")
		}
		r := rwc
		rwc = nil
		return r, nil
	}
	return Open(ctx, cfg)
}

// Close ends the link: requests in flight fail with an error wrapping
// ErrClosed and actuators.ErrLinkLost (in doubt), and the port is closed.
// Close does not move anything: the MCU's watchdog puts its outputs to
// their safe values once the heartbeats stop.
func (l *Link) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endSessionLocked(l.closedErr("close"), nil)
	return nil
}

func (l *Link) closedErr(what string) *Error {
	return errorf(CodeLinkLost, fmt.Errorf("%w: %w", ErrClosed, actuators.ErrLinkLost), "%s: %s", l.cfg.Name, what)
}

// Ready returns nil while a session with the MCU is up and the MCU reports
// no fault. Otherwise it says why: an error wrapping actuators.ErrLinkLost
// while there is no session (port gone, MCU silent, another protocol
// version — see CodeOf), or one of code CodeMCUFault.
func (l *Link) Ready() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.notLinkedLocked("ready"); err != nil {
		return err
	}
	if l.sess.checking {
		return errorf(CodeLinkLost, actuators.ErrLinkLost, "%s: session starting: checking the MCU's channel table", l.cfg.Name)
	}
	if l.sess.tableErr != nil {
		return l.sess.tableErr
	}
	if l.faults != 0 {
		return errorf(CodeMCUFault, nil, "%s: the MCU reports faults: %v", l.cfg.Name, l.faults)
	}
	return nil
}

// WaitReady waits until Ready returns nil or ctx is done, and returns
// Ready's last answer.
func (l *Link) WaitReady(ctx context.Context) error {
	for {
		l.mu.Lock()
		wait := l.changed
		l.mu.Unlock()
		err := l.Ready()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-wait:
		case <-time.After(l.tick):
		}
	}
}

// Stats returns the link's counters.
func (l *Link) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	d := l.dec.Stats()
	s.DecoderStats = DecoderStats{
		Frames:    l.decPast.Frames + d.Frames,
		BadCRC:    l.decPast.BadCRC + d.BadCRC,
		BadLength: l.decPast.BadLength + d.BadLength,
		Truncated: l.decPast.Truncated + d.Truncated,
		Skipped:   l.decPast.Skipped + d.Skipped,
	}
	return s
}

// Faults returns the fault flags of the MCU's latest HELLO_ACK, PONG or
// TELEMETRY in this session, or 0 while there is no session. Ready fails
// while any is set; a supervisor may act on particular ones (halt on
// FaultEStop).
func (l *Link) Faults() Faults {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.faults
}

// MCU returns what the MCU said about itself in the current session's
// HELLO_ACK, or false while there is no session.
func (l *Link) MCU() (HelloAck, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sess == nil {
		return HelloAck{}, false
	}
	return l.sess.ack, true
}

// notLinkedLocked returns why there is no session, or nil.
func (l *Link) notLinkedLocked(what string) error {
	if l.closed {
		return l.closedErr(what)
	}
	if l.sess != nil {
		l.silenceLocked(time.Now())
	}
	if l.sess == nil {
		return l.downErr
	}
	return nil
}

// silenceLocked ends the session if the MCU has sent no valid frame for
// longer than the link timeout. The tick checks it too, but a link asked
// first — a process resumed after SIGSTOP, or starved of the CPU, whose
// tick has not run yet — must not answer from a session the MCU may have
// given up on (its watchdog fires after a silence of its own).
func (l *Link) silenceLocked(now time.Time) bool {
	if silent := now.Sub(l.lastRx); silent > l.cfg.LinkTimeout {
		l.endSessionLocked(errorf(CodeLinkLost, actuators.ErrLinkLost, "%s: no valid frame from the MCU for %v", l.cfg.Name, silent.Round(time.Millisecond)), nil)
		return true
	}
	return false
}

func (l *Link) broadcastLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// run opens the port and serves it, again and again, until Close.
func (l *Link) run(ctx context.Context) {
	defer l.wg.Done()
	for {
		rwc, err := l.open(ctx)
		if err == nil {
			l.serve(ctx, rwc)
		} else if ctx.Err() == nil {
			l.mu.Lock()
			l.downErr = errorf(CodeLinkLost, actuators.ErrLinkLost, "%s: cannot open the port: %v", l.cfg.Name, err)
			if log, attempts := l.openGate.Failed(err, time.Now()); log {
				l.log.Warn("serial port not opened; retrying", "err", err, "attempts", attempts)
			}
			l.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(l.cfg.ReconnectInterval):
		}
	}
}

// serve runs one open port until it fails or the link closes.
func (l *Link) serve(ctx context.Context, rwc io.ReadWriteCloser) {
	c := &conn{rwc: rwc, out: make(chan []byte, 4*MaxWindow), dead: make(chan struct{}), readerDone: make(chan struct{})}
	l.mu.Lock()
	l.conn = c
	l.decPast = addDecoderStats(l.decPast, l.dec.Stats())
	l.dec = Decoder{}
	l.lastByte = time.Now()
	l.stats.Opens++
	l.mu.Unlock()
	if was, d, _ := l.openGate.Up(time.Now()); was {
		l.log.Info("serial port open", "after", d.Round(time.Millisecond))
	} else {
		l.log.Info("serial port open")
	}
	go l.readLoop(c)
	go l.writeLoop(c)

	t := time.NewTicker(l.tick)
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-c.dead:
			break loop
		case now := <-t.C:
			l.mu.Lock()
			l.tickLocked(now)
			l.mu.Unlock()
		}
	}
	t.Stop()
	c.fail(ErrClosed)
	rwc.Close() // ends the reader's blocked Read (go.bug.st/serial and net.Pipe both do)
	<-c.readerDone
	l.mu.Lock()
	defer l.mu.Unlock()
	l.conn = nil
	l.hello = nil
	cause := errorf(CodeLinkLost, actuators.ErrLinkLost, "%s: port lost: %v", l.cfg.Name, c.err)
	if ctx.Err() != nil {
		cause = l.closedErr("close")
	} else {
		l.log.Warn("serial port lost; reopening", "err", c.err)
	}
	l.endSessionLocked(cause, nil)
}

func addDecoderStats(a, b DecoderStats) DecoderStats {
	return DecoderStats{a.Frames + b.Frames, a.BadCRC + b.BadCRC, a.BadLength + b.BadLength, a.Truncated + b.Truncated, a.Skipped + b.Skipped}
}

func (l *Link) readLoop(c *conn) {
	defer close(c.readerDone)
	buf := make([]byte, 1024)
	for {
		n, err := c.rwc.Read(buf)
		if n > 0 {
			l.receive(c, buf[:n])
		}
		if err != nil {
			c.fail(err)
			return
		}
		if n == 0 { // a read timeout; never spin
			select {
			case <-c.dead:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}
}

func (l *Link) writeLoop(c *conn) {
	for {
		select {
		case <-c.dead:
			return
		case b := <-c.out:
			if _, err := c.rwc.Write(b); err != nil {
				c.fail(err)
				return
			}
		}
	}
}

func (l *Link) receive(c *conn, p []byte) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != c {
		return
	}
	l.lastByte = now
	l.dec.Write(p)
	l.drainLocked(now)
}

func (l *Link) drainLocked(now time.Time) {
	for {
		f, ok := l.dec.Next()
		if !ok {
			return
		}
		l.onFrameLocked(f, now)
	}
}

// writeLocked queues a frame for the writer. A frame that does not fit is
// dropped, as if lost on the line: the writer is stuck, and retransmission
// or the watchdogs will sort it out.
func (l *Link) writeLocked(frame []byte, now time.Time) {
	if l.conn == nil {
		return
	}
	select {
	case l.conn.out <- frame:
		l.stats.FramesOut++
	default:
		l.stats.OutDropped++
	}
	l.lastTx = now
}

// roomLocked reports whether another request may be sent: the window
// spans sequence numbers, not only requests, so every request the host may
// still retransmit lies in the MCU's duplicate cache (docs/SERIAL.md,
// "Window").
func (l *Link) roomLocked() bool {
	if l.sess == nil {
		return false
	}
	return len(l.pending) == 0 || int(l.nextSeq-l.pending[0].seq) < l.sess.window
}

func (l *Link) newRequestLocked(typ Type, ch int, payload []byte, now time.Time) *request {
	frame, err := Frame{Seq: l.nextSeq, Type: typ, Payload: payload}.MarshalBinary()
	if err != nil {
		panic(err) // every payload this package builds fits
	}
	p := &request{seq: l.nextSeq, typ: typ, ch: ch, frame: frame, sent: now, tries: 1, done: make(chan result, 1)}
	l.nextSeq++
	l.writeLocked(frame, now)
	return p
}

// tickLocked does what time asks for: give up a stalled partial frame, say
// HELLO, notice silence, retransmit, send a heartbeat.
func (l *Link) tickLocked(now time.Time) {
	if l.conn == nil {
		return
	}
	if l.dec.Pending() && now.Sub(l.lastByte) >= l.cfg.FrameGap {
		l.dec.Abandon()
		l.drainLocked(now)
		l.lastByte = now
	}
	if l.sess == nil {
		switch {
		case now.Before(l.helloNot):
		case l.hello == nil:
			p, _ := Hello{Version: ProtocolVersion}.AppendBinary(nil)
			l.hello = l.newRequestLocked(TypeHello, -1, p, now)
		case now.Sub(l.hello.sent) >= l.cfg.AckTimeout:
			l.hello.sent = now
			l.hello.tries++
			l.writeLocked(l.hello.frame, now)
		}
		return
	}
	if l.silenceLocked(now) {
		return
	}
	if len(l.pending) > 0 && now.Sub(l.pending[0].sent) >= l.cfg.AckTimeout {
		if old := l.pending[0]; old.tries > l.cfg.Retries {
			l.endSessionLocked(
				errorf(CodeLinkLost, actuators.ErrLinkLost, "%s: %v seq %d unanswered after %d tries", l.cfg.Name, old.typ, old.seq, old.tries),
				errorf(CodeNoAck, context.DeadlineExceeded, "%s: %v seq %d unanswered after %d tries; the effect is in doubt", l.cfg.Name, old.typ, old.seq, old.tries))
			return
		}
		// Go back N: the MCU takes requests in order only, so everything
		// after a lost one was dropped too. Duplicates are answered from
		// its cache without acting twice.
		for _, p := range l.pending {
			p.sent = now
			p.tries++
			l.stats.Retransmits++
			l.writeLocked(p.frame, now)
		}
	}
	l.describeLocked(now)
	if now.Sub(l.lastTx) >= l.sess.heartbeat && l.roomLocked() {
		l.pending = append(l.pending, l.newRequestLocked(TypePing, -1, nil, now))
	}
}

// endSessionLocked fails every request in flight with cause (the oldest
// with oldest, if given), forgets what the MCU reported, and makes the
// next tick say HELLO.
func (l *Link) endSessionLocked(cause, oldest *Error) {
	for i, p := range l.pending {
		err := cause
		if i == 0 && oldest != nil {
			err = oldest
		}
		p.done <- result{err: err}
	}
	l.pending = nil
	if l.sess != nil {
		l.stats.SessionsLost++
		l.log.Warn("serial session lost", "err", cause)
	}
	l.sess = nil
	l.downErr = cause
	l.chans = [MaxChannels]report{}
	l.voltsAt = time.Time{}
	l.faults = 0
	l.broadcastLocked()
}

func (l *Link) onFrameLocked(f Frame, now time.Time) {
	if !f.Type.FromMCU() {
		l.stats.Foreign++
		return
	}
	l.lastRx = now
	if f.Type == TypeTelemetry {
		l.onTelemetryLocked(f)
		return
	}
	if l.hello != nil && f.Seq == l.hello.seq {
		l.onHelloReplyLocked(f, now)
		return
	}
	i := 0
	for i < len(l.pending) && l.pending[i].seq != f.Seq {
		i++
	}
	if i == len(l.pending) {
		l.stats.Unmatched++
		return
	}
	p := l.pending[i]
	if f.Type != p.typ|0x80 && f.Type != TypeNak {
		l.stats.Malformed++
		return
	}
	var endCause *Error
	switch f.Type {
	case TypeNak:
		n, ok := l.nakLocked(f)
		if !ok {
			return
		}
		if n.Code == NakNoSession {
			endCause = errorf(CodeLinkLost, actuators.ErrLinkLost, "%s: the MCU has no session (it restarted, or its watchdog fired)", l.cfg.Name)
		}
		if p.typ == TypeDescribe {
			l.onDescribeLocked(f, p.ch)
		}
	case TypeDescribeAck:
		if !l.onDescribeLocked(f, p.ch) {
			return
		}
	case TypeSetAck, TypeHaltAck:
		var r ChannelReport
		if r.UnmarshalBinary(f.Payload) != nil || int(r.Channel) != p.ch {
			l.stats.Malformed++
			return
		}
		l.chans[p.ch] = report{ok: true, st: r.ChannelState, at: now}
	case TypePong:
		var pg Pong
		if pg.UnmarshalBinary(f.Payload) != nil {
			l.stats.Malformed++
			return
		}
		l.setFaultsLocked(pg.Faults)
	}
	l.pending = append(l.pending[:i], l.pending[i+1:]...)
	p.done <- result{f: f}
	l.broadcastLocked()
	if endCause != nil {
		l.endSessionLocked(endCause, nil)
		return
	}
	if p.typ == TypeDescribe {
		l.finishCheckLocked()
	}
}

// nakLocked decodes a NAK frame and counts it; false (counted malformed)
// when its payload is not a NAK.
func (l *Link) nakLocked(f Frame) (Nak, bool) {
	var n Nak
	if n.UnmarshalBinary(f.Payload) != nil {
		l.stats.Malformed++
		return n, false
	}
	l.stats.Naks++
	return n, true
}

func (l *Link) setFaultsLocked(f Faults) {
	if f != l.faults {
		l.log.Warn("MCU fault flags changed", "faults", f.String())
		l.faults = f
		l.broadcastLocked()
	}
}

func (l *Link) onHelloReplyLocked(f Frame, now time.Time) {
	var a HelloAck
	switch f.Type {
	case TypeHelloAck:
		if err := a.UnmarshalBinary(f.Payload); err != nil {
			l.refuseHandshakeLocked(errorf(CodeHandshake, actuators.ErrLinkLost, "%s: unusable HELLO_ACK: %v", l.cfg.Name, err), now)
			return
		}
		if a.Version != ProtocolVersion {
			l.refuseHandshakeLocked(errorf(CodeVersion, actuators.ErrLinkLost, "%s: the MCU speaks protocol version %d, this host %d", l.cfg.Name, a.Version, ProtocolVersion), now)
			return
		}
	case TypeNak:
		n, ok := l.nakLocked(f)
		if !ok {
			return
		}
		if n.Code == NakVersion {
			l.refuseHandshakeLocked(errorf(CodeVersion, actuators.ErrLinkLost, "%s: the MCU speaks protocol version %d, this host %d", l.cfg.Name, n.Detail, ProtocolVersion), now)
		} else {
			l.refuseHandshakeLocked(errorf(CodeHandshake, actuators.ErrLinkLost, "%s: the MCU refused HELLO: %v", l.cfg.Name, n.Code), now)
		}
		return
	default:
		l.stats.Malformed++
		return
	}
	l.hello = nil
	hb := min(l.cfg.LinkTimeout, a.MaxDuration) / 4
	if l.cfg.Heartbeat > 0 {
		hb = min(hb, l.cfg.Heartbeat)
	}
	l.sess = &session{
		ack:       a,
		window:    min(l.cfg.Window, int(a.Window)),
		heartbeat: max(hb, time.Millisecond),
		stale:     max(l.cfg.LinkTimeout, 3*a.TelemetryPeriod),
	}
	l.downErr = nil
	l.lastRx = now
	l.faults = a.Faults &^ (FaultWatchdog | FaultReset)
	l.stats.Handshakes++
	if a.Faults&FaultWatchdog != 0 {
		l.stats.MCUWatchdog++
		l.log.Warn("the MCU's watchdog had fired: its outputs went to their safe values")
	}
	if a.Faults&FaultReset != 0 {
		l.stats.MCUResets++
		l.log.Info("the MCU had restarted: its outputs are at their power-on values")
	}
	l.log.Info("serial session up", "channels", a.Channels, "supplies", a.Supplies, "window", l.sess.window,
		"max_duration", a.MaxDuration, "heartbeat", l.sess.heartbeat)
	l.startCheckLocked()
	l.broadcastLocked()
}

func (l *Link) refuseHandshakeLocked(err *Error, now time.Time) {
	l.hello = nil
	l.helloNot = now.Add(handshakeRetry)
	l.downErr = err
	l.log.Error("serial handshake refused", "err", err)
	l.broadcastLocked()
}

func (l *Link) onTelemetryLocked(f Frame) {
	if l.sess == nil {
		return
	}
	var t Telemetry
	if t.UnmarshalBinary(f.Payload) != nil || len(t.Channels) != int(l.sess.ack.Channels) || len(t.Volts) != int(l.sess.ack.Supplies) {
		l.stats.Malformed++
		return
	}
	if t.Faults.SessionEnding() {
		l.endSessionLocked(errorf(CodeLinkLost, actuators.ErrLinkLost, "%s: the MCU reports %v: its session ended", l.cfg.Name, t.Faults), nil)
		return
	}
	now := time.Now()
	for i, c := range t.Channels {
		l.chans[i] = report{ok: true, st: c, at: now}
	}
	copy(l.volts[:], t.Volts)
	l.voltsAt = now
	l.setFaultsLocked(t.Faults)
}

// call sends one request and waits for its answer. It refuses, sending
// nothing, while there is no session, for a channel the MCU does not have,
// and when the window stays full until ctx is done.
func (l *Link) call(ctx context.Context, typ Type, ch int, payload []byte, what string) (Frame, error) {
	l.mu.Lock()
	for {
		if err := l.notLinkedLocked(what); err != nil {
			l.mu.Unlock()
			return Frame{}, prefix(what, err)
		}
		if ch >= int(l.sess.ack.Channels) {
			n := l.sess.ack.Channels
			l.mu.Unlock()
			return Frame{}, errorf(CodeNoChannel, actuators.ErrNotApplied, "%s: the MCU has %d channels (0..%d); nothing sent", what, n, int(n)-1)
		}
		// SET waits for the channel-table check and is refused after a
		// mismatch. HALT is not: it only makes an output inert, and the
		// MCU applies its own polarity to that.
		if typ == TypeSet && l.sess.tableErr != nil {
			e := *l.sess.tableErr
			e.Msg = what + ": " + e.Msg + "; nothing sent"
			e.Err = actuators.ErrNotApplied
			l.mu.Unlock()
			return Frame{}, &e
		}
		if l.roomLocked() && ctx.Err() == nil && (typ != TypeSet || !l.sess.checking) {
			break
		}
		wait := l.changed
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return Frame{}, errorf(CodeBusy, actuators.ErrNotApplied, "%s: no room in the window (or the channel table not yet checked) before the context ended (%v); nothing sent", what, ctx.Err())
		case <-wait:
		}
		l.mu.Lock()
	}
	p := l.newRequestLocked(typ, ch, payload, time.Now())
	l.pending = append(l.pending, p)
	l.mu.Unlock()
	select {
	case r := <-p.done:
		return r.f, r.errFor(what)
	case <-ctx.Done():
		select {
		case r := <-p.done:
			return r.f, r.errFor(what)
		default:
		}
		return Frame{}, errorf(CodeNoAck, context.DeadlineExceeded, "%s: no answer to seq %d before the context ended (%v); the effect is in doubt", what, p.seq, ctx.Err())
	}
}
