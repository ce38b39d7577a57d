package mcu

import (
	"encoding"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/saga-supervisor/saga-supervisor/drivers/serial"
)

// Defaults of Options.
const (
	DefaultMaxDuration     = 500 * time.Millisecond
	DefaultTelemetryPeriod = 100 * time.Millisecond
	DefaultFrameGap        = 20 * time.Millisecond
)

// ChannelSpec describes one simulated output.
type ChannelSpec struct {
	// Kind is what drives the channel, as DESCRIBE reports it. The zero
	// value, serial.KindAny, and serial.KindSetpoint take any value in
	// Min..Max as it is (rounded to Quantum). serial.KindServo, KindPWM
	// and KindDigital behave as the reference firmware's channels do
	// (firmware/saga_mcu/src/saga_core.c): a servo's value becomes a pulse
	// in half-microseconds of its calibration, a PWM's an 8-bit duty, a
	// digital output's 0 or 1000 only; SET_ACK reports the value applied,
	// and a halted or safe-detached PWM or digital output reads 0.
	Kind serial.ChannelKind
	// Min and Max bound what the channel accepts; a SET outside is NAKed
	// with serial.NakRange. Min == Max == 0 accepts any value (for a
	// servo, PWM or digital channel: the kind's whole range, 0..180 or
	// 0..1).
	Min, Max float64
	// Safe is the value the watchdog, Reset and power-on drive the output
	// to, unless SafeDetach.
	Safe float64
	// SafeDetach makes the watchdog, Reset and power-on detach the output
	// (inert, value kept) instead.
	SafeDetach bool
	// Quantum, if > 0, rounds every applied value to a multiple of it, as
	// a servo library with whole-microsecond pulses does. SET_ACK reports
	// the rounded value. KindAny and KindSetpoint only.
	Quantum float64
	// ActiveLow: logical on drives the pin LOW, off drives it HIGH (PWM
	// and digital channels; Drive shows the pin). DESCRIBE reports it.
	ActiveLow bool
	// PulseMinUS and PulseMaxUS calibrate a servo: its pulse at 0 and at
	// 180 degrees (default 1000 and 2000).
	PulseMinUS, PulseMaxUS uint16
	// Pin is the board's pin DESCRIBE reports for a servo, PWM or digital
	// channel; KindAny and KindSetpoint report serial.NoPin.
	Pin uint8
}

// SupplyRange is the span of a supply's voltage the simulated firmware
// accepts: outside it, the MCU raises serial.FaultSupply. Min == Max == 0
// accepts any.
type SupplyRange struct{ Min, Max float64 }

// Options configure an MCU.
type Options struct {
	Channels []ChannelSpec // at most serial.MaxChannels
	Supplies []float64     // initial volts of each supply; at most serial.MaxSupplies
	// MaxDuration is the watchdog (default DefaultMaxDuration; whole ms).
	MaxDuration time.Duration
	// TelemetryPeriod is how often TELEMETRY is sent (default
	// DefaultTelemetryPeriod; whole ms).
	TelemetryPeriod time.Duration
	// Window is the size of the duplicate cache: how many requests the
	// host may have in flight (default serial.MaxWindow).
	Window int
	// Version is the protocol version the MCU speaks (default
	// serial.ProtocolVersion); tests set another to see it refused.
	Version uint8
	// FrameGap: a partial frame followed by this much silence is given up
	// (default DefaultFrameGap), as docs/SERIAL.md asks of both ends.
	FrameGap time.Duration
	// DescribeUnsupported makes the MCU answer DESCRIBE with NAK
	// UNSUPPORTED, as firmware written before DESCRIBE does.
	DescribeUnsupported bool
	// SupplyRanges, if given, has one entry per supply: each telemetry
	// raises serial.FaultSupply while a supply is outside its range and
	// clears it once all are inside, as the reference firmware does.
	SupplyRanges []SupplyRange
}

// Stats counts what an MCU has seen and done.
type Stats struct {
	serial.DecoderStats        // over every connection
	Sessions            uint64 // HELLOs accepted
	Sets                uint64 // SETs applied (duplicates answered from the cache not counted)
	Halts               uint64 // HALTs applied
	Pings               uint64
	Naks                uint64 // NAKs sent
	Duplicates          uint64 // retransmitted requests answered from the cache
	OutOfOrder          uint64 // requests ahead of the expected sequence number, dropped
	Foreign             uint64 // valid frames of an MCU type (an echo), ignored
	DroppedIn           uint64 // frames discarded by DropRequests, and reads discarded while unplugged
	DroppedOut          uint64 // frames discarded by DropReplies, while unplugged, or for a full queue
	Corrupted           uint64 // frames corrupted by CorruptReplies
	WatchdogTrips       uint64
}

type output struct {
	value    int32 // milli-units
	detached bool
	drive    int32 // what the pin does (Drive)
}

// channel is a ChannelSpec in thousandths, as the firmware's table has it.
type channel struct {
	kind                   serial.ChannelKind
	safe, quantum          int32
	min, max               int32
	safeDetach, activeLow  bool
	pulseMinUS, pulseMaxUS uint16
	pin                    uint8
}

type cached struct {
	valid bool
	seq   uint8
	req   []byte // type and payload of the request
	crc   uint16 // the request frame's CRC
	reply []byte // the frame sent in answer
}

// MCU is a simulated microcontroller. All methods are safe for concurrent
// use.
type MCU struct {
	opts   Options
	chans  []channel
	ranges [][2]int32 // supply ranges, millivolts

	mu        sync.Mutex
	out       []output
	volts     []int32
	session   bool
	expect    uint8
	cache     []cached
	faults    serial.Faults // as latched or raised by SetFault
	fault     []bool        // channels whose driver reports a fault (SetOutputFault)
	supplyBad bool          // a supply was outside its range at the last telemetry
	lastValid time.Time
	wd        *time.Timer
	closed    bool
	telSeq    uint8
	stats     Stats
	decPast   serial.DecoderStats
	servers   map[*server]struct{}

	dropIn, dropOut, corruptOut int
	delay                       time.Duration
	unplugged                   bool
	nak                         map[int]serial.NakCode
}

// New returns a powered-up MCU: every output at its safe value, no
// session, and serial.FaultReset set until the first HELLO.
func New(opts Options) (*MCU, error) {
	if opts.MaxDuration == 0 {
		opts.MaxDuration = DefaultMaxDuration
	}
	if opts.TelemetryPeriod == 0 {
		opts.TelemetryPeriod = DefaultTelemetryPeriod
	}
	if opts.Window == 0 {
		opts.Window = serial.MaxWindow
	}
	if opts.FrameGap <= 0 {
		opts.FrameGap = DefaultFrameGap
	}
	if opts.Version == 0 {
		opts.Version = serial.ProtocolVersion
	}
	// HelloAck's own check is the one the host applies.
	if _, err := (serial.HelloAck{Version: opts.Version, Channels: uint8(min(len(opts.Channels), 255)), Supplies: uint8(min(len(opts.Supplies), 255)),
		Window: uint8(min(max(opts.Window, 0), 255)), MaxDuration: opts.MaxDuration, TelemetryPeriod: opts.TelemetryPeriod}).AppendBinary(nil); err != nil ||
		len(opts.Channels) > serial.MaxChannels || len(opts.Supplies) > serial.MaxSupplies {
		return nil, fmt.Errorf("mcu: invalid options: %d channels, %d supplies, window %d, max duration %v, telemetry %v: %v",
			len(opts.Channels), len(opts.Supplies), opts.Window, opts.MaxDuration, opts.TelemetryPeriod, err)
	}
	m := &MCU{opts: opts, servers: map[*server]struct{}{}, nak: map[int]serial.NakCode{}, faults: serial.FaultReset}
	milli := func(what string, i int, v float64) (int32, error) {
		x, err := serial.ToMilli(v)
		if err != nil {
			return 0, fmt.Errorf("mcu: channel %d %s: %w", i, what, err)
		}
		return x, nil
	}
	for i, c := range opts.Channels {
		var vals [4]int32
		for j, v := range []float64{c.Safe, c.Quantum, c.Min, c.Max} {
			x, err := milli([]string{"safe", "quantum", "min", "max"}[j], i, v)
			if err != nil {
				return nil, err
			}
			vals[j] = x
		}
		if vals[1] < 0 || vals[2] > vals[3] {
			return nil, fmt.Errorf("mcu: channel %d: negative quantum or min > max", i)
		}
		ch := channel{kind: c.Kind, safe: vals[0], quantum: vals[1], min: vals[2], max: vals[3], safeDetach: c.SafeDetach,
			activeLow: c.ActiveLow, pulseMinUS: c.PulseMinUS, pulseMaxUS: c.PulseMaxUS, pin: c.Pin}
		if err := ch.check(); err != nil {
			return nil, fmt.Errorf("mcu: channel %d: %w", i, err)
		}
		m.chans = append(m.chans, ch)
	}
	if len(opts.SupplyRanges) != 0 && len(opts.SupplyRanges) != len(opts.Supplies) {
		return nil, fmt.Errorf("mcu: %d supply ranges for %d supplies", len(opts.SupplyRanges), len(opts.Supplies))
	}
	for i, r := range opts.SupplyRanges {
		lo, err1 := milli("supply min", i, r.Min)
		hi, err2 := milli("supply max", i, r.Max)
		if err1 != nil || err2 != nil || lo > hi {
			return nil, fmt.Errorf("mcu: supply %d: range %v..%v", i, r.Min, r.Max)
		}
		m.ranges = append(m.ranges, [2]int32{lo, hi})
	}
	m.out = make([]output, len(opts.Channels))
	m.fault = make([]bool, len(opts.Channels))
	m.goSafeLocked()
	m.volts = make([]int32, len(opts.Supplies))
	for i, v := range opts.Supplies {
		x, err := serial.ToMilli(v)
		if err != nil {
			return nil, fmt.Errorf("mcu: supply %d: %w", i, err)
		}
		m.volts[i] = x
	}
	m.cache = make([]cached, opts.Window)
	return m, nil
}

// Close stops the watchdog. Serve calls in progress keep running until
// their context ends.
func (m *MCU) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	if m.wd != nil {
		m.wd.Stop()
	}
}

// Output returns channel ch's value and whether it is detached (0 and
// false for a channel the MCU does not have).
func (m *MCU) Output(ch int) (value float64, detached bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ch < 0 || ch >= len(m.out) {
		return 0, false
	}
	o := m.out[ch]
	return serial.FromMilli(o.value), o.detached
}

// InSession reports whether a host session is open.
func (m *MCU) InSession() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.session
}

// Faults returns the MCU's fault flags.
func (m *MCU) Faults() serial.Faults {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.faultsLocked()
}

// Drive returns what channel ch's pin is driven with, polarity applied, as
// the reference firmware hands it to its board: a servo's pulse in
// half-microseconds (0: no pulses, the pin low), a PWM's share of each
// period the pin is HIGH (0..255), a digital pin's level (0 LOW, 1 HIGH).
// For KindAny and KindSetpoint channels it is the value, or 0 detached.
func (m *MCU) Drive(ch int) int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ch < 0 || ch >= len(m.out) {
		return 0
	}
	return m.out[ch].drive
}

// faultsLocked returns the flags the MCU reports: those latched or raised
// by SetFault, OUTPUT while a channel's driver reports a fault, SUPPLY
// while a supply was outside its range at the last telemetry.
func (m *MCU) faultsLocked() serial.Faults {
	f := m.faults
	for _, bad := range m.fault {
		if bad {
			f |= serial.FaultOutput
		}
	}
	if m.supplyBad {
		f |= serial.FaultSupply
	}
	return f
}

// Stats returns the MCU's counters.
func (m *MCU) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.stats
	d := m.decPast
	for srv := range m.servers {
		c := srv.dec.Stats()
		d.Frames += c.Frames
		d.BadCRC += c.BadCRC
		d.BadLength += c.BadLength
		d.Truncated += c.Truncated
		d.Skipped += c.Skipped
	}
	s.DecoderStats = d
	return s
}

// SetVolts sets supply i's voltage, as the MCU will report it.
func (m *MCU) SetVolts(i int, volts float64) error {
	x, err := serial.ToMilli(volts)
	if err != nil {
		return err
	}
	return m.setVolts(i, x)
}

// SetVoltsUnknown makes the MCU report that it cannot read supply i.
func (m *MCU) SetVoltsUnknown(i int) error { return m.setVolts(i, serial.NoReading) }

func (m *MCU) setVolts(i int, mv int32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i < 0 || i >= len(m.volts) {
		return fmt.Errorf("mcu: no supply %d (have %d)", i, len(m.volts))
	}
	m.volts[i] = mv
	return nil
}

// DropRequests discards the next n valid frames from the host, as if the
// line had corrupted them.
func (m *MCU) DropRequests(n int) { m.set(func() { m.dropIn = n }) }

// DropReplies discards the next n answers the MCU would send (telemetry is
// not counted), after acting on the requests they answer.
func (m *MCU) DropReplies(n int) { m.set(func() { m.dropOut = n }) }

// CorruptReplies flips the CRC of the next n answers the MCU sends
// (telemetry is not counted), so the host's decoder must drop them.
func (m *MCU) CorruptReplies(n int) { m.set(func() { m.corruptOut = n }) }

// DelayReplies holds every frame the MCU sends for d before writing it
// (order is kept); the requests are acted on at once. 0 ends the delay.
func (m *MCU) DelayReplies(d time.Duration) { m.set(func() { m.delay = d }) }

// Unplug makes the MCU fall silent, as if its cable were pulled: it reads
// and discards everything and sends nothing. Its watchdog keeps running.
func (m *MCU) Unplug() { m.set(func() { m.unplugged = true }) }

// Replug ends Unplug.
func (m *MCU) Replug() { m.set(func() { m.unplugged = false }) }

// NakChannel makes every SET to channel ch be refused with code, changing
// nothing; code 0 ends it.
func (m *MCU) NakChannel(ch int, code serial.NakCode) {
	m.set(func() {
		if code == 0 {
			delete(m.nak, ch)
		} else {
			m.nak[ch] = code
		}
	})
}

// SetFault raises or clears fault flags (serial.FaultSupply,
// serial.FaultOutput, serial.FaultEStop) as the MCU reports them. Raising
// FaultEStop is pressing an e-stop wired to the MCU: every output goes to
// its safe value, and SETs are refused (NAK FAULT) until it is cleared.
// Raising it again while it is raised changes nothing (a HALT since stays).
func (m *MCU) SetFault(f serial.Faults, on bool) {
	m.set(func() {
		if on {
			if f&serial.FaultEStop != 0 && m.faults&serial.FaultEStop == 0 {
				m.goSafeLocked()
			}
			m.faults |= f
		} else {
			m.faults &^= f
		}
	})
}

// SetOutputFault makes channel ch's driver report a fault (over-current,
// stall), or stop reporting one: while any does, the MCU reports
// serial.FaultOutput, the channel's flags carry serial.FlagFault, and a SET
// of it is refused (NAK FAULT). The output itself is left as it is.
func (m *MCU) SetOutputFault(ch int, on bool) {
	m.set(func() {
		if ch >= 0 && ch < len(m.fault) {
			m.fault[ch] = on
		}
	})
}

// Reset restarts the MCU: outputs to their safe values, no session, and
// serial.FaultReset set until the next HELLO.
func (m *MCU) Reset() {
	m.set(func() {
		m.goSafeLocked()
		m.session = false
		m.faults |= serial.FaultReset
		if m.wd != nil {
			m.wd.Stop()
		}
	})
}

// InjectGarbage writes b onto the line from the MCU's side, on every
// connection being served.
func (m *MCU) InjectGarbage(b []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for s := range m.servers {
		s.sendLocked(m, append([]byte{}, b...), raw)
	}
}

func (m *MCU) set(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f()
}

func (m *MCU) goSafeLocked() {
	for i, c := range m.chans {
		m.applyLocked(i, c.safe, c.safeDetach)
	}
}

// applyLocked drives channel ch to the value v, or detaches it, as the
// reference firmware's one output path does (saga_core.c, apply).
func (m *MCU) applyLocked(ch int, v int32, detach bool) {
	c := &m.chans[ch]
	o := &m.out[ch]
	asked := v
	if detach {
		// A servo without pulses stays about where it was; PWM and
		// digital outputs de-energise.
		if c.kind == serial.KindPWM || c.kind == serial.KindDigital {
			o.value = 0
		}
		o.detached = true
	} else {
		if c.typed() {
			v = c.quantise(v)
		}
		*o = output{value: v}
	}
	o.drive = c.drive(o.value, asked, o.detached)
}

// kickLocked restarts the watchdog: a valid frame of the session arrived.
func (m *MCU) kickLocked(now time.Time) {
	m.lastValid = now
	if m.closed {
		return
	}
	if m.wd == nil {
		m.wd = time.AfterFunc(m.opts.MaxDuration, m.watchdog)
	} else {
		m.wd.Reset(m.opts.MaxDuration)
	}
}

func (m *MCU) watchdog() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	if wait := m.watchdogLocked(time.Now()); wait > 0 {
		m.wd.Reset(wait) // kicked while this fired
	}
}

// watchdogLocked trips the watchdog if a session is open and no valid
// frame has arrived for MaxDuration by now: every output to its safe
// value, the session ended, FaultWatchdog set. Otherwise it returns how
// long until it would trip (0 without a session).
func (m *MCU) watchdogLocked(now time.Time) time.Duration {
	if !m.session {
		return 0
	}
	if quiet := now.Sub(m.lastValid); quiet < m.opts.MaxDuration {
		return m.opts.MaxDuration - quiet
	}
	m.goSafeLocked()
	m.session = false
	m.faults |= serial.FaultWatchdog
	m.stats.WatchdogTrips++
	return 0
}

// receiveLocked decodes bytes from the host and returns the frames to send
// in answer.
func (m *MCU) receiveLocked(dec *serial.Decoder, p []byte, now time.Time) [][]byte {
	if m.unplugged {
		if len(p) > 0 {
			m.stats.DroppedIn++
		}
		return nil
	}
	dec.Write(p)
	var out [][]byte
	for {
		f, ok := dec.Next()
		if !ok {
			return out
		}
		if m.dropIn > 0 {
			m.dropIn--
			m.stats.DroppedIn++
			continue
		}
		if r := m.handleLocked(f, now); r != nil {
			out = append(out, r)
		}
	}
}

func frame(seq uint8, t serial.Type, payload []byte) []byte {
	b, err := serial.Frame{Seq: seq, Type: t, Payload: payload}.MarshalBinary()
	if err != nil {
		panic(err) // every payload built here fits
	}
	return b
}

type appender interface {
	AppendBinary([]byte) ([]byte, error)
}

func reply(seq uint8, t serial.Type, msg appender) []byte {
	p, err := msg.AppendBinary(nil)
	if err != nil {
		panic(err)
	}
	return frame(seq, t, p)
}

func (m *MCU) nakLocked(seq uint8, code serial.NakCode, detail uint8) []byte {
	m.stats.Naks++
	return reply(seq, serial.TypeNak, serial.Nak{Code: code, Detail: detail})
}

// handleLocked acts on one valid frame and returns the answer, if any.
func (m *MCU) handleLocked(f serial.Frame, now time.Time) []byte {
	if f.Type.FromMCU() {
		m.stats.Foreign++
		return nil
	}
	if f.Type == serial.TypeHello {
		var h serial.Hello
		if err := h.UnmarshalBinary(f.Payload); err != nil {
			return m.nakLocked(f.Seq, serial.NakMalformed, 0)
		}
		if h.Version != m.opts.Version {
			return m.nakLocked(f.Seq, serial.NakVersion, m.opts.Version)
		}
		seen := m.faultsLocked()
		m.faults &^= serial.FaultWatchdog | serial.FaultReset
		m.session = true
		m.expect = f.Seq + 1
		clear(m.cache)
		m.stats.Sessions++
		m.kickLocked(now)
		return reply(f.Seq, serial.TypeHelloAck, serial.HelloAck{
			Version: m.opts.Version, Channels: uint8(len(m.out)), Supplies: uint8(len(m.volts)), Window: uint8(m.opts.Window),
			MaxDuration: m.opts.MaxDuration, TelemetryPeriod: m.opts.TelemetryPeriod, Faults: seen,
		})
	}
	if !m.session {
		return m.nakLocked(f.Seq, serial.NakNoSession, 0)
	}
	req := append([]byte{byte(f.Type)}, f.Payload...)
	crc := serial.CRC16(append([]byte{byte(len(f.Payload)), f.Seq, byte(f.Type)}, f.Payload...))
	slot := &m.cache[int(f.Seq)%len(m.cache)]
	switch d := f.Seq - m.expect; {
	case d == 0:
		r := m.processLocked(f)
		*slot = cached{valid: true, seq: f.Seq, req: req, crc: crc, reply: r}
		m.expect++
		m.kickLocked(now)
		return r
	case int(d) >= 256-len(m.cache) && slot.valid && slot.seq == f.Seq && slot.same(req, crc):
		m.stats.Duplicates++
		m.kickLocked(now)
		return slot.reply
	default:
		m.stats.OutOfOrder++
		return nil
	}
}

// processLocked applies one in-order request and returns its answer.
func (m *MCU) processLocked(f serial.Frame) []byte {
	switch f.Type {
	case serial.TypePing:
		if len(f.Payload) != 0 {
			return m.nakLocked(f.Seq, serial.NakMalformed, 0)
		}
		m.stats.Pings++
		return reply(f.Seq, serial.TypePong, serial.Pong{Faults: m.faultsLocked()})
	case serial.TypeDescribe:
		if m.opts.DescribeUnsupported {
			break
		}
		var r serial.DescribeRequest
		if nak := m.decodeChannelLocked(f, &r, &r.Channel); nak != nil {
			return nak
		}
		return reply(f.Seq, serial.TypeDescribeAck, m.chans[r.Channel].describe(r.Channel))
	case serial.TypeSet:
		var s serial.SetRequest
		if nak := m.decodeChannelLocked(f, &s, &s.Channel); nak != nil {
			return nak
		}
		ch := int(s.Channel)
		if code, ok := m.nak[ch]; ok {
			return m.nakLocked(f.Seq, code, s.Channel)
		}
		if m.faults&serial.FaultEStop != 0 || m.fault[ch] {
			return m.nakLocked(f.Seq, serial.NakFault, s.Channel)
		}
		c := &m.chans[ch]
		if !c.accepts(s.Value) {
			return m.nakLocked(f.Seq, serial.NakRange, s.Channel)
		}
		v := s.Value
		if q := c.quantum; q > 0 && !c.typed() {
			v = int32(math.Round(float64(v)/float64(q)) * float64(q))
		}
		m.applyLocked(ch, v, false)
		m.stats.Sets++
		return reply(f.Seq, serial.TypeSetAck, serial.ChannelReport{Channel: s.Channel, ChannelState: m.stateLocked(ch)})
	case serial.TypeHalt:
		var h serial.HaltRequest
		if nak := m.decodeChannelLocked(f, &h, &h.Channel); nak != nil {
			return nak
		}
		ch := int(h.Channel)
		m.applyLocked(ch, 0, true)
		m.stats.Halts++
		return reply(f.Seq, serial.TypeHaltAck, serial.ChannelReport{Channel: h.Channel, ChannelState: m.stateLocked(ch)})
	}
	return m.nakLocked(f.Seq, serial.NakUnsupported, uint8(f.Type))
}

// decodeChannelLocked decodes the payload of a request on one channel (SET,
// HALT) into req, whose channel field is ch, and returns the NAK for a
// malformed payload or a channel the MCU does not have; nil when neither.
func (m *MCU) decodeChannelLocked(f serial.Frame, req encoding.BinaryUnmarshaler, ch *uint8) []byte {
	if err := req.UnmarshalBinary(f.Payload); err != nil {
		return m.nakLocked(f.Seq, serial.NakMalformed, 0)
	}
	if int(*ch) >= len(m.out) {
		return m.nakLocked(f.Seq, serial.NakBadChannel, *ch)
	}
	return nil
}

func (m *MCU) stateLocked(ch int) serial.ChannelState {
	st := serial.ChannelState{Value: m.out[ch].value}
	if m.out[ch].detached {
		st.Flags |= serial.FlagDetached
	}
	if m.fault[ch] {
		st.Flags |= serial.FlagFault
	}
	return st
}

// telemetryLocked returns the next TELEMETRY frame. The supplies are
// checked against their ranges first, as the firmware samples them then.
func (m *MCU) telemetryLocked() []byte {
	if len(m.ranges) > 0 {
		m.supplyBad = false
		for i, r := range m.ranges {
			v := m.volts[i]
			if (r[0] != 0 || r[1] != 0) && v != serial.NoReading && (v < r[0] || v > r[1]) {
				m.supplyBad = true
			}
		}
	}
	t := serial.Telemetry{Faults: m.faultsLocked(), Volts: append([]int32{}, m.volts...)}
	for ch := range m.out {
		t.Channels = append(t.Channels, m.stateLocked(ch))
	}
	m.telSeq++
	return reply(m.telSeq, serial.TypeTelemetry, t)
}
