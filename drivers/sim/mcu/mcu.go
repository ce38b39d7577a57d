package mcu

import (
	"bytes"
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
	// Min and Max bound what the channel accepts; a SET outside is NAKed
	// with serial.NakRange. Min == Max == 0 accepts any value.
	Min, Max float64
	// Safe is the value the watchdog, Reset and power-on drive the output
	// to, unless SafeDetach.
	Safe float64
	// SafeDetach makes the watchdog, Reset and power-on detach the output
	// (inert, value kept) instead.
	SafeDetach bool
	// Quantum, if > 0, rounds every applied value to a multiple of it, as
	// a servo library with whole-microsecond pulses does. SET_ACK reports
	// the rounded value.
	Quantum float64
}

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
}

type cached struct {
	valid bool
	seq   uint8
	req   []byte // type and payload of the request
	reply []byte // the frame sent in answer
}

// MCU is a simulated microcontroller. All methods are safe for concurrent
// use.
type MCU struct {
	opts    Options
	safe    []int32
	quantum []int32
	min     []int32
	max     []int32

	mu        sync.Mutex
	out       []output
	volts     []int32
	session   bool
	expect    uint8
	cache     []cached
	faults    serial.Faults
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
		m.safe = append(m.safe, vals[0])
		m.quantum = append(m.quantum, vals[1])
		m.min = append(m.min, vals[2])
		m.max = append(m.max, vals[3])
	}
	m.out = make([]output, len(opts.Channels))
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
	return m.faults
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
func (m *MCU) SetFault(f serial.Faults, on bool) {
	m.set(func() {
		if on {
			if f&serial.FaultEStop != 0 {
				m.goSafeLocked()
			}
			m.faults |= f
		} else {
			m.faults &^= f
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
	for i := range m.out {
		if m.opts.Channels[i].SafeDetach {
			m.out[i].detached = true
		} else {
			m.out[i] = output{value: m.safe[i]}
		}
	}
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
	if m.closed || !m.session {
		return
	}
	if quiet := time.Since(m.lastValid); quiet < m.opts.MaxDuration {
		m.wd.Reset(m.opts.MaxDuration - quiet) // kicked while this fired
		return
	}
	m.goSafeLocked()
	m.session = false
	m.faults |= serial.FaultWatchdog
	m.stats.WatchdogTrips++
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
		seen := m.faults
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
	slot := &m.cache[int(f.Seq)%len(m.cache)]
	switch d := f.Seq - m.expect; {
	case d == 0:
		r := m.processLocked(f)
		*slot = cached{valid: true, seq: f.Seq, req: req, reply: r}
		m.expect++
		m.kickLocked(now)
		return r
	case int(d) >= 256-len(m.cache) && slot.valid && slot.seq == f.Seq && bytes.Equal(slot.req, req):
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
		return reply(f.Seq, serial.TypePong, serial.Pong{Faults: m.faults})
	case serial.TypeSet:
		var s serial.SetRequest
		if nak := m.decodeChannelLocked(f, &s, &s.Channel); nak != nil {
			return nak
		}
		ch := int(s.Channel)
		if code, ok := m.nak[ch]; ok {
			return m.nakLocked(f.Seq, code, s.Channel)
		}
		if m.faults&serial.FaultEStop != 0 {
			return m.nakLocked(f.Seq, serial.NakFault, s.Channel)
		}
		if (m.min[ch] != 0 || m.max[ch] != 0) && (s.Value < m.min[ch] || s.Value > m.max[ch]) {
			return m.nakLocked(f.Seq, serial.NakRange, s.Channel)
		}
		v := s.Value
		if q := m.quantum[ch]; q > 0 {
			v = int32(math.Round(float64(v)/float64(q)) * float64(q))
		}
		m.out[ch] = output{value: v}
		m.stats.Sets++
		return reply(f.Seq, serial.TypeSetAck, serial.ChannelReport{Channel: s.Channel, ChannelState: serial.ChannelState{Value: v}})
	case serial.TypeHalt:
		var h serial.HaltRequest
		if nak := m.decodeChannelLocked(f, &h, &h.Channel); nak != nil {
			return nak
		}
		ch := int(h.Channel)
		m.out[ch].detached = true
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
	return st
}

// telemetryLocked returns the next TELEMETRY frame.
func (m *MCU) telemetryLocked() []byte {
	t := serial.Telemetry{Faults: m.faults, Volts: append([]int32{}, m.volts...)}
	for ch := range m.out {
		t.Channels = append(t.Channels, m.stateLocked(ch))
	}
	m.telSeq++
	return reply(m.telSeq, serial.TypeTelemetry, t)
}
