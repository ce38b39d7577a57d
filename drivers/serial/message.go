package serial

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ProtocolVersion is the version of docs/SERIAL.md this package speaks.
// HELLO carries it; an MCU that speaks another version refuses the session.
const ProtocolVersion uint8 = 1

// Protocol bounds. A telemetry frame of MaxSupplies supplies and
// MaxChannels channels still fits MaxPayload.
const (
	MaxChannels = 32 // channels an MCU may have
	MaxSupplies = 8  // supplies an MCU may report
	MaxWindow   = 8  // requests a host may have in flight
)

// ErrMalformed is wrapped by every payload decoding error.
var ErrMalformed = errors.New("serial: malformed payload")

func malformed(t Type, format string, args ...any) error {
	return fmt.Errorf("%w: %v: %s", ErrMalformed, t, fmt.Sprintf(format, args...))
}

func wantLen(t Type, p []byte, n int) error {
	if len(p) != n {
		return malformed(t, "%d bytes, want %d", len(p), n)
	}
	return nil
}

// Faults are the MCU's fault flags, reported in HELLO_ACK, PONG and
// TELEMETRY.
type Faults uint16

// The fault flags of protocol version 1. Bits not named here are reserved
// and must be sent as 0; a host treats any set bit as a fault.
const (
	// FaultWatchdog: the MCU's link watchdog fired since the last HELLO:
	// no valid frame arrived within max_duration, so every output went to
	// its safe value and the session ended.
	FaultWatchdog Faults = 1 << 0
	// FaultReset: the MCU (re)started since the last HELLO; its outputs
	// are at their power-on (safe) values.
	FaultReset Faults = 1 << 1
	// FaultSupply: a supply is outside what the MCU's firmware accepts.
	FaultSupply Faults = 1 << 2
	// FaultOutput: an output driver reports a fault (over-current, stall).
	FaultOutput Faults = 1 << 3
	// FaultEStop: an emergency-stop input wired to the MCU is active. The
	// MCU holds every output at its safe value and refuses SET (NAK FAULT)
	// for as long as it is.
	FaultEStop Faults = 1 << 4
)

// SessionEnding reports whether the flags say the MCU has no session (its
// watchdog fired or it restarted), so the host must say HELLO again.
func (f Faults) SessionEnding() bool { return f&(FaultWatchdog|FaultReset) != 0 }

// String lists the set flags, e.g. "watchdog|reset", or "none".
func (f Faults) String() string {
	if f == 0 {
		return "none"
	}
	var parts []string
	for _, n := range []struct {
		bit  Faults
		name string
	}{{FaultWatchdog, "watchdog"}, {FaultReset, "reset"}, {FaultSupply, "supply"}, {FaultOutput, "output"}, {FaultEStop, "estop"}} {
		if f&n.bit != 0 {
			parts = append(parts, n.name)
			f &^= n.bit
		}
	}
	if f != 0 {
		parts = append(parts, fmt.Sprintf("0x%04x", uint16(f)))
	}
	return strings.Join(parts, "|")
}

// ChannelFlags describe one channel's state in a ChannelReport or TELEMETRY.
type ChannelFlags uint8

// The channel flags of protocol version 1; other bits are reserved (0).
const (
	FlagDetached ChannelFlags = 1 << 0 // the output is inert (halted, detached, de-energised)
	FlagFault    ChannelFlags = 1 << 1 // the output's driver reports a fault
)

// NakCode says why the MCU refused a request. A NAK always means the MCU
// changed nothing.
type NakCode uint8

// The NAK codes of protocol version 1.
const (
	NakBadChannel  NakCode = 1 // no such channel
	NakRange       NakCode = 2 // the value is outside what the channel can do
	NakMalformed   NakCode = 3 // the payload has the wrong length or content
	NakUnsupported NakCode = 4 // unknown message type
	NakNoSession   NakCode = 5 // no session: HELLO first (after a reset or the watchdog)
	NakVersion     NakCode = 6 // HELLO's protocol version is not spoken; Detail is the MCU's
	NakFault       NakCode = 7 // the channel has a fault and refuses to move
)

// String returns the code's name from docs/SERIAL.md.
func (c NakCode) String() string { return nameOr(nakNames, c, "NAK_%d") }

var nakNames = map[NakCode]string{
	NakBadChannel: "BAD_CHANNEL", NakRange: "RANGE", NakMalformed: "MALFORMED", NakUnsupported: "UNSUPPORTED",
	NakNoSession: "NO_SESSION", NakVersion: "VERSION", NakFault: "FAULT",
}

// Hello is the payload of HELLO (1 byte): the protocol version the host
// speaks.
type Hello struct {
	Version uint8
}

// AppendBinary appends the payload to b.
func (m Hello) AppendBinary(b []byte) ([]byte, error) { return append(b, m.Version), nil }

// UnmarshalBinary decodes the payload.
func (m *Hello) UnmarshalBinary(p []byte) error {
	if err := wantLen(TypeHello, p, 1); err != nil {
		return err
	}
	m.Version = p[0]
	return nil
}

// HelloAck is the payload of HELLO_ACK (10 bytes): what the MCU is.
type HelloAck struct {
	Version  uint8 // protocol version the MCU speaks
	Channels uint8 // channels 0..Channels-1 exist; at most MaxChannels
	Supplies uint8 // supplies 0..Supplies-1 are reported; at most MaxSupplies
	Window   uint8 // requests the MCU can have in flight, 1..MaxWindow
	// MaxDuration is the MCU's watchdog: with no valid frame for this long
	// its outputs go to their safe values. Whole milliseconds, 1..65535.
	MaxDuration time.Duration
	// TelemetryPeriod is how often the MCU sends TELEMETRY. Whole
	// milliseconds, 1..65535.
	TelemetryPeriod time.Duration
	// Faults are the flags that were set when HELLO arrived (HELLO clears
	// FaultWatchdog and FaultReset).
	Faults Faults
}

// AppendBinary appends the payload to b. Durations must be whole
// milliseconds in 1..65535 ms and the counts within the protocol's bounds.
func (m HelloAck) AppendBinary(b []byte) ([]byte, error) {
	if err := m.check(); err != nil {
		return b, err
	}
	b = append(b, m.Version, m.Channels, m.Supplies, m.Window)
	b = binary.LittleEndian.AppendUint16(b, uint16(m.MaxDuration/time.Millisecond))
	b = binary.LittleEndian.AppendUint16(b, uint16(m.TelemetryPeriod/time.Millisecond))
	return binary.LittleEndian.AppendUint16(b, uint16(m.Faults)), nil
}

func (m HelloAck) check() error {
	ms := func(d time.Duration) bool {
		return d%time.Millisecond == 0 && d >= time.Millisecond && d <= 65535*time.Millisecond
	}
	switch {
	case m.Channels > MaxChannels:
		return malformed(TypeHelloAck, "%d channels, at most %d", m.Channels, MaxChannels)
	case m.Supplies > MaxSupplies:
		return malformed(TypeHelloAck, "%d supplies, at most %d", m.Supplies, MaxSupplies)
	case m.Window < 1 || m.Window > MaxWindow:
		return malformed(TypeHelloAck, "window %d, want 1..%d", m.Window, MaxWindow)
	case !ms(m.MaxDuration):
		return malformed(TypeHelloAck, "max_duration %v, want 1..65535 whole ms", m.MaxDuration)
	case !ms(m.TelemetryPeriod):
		return malformed(TypeHelloAck, "telemetry period %v, want 1..65535 whole ms", m.TelemetryPeriod)
	}
	return nil
}

// UnmarshalBinary decodes and checks the payload.
func (m *HelloAck) UnmarshalBinary(p []byte) error {
	if err := wantLen(TypeHelloAck, p, 10); err != nil {
		return err
	}
	v := HelloAck{
		Version: p[0], Channels: p[1], Supplies: p[2], Window: p[3],
		MaxDuration:     time.Duration(binary.LittleEndian.Uint16(p[4:])) * time.Millisecond,
		TelemetryPeriod: time.Duration(binary.LittleEndian.Uint16(p[6:])) * time.Millisecond,
		Faults:          Faults(binary.LittleEndian.Uint16(p[8:])),
	}
	if err := v.check(); err != nil {
		return err
	}
	*m = v
	return nil
}

// SetRequest is the payload of SET (5 bytes): drive Channel to Value
// (thousandths of the actuator's unit).
type SetRequest struct {
	Channel uint8
	Value   int32
}

// AppendBinary appends the payload to b.
func (m SetRequest) AppendBinary(b []byte) ([]byte, error) {
	return binary.LittleEndian.AppendUint32(append(b, m.Channel), uint32(m.Value)), nil
}

// UnmarshalBinary decodes the payload.
func (m *SetRequest) UnmarshalBinary(p []byte) error {
	if err := wantLen(TypeSet, p, 5); err != nil {
		return err
	}
	m.Channel, m.Value = p[0], int32(binary.LittleEndian.Uint32(p[1:]))
	return nil
}

// HaltRequest is the payload of HALT (1 byte): make Channel inert.
type HaltRequest struct {
	Channel uint8
}

// AppendBinary appends the payload to b.
func (m HaltRequest) AppendBinary(b []byte) ([]byte, error) { return append(b, m.Channel), nil }

// UnmarshalBinary decodes the payload.
func (m *HaltRequest) UnmarshalBinary(p []byte) error {
	if err := wantLen(TypeHalt, p, 1); err != nil {
		return err
	}
	m.Channel = p[0]
	return nil
}

// ChannelState is one channel's state: its flags and its value —
// the measured position when the channel has feedback, otherwise the value
// the MCU last applied to it.
type ChannelState struct {
	Flags ChannelFlags
	Value int32
}

// ChannelReport is the payload of SET_ACK and HALT_ACK (6 bytes): the
// channel and its state after the request was applied. For SET_ACK the
// value is the value the MCU actually applied (after its own quantisation).
type ChannelReport struct {
	Channel uint8
	ChannelState
}

// AppendBinary appends the payload to b.
func (m ChannelReport) AppendBinary(b []byte) ([]byte, error) {
	return binary.LittleEndian.AppendUint32(append(b, m.Channel, byte(m.Flags)), uint32(m.Value)), nil
}

// UnmarshalBinary decodes the payload.
func (m *ChannelReport) UnmarshalBinary(p []byte) error {
	if err := wantLen(TypeSetAck, p, 6); err != nil {
		return err
	}
	m.Channel, m.Flags, m.Value = p[0], ChannelFlags(p[1]), int32(binary.LittleEndian.Uint32(p[2:]))
	return nil
}

// Pong is the payload of PONG (2 bytes): the MCU's fault flags.
type Pong struct {
	Faults Faults
}

// AppendBinary appends the payload to b.
func (m Pong) AppendBinary(b []byte) ([]byte, error) {
	return binary.LittleEndian.AppendUint16(b, uint16(m.Faults)), nil
}

// UnmarshalBinary decodes the payload.
func (m *Pong) UnmarshalBinary(p []byte) error {
	if err := wantLen(TypePong, p, 2); err != nil {
		return err
	}
	m.Faults = Faults(binary.LittleEndian.Uint16(p))
	return nil
}

// Nak is the payload of NAK (2 bytes). Detail is the refused channel for
// SET and HALT, the MCU's protocol version for NakVersion, otherwise 0.
type Nak struct {
	Code   NakCode
	Detail uint8
}

// AppendBinary appends the payload to b.
func (m Nak) AppendBinary(b []byte) ([]byte, error) { return append(b, byte(m.Code), m.Detail), nil }

// UnmarshalBinary decodes the payload.
func (m *Nak) UnmarshalBinary(p []byte) error {
	if err := wantLen(TypeNak, p, 2); err != nil {
		return err
	}
	m.Code, m.Detail = NakCode(p[0]), p[1]
	return nil
}

// Telemetry is the payload of TELEMETRY:
//
//	faults u16, nsup u8, nsup × volts i32 (millivolts, NoReading if unknown),
//	nch u8, nch × (flags u8, value i32)
//
// — 4 + 4·nsup + 5·nch bytes, exactly.
type Telemetry struct {
	Faults   Faults
	Volts    []int32 // millivolts per supply
	Channels []ChannelState
}

// AppendBinary appends the payload to b.
func (m Telemetry) AppendBinary(b []byte) ([]byte, error) {
	if len(m.Volts) > MaxSupplies || len(m.Channels) > MaxChannels {
		return b, malformed(TypeTelemetry, "%d supplies and %d channels, at most %d and %d", len(m.Volts), len(m.Channels), MaxSupplies, MaxChannels)
	}
	b = binary.LittleEndian.AppendUint16(b, uint16(m.Faults))
	b = append(b, byte(len(m.Volts)))
	for _, v := range m.Volts {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	b = append(b, byte(len(m.Channels)))
	for _, c := range m.Channels {
		b = binary.LittleEndian.AppendUint32(append(b, byte(c.Flags)), uint32(c.Value))
	}
	return b, nil
}

// UnmarshalBinary decodes the payload.
func (m *Telemetry) UnmarshalBinary(p []byte) error {
	if len(p) < 3 {
		return malformed(TypeTelemetry, "%d bytes, want at least 4", len(p))
	}
	ns := int(p[2])
	if ns > MaxSupplies {
		return malformed(TypeTelemetry, "%d supplies, at most %d", ns, MaxSupplies)
	}
	at := 3 + 4*ns
	if len(p) < at+1 {
		return malformed(TypeTelemetry, "%d bytes, too short for %d supplies", len(p), ns)
	}
	nc := int(p[at])
	if nc > MaxChannels {
		return malformed(TypeTelemetry, "%d channels, at most %d", nc, MaxChannels)
	}
	if err := wantLen(TypeTelemetry, p, at+1+5*nc); err != nil {
		return err
	}
	v := Telemetry{Faults: Faults(binary.LittleEndian.Uint16(p)), Volts: make([]int32, ns), Channels: make([]ChannelState, nc)}
	for i := range v.Volts {
		v.Volts[i] = int32(binary.LittleEndian.Uint32(p[3+4*i:]))
	}
	for i := range v.Channels {
		o := at + 1 + 5*i
		v.Channels[i] = ChannelState{Flags: ChannelFlags(p[o]), Value: int32(binary.LittleEndian.Uint32(p[o+1:]))}
	}
	*m = v
	return nil
}

// ChannelKind is what drives a channel, as DESCRIBE_ACK reports it.
type ChannelKind uint8

// The channel kinds of DESCRIBE_ACK. An MCU that does not say what a
// channel is reports KindAny, which the host accepts for any actuator.
const (
	KindAny      ChannelKind = 0 // not said: any actuator kind
	KindServo    ChannelKind = 1 // a hobby servo: 0..180000 milli-degrees as pulse_min_us..pulse_max_us
	KindPWM      ChannelKind = 2 // a PWM output: duty 0..1000
	KindDigital  ChannelKind = 3 // an on/off output: 0 or 1000
	KindSetpoint ChannelKind = 4 // a scalar the board passes on (a motor controller's setpoint)
)

// String returns the kind's name: any, servo, pwm, digital, setpoint.
func (k ChannelKind) String() string { return nameOr(kindNames, k, "kind %d") }

var kindNames = map[ChannelKind]string{
	KindAny: "any", KindServo: "servo", KindPWM: "pwm", KindDigital: "digital", KindSetpoint: "setpoint",
}

// DescribeFlags are the flags of a ChannelDescription.
type DescribeFlags uint8

// The flags of DESCRIBE_ACK; other bits are reserved (0).
const (
	// DescribeActiveLow: the output is active-low — logical on (or a
	// duty's high share) drives its pin LOW, off drives it HIGH. The host
	// still sends logical values; the MCU applies the polarity.
	DescribeActiveLow DescribeFlags = 1 << 0
	// DescribeSafeDetach: the MCU's power-on, watchdog and e-stop detach
	// the channel rather than drive it to Safe.
	DescribeSafeDetach DescribeFlags = 1 << 1
)

// NoPin in ChannelDescription.Pin: the MCU names no pin for the channel.
const NoPin uint8 = 0xFF

// DescribeRequest is the payload of DESCRIBE (1 byte): which channel.
type DescribeRequest struct {
	Channel uint8
}

// AppendBinary appends the payload to b.
func (m DescribeRequest) AppendBinary(b []byte) ([]byte, error) { return append(b, m.Channel), nil }

// UnmarshalBinary decodes the payload.
func (m *DescribeRequest) UnmarshalBinary(p []byte) error {
	if err := wantLen(TypeDescribe, p, 1); err != nil {
		return err
	}
	m.Channel = p[0]
	return nil
}

// ChannelDescription is the payload of DESCRIBE_ACK (20 bytes, exactly):
// one row of the MCU's channel table.
//
//	channel u8, kind u8, flags u8, pin u8, min i32, max i32, safe i32,
//	pulse_min_us u16, pulse_max_us u16
type ChannelDescription struct {
	Channel uint8
	Kind    ChannelKind
	Flags   DescribeFlags
	// Pin is the board's pin number (Arduino numbering on an Uno), or
	// NoPin.
	Pin uint8
	// Min and Max bound what SET accepts, thousandths of the unit.
	Min, Max int32
	// Safe is the value power-on, the watchdog and the e-stop drive the
	// channel to (0 with DescribeSafeDetach).
	Safe int32
	// PulseMinUS and PulseMaxUS are a servo's calibration: its pulse at 0
	// and at 180 degrees, in microseconds (0 for other kinds).
	PulseMinUS, PulseMaxUS uint16
}

// DescribeAckLen is the payload length of DESCRIBE_ACK.
const DescribeAckLen = 20

// AppendBinary appends the payload to b.
func (m ChannelDescription) AppendBinary(b []byte) ([]byte, error) {
	b = append(b, m.Channel, byte(m.Kind), byte(m.Flags), m.Pin)
	b = binary.LittleEndian.AppendUint32(b, uint32(m.Min))
	b = binary.LittleEndian.AppendUint32(b, uint32(m.Max))
	b = binary.LittleEndian.AppendUint32(b, uint32(m.Safe))
	b = binary.LittleEndian.AppendUint16(b, m.PulseMinUS)
	return binary.LittleEndian.AppendUint16(b, m.PulseMaxUS), nil
}

// UnmarshalBinary decodes the payload.
func (m *ChannelDescription) UnmarshalBinary(p []byte) error {
	if err := wantLen(TypeDescribeAck, p, DescribeAckLen); err != nil {
		return err
	}
	*m = ChannelDescription{
		Channel: p[0], Kind: ChannelKind(p[1]), Flags: DescribeFlags(p[2]), Pin: p[3],
		Min:        int32(binary.LittleEndian.Uint32(p[4:])),
		Max:        int32(binary.LittleEndian.Uint32(p[8:])),
		Safe:       int32(binary.LittleEndian.Uint32(p[12:])),
		PulseMinUS: binary.LittleEndian.Uint16(p[16:]),
		PulseMaxUS: binary.LittleEndian.Uint16(p[18:]),
	}
	return nil
}
