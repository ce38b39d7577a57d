package serial

import (
	"context"
	"fmt"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

// Channel is one output of the MCU: an actuators.Driver and
// actuators.ReadBacker. Its value is in the actuator's unit (degrees, duty
// 0..1, 0/1, a setpoint) and travels in thousandths (ToMilli).
//
// What Set returns, and what it promises (actuators.Driver):
//
//   - nil: the MCU acknowledged the SET with the value it applied, and that
//     value is within the channel's tolerance of the one asked for.
//   - code CodeValueRange, CodeNoChannel or CodeBusy (wrap
//     actuators.ErrNotApplied): nothing was sent.
//   - code CodeNak (wraps actuators.ErrNotApplied): the MCU refused and
//     promises it changed nothing.
//   - code CodeNoAck (wraps context.DeadlineExceeded): no answer within the
//     retries or before ctx was done — in doubt.
//   - code CodeLinkLost (wraps actuators.ErrLinkLost): no session when Set
//     was called, or the session ended while it waited — in doubt. A NAK
//     NO_SESSION is one of these, not a CodeNak: the MCU sends it to any
//     request once it has restarted or its watchdog fired, also to the
//     retransmission of a SET it had acted on before.
//   - code CodeMismatch (wraps ErrMismatch): the MCU's read-back (the
//     value it applied) differs from the target by more than the
//     tolerance, or the MCU left the output detached or in fault — the
//     output moved, but not where asked, so the step is in doubt and must
//     be compensated. The link is fine: nothing says it was lost.
//
// Only the errors wrapping actuators.ErrNotApplied promise that nothing
// changed; the engine treats every other error as in doubt.
type Channel struct {
	l   *Link
	n   int
	tol int32 // milli-units
}

// ChannelOption configures a Channel.
type ChannelOption func(*Channel) error

// WithTolerance accepts a SET_ACK whose applied value is within units of
// the value asked for, for MCUs that quantise (a servo library that takes
// whole microseconds or degrees). The default is exact, to the thousandth.
func WithTolerance(units float64) ChannelOption {
	return func(c *Channel) error {
		m, err := ToMilli(units)
		if err != nil || m < 0 {
			return errorf(CodeConfig, nil, "tolerance %v: want a finite value >= 0", units)
		}
		c.tol = m
		return nil
	}
}

var (
	_ actuators.Driver     = (*Channel)(nil)
	_ actuators.ReadBacker = (*Channel)(nil)
	_ actuators.Drifter    = (*Channel)(nil)
)

// Channel returns the MCU's channel n, 0 <= n < MaxChannels. Whether the
// MCU has it is known only once a session is up; Set refuses a channel the
// MCU does not have with CodeNoChannel, sending nothing.
func (l *Link) Channel(n int, opts ...ChannelOption) (*Channel, error) {
	if n < 0 || n >= MaxChannels {
		return nil, errorf(CodeNoChannel, nil, "%s: channel %d: want 0..%d", l.cfg.Name, n, MaxChannels-1)
	}
	c := &Channel{l: l, n: n}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *Channel) what(op string) string { return fmt.Sprintf("%s ch %d: %s", c.l.cfg.Name, c.n, op) }

// Set drives the channel to value and waits for the MCU's SET_ACK until
// ctx is done. See Channel for what each outcome promises.
func (c *Channel) Set(ctx context.Context, value float64) error {
	what := c.what(fmt.Sprintf("set %g", value))
	m, err := ToMilli(value)
	if err != nil {
		e := *err.(*Error)
		e.Msg = what + ": " + e.Msg + "; nothing sent"
		e.Err = actuators.ErrNotApplied
		return &e
	}
	payload, _ := SetRequest{Channel: uint8(c.n), Value: m}.AppendBinary(nil)
	f, err := c.l.call(ctx, TypeSet, c.n, payload, what)
	if err != nil {
		return err
	}
	if f.Type == TypeNak {
		return nakError(what, f.Payload)
	}
	var r ChannelReport
	if err := r.UnmarshalBinary(f.Payload); err != nil { // checked on arrival; kept for safety
		return errorf(CodeMismatch, ErrMismatch, "%s: unusable SET_ACK: %v; in doubt", what, err)
	}
	d := int64(r.Value) - int64(m)
	if d > int64(c.tol) || -d > int64(c.tol) {
		return errorf(CodeMismatch, ErrMismatch,
			"%s: the MCU's read-back %g differs from the target %g by %g, more than the tolerance %g (a board that quantises needs one: mcu.tolerance); in doubt",
			what, FromMilli(r.Value), value, float64(max(d, -d))/1000, FromMilli(c.tol))
	}
	if r.Flags != 0 {
		return errorf(CodeMismatch, ErrMismatch,
			"%s: the MCU acknowledged with channel flags %#x (bit 0 detached, bit 1 fault) at read-back %g, target %g: in doubt",
			what, uint8(r.Flags), FromMilli(r.Value), value)
	}
	return nil
}

// Halt makes the channel inert (the MCU detaches it: no pulses, no drive)
// and waits up to Config.HaltTimeout for the MCU's HALT_ACK. Without the
// ack it returns an error; the MCU's watchdog remains the backstop.
func (c *Channel) Halt() error {
	what := c.what("halt")
	ctx, cancel := context.WithTimeout(context.Background(), c.l.cfg.HaltTimeout)
	defer cancel()
	f, err := c.l.call(ctx, TypeHalt, c.n, []byte{uint8(c.n)}, what)
	if err != nil {
		return err
	}
	if f.Type == TypeNak {
		return nakError(what, f.Payload)
	}
	return nil
}

// nakError is the error of a request the MCU answered with NAK. A NAK
// promises that the request changed nothing, except NO_SESSION: the MCU
// answers it to every request after a restart or its watchdog, including
// the retransmission of one it acted on before the answer was lost, so the
// effect is in doubt (and the MCU's outputs went to their safe values).
func nakError(what string, payload []byte) error {
	var n Nak
	_ = n.UnmarshalBinary(payload) // checked on arrival
	if n.Code == NakNoSession {
		e := errorf(CodeLinkLost, actuators.ErrLinkLost, "%s: the MCU has no session (it restarted, or its watchdog fired); the effect is in doubt", what)
		e.Nak = n
		return e
	}
	e := errorf(CodeNak, actuators.ErrNotApplied, "%s: the MCU refused: %v (detail %d); nothing changed", what, n.Code, n.Detail)
	e.Nak = n
	return e
}

// ReadBack returns the channel's value from the MCU's latest report (a
// SET_ACK, HALT_ACK or TELEMETRY): the measured position where the channel
// has feedback, otherwise the value the MCU applied. It fails, never
// returning a frozen value, while there is no session (wrapping
// actuators.ErrLinkLost) and when the latest report is older than the
// larger of LinkTimeout and three telemetry periods (CodeStale).
func (c *Channel) ReadBack(ctx context.Context) (float64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	st, _, err := c.State()
	if err != nil {
		return 0, err
	}
	return FromMilli(st.Value), nil
}

// Drifted implements actuators.Drifter: it reports the value the MCU holds
// the channel at when that is further than the channel's tolerance from
// commanded — the MCU moved it on its own (its watchdog or a restart sent it
// to its safe value, or its e-stop holds it there). It says nothing (false)
// without a session, without a fresh report, and while a request for the
// channel is in flight: reports arrive in line order, so one that arrives
// after the request's answer already shows its effect.
func (c *Channel) Drifted(commanded float64) (float64, bool) {
	m, err := ToMilli(commanded)
	if err != nil {
		return 0, false
	}
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.notLinkedLocked("") != nil || c.n >= int(l.sess.ack.Channels) {
		return 0, false
	}
	for _, p := range l.pending {
		if p.ch == c.n {
			return 0, false
		}
	}
	r := l.chans[c.n]
	if !r.ok || time.Since(r.at) > l.sess.stale {
		return 0, false
	}
	if d := int64(r.st.Value) - int64(m); d > int64(c.tol) || -d > int64(c.tol) {
		return FromMilli(r.st.Value), true
	}
	return 0, false
}

// State returns the channel's latest reported state and when it arrived,
// with the same errors as ReadBack.
func (c *Channel) State() (ChannelState, time.Time, error) {
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	what := c.what("read back")
	if err := l.notLinkedLocked(what); err != nil {
		return ChannelState{}, time.Time{}, prefix(what, err)
	}
	if c.n >= int(l.sess.ack.Channels) {
		return ChannelState{}, time.Time{}, errorf(CodeNoChannel, nil, "%s: the MCU has %d channels", what, l.sess.ack.Channels)
	}
	r := l.chans[c.n]
	if !r.ok {
		return ChannelState{}, time.Time{}, errorf(CodeStale, nil, "%s: no report from the MCU yet in this session", what)
	}
	if age := time.Since(r.at); age > l.sess.stale {
		return ChannelState{}, time.Time{}, errorf(CodeStale, nil, "%s: the latest report is %v old", what, age.Round(time.Millisecond))
	}
	return r.st, r.at, nil
}

// prefix returns a copy of a package error with what in front of its
// message.
func prefix(what string, err error) error {
	e, ok := err.(*Error)
	if !ok {
		return fmt.Errorf("%s: %w", what, err)
	}
	c := *e
	c.Msg = what + ": " + c.Msg
	return &c
}

// Supply is one supply the MCU measures. It implements the supervisor's
// voltage source (Volts).
type Supply struct {
	l *Link
	i int
}

// Supply returns the MCU's supply i, 0 <= i < MaxSupplies.
func (l *Link) Supply(i int) (*Supply, error) {
	if i < 0 || i >= MaxSupplies {
		return nil, errorf(CodeNoSupply, nil, "%s: supply %d: want 0..%d", l.cfg.Name, i, MaxSupplies-1)
	}
	return &Supply{l: l, i: i}, nil
}

// Volts returns the supply's voltage from the MCU's latest TELEMETRY and
// when it arrived. It fails, never returning a frozen value, while there is
// no session (wrapping actuators.ErrLinkLost), when the latest telemetry is
// older than the larger of LinkTimeout and three telemetry periods
// (CodeStale), when the MCU reports no such supply (CodeNoSupply) and when
// it cannot read it (CodeNoReading).
func (s *Supply) Volts() (float64, time.Time, error) {
	l := s.l
	l.mu.Lock()
	defer l.mu.Unlock()
	what := fmt.Sprintf("%s supply %d", l.cfg.Name, s.i)
	if err := l.notLinkedLocked(what); err != nil {
		return 0, time.Time{}, prefix(what, err)
	}
	if s.i >= int(l.sess.ack.Supplies) {
		return 0, time.Time{}, errorf(CodeNoSupply, nil, "%s: the MCU reports %d supplies", what, l.sess.ack.Supplies)
	}
	if l.voltsAt.IsZero() {
		return 0, time.Time{}, errorf(CodeStale, nil, "%s: no telemetry yet in this session", what)
	}
	if age := time.Since(l.voltsAt); age > l.sess.stale {
		return 0, time.Time{}, errorf(CodeStale, nil, "%s: the latest telemetry is %v old", what, age.Round(time.Millisecond))
	}
	mv := l.volts[s.i]
	if mv == NoReading {
		return 0, time.Time{}, errorf(CodeNoReading, nil, "%s: the MCU cannot read it", what)
	}
	return FromMilli(mv), l.voltsAt, nil
}
