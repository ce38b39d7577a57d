package serial

import (
	"bytes"
	"encoding"
	"errors"
	"math"
	"testing"
	"time"
)

type message interface {
	AppendBinary([]byte) ([]byte, error)
}

// decoderFor returns a fresh message of the payload type a frame type
// carries, or nil for PING (empty payload) and unknown types.
func decoderFor(t Type) encoding.BinaryUnmarshaler {
	switch t {
	case TypeHello:
		return new(Hello)
	case TypeSet:
		return new(SetRequest)
	case TypeHalt:
		return new(HaltRequest)
	case TypeDescribe:
		return new(DescribeRequest)
	case TypeDescribeAck:
		return new(ChannelDescription)
	case TypeHelloAck:
		return new(HelloAck)
	case TypeSetAck, TypeHaltAck:
		return new(ChannelReport)
	case TypePong:
		return new(Pong)
	case TypeTelemetry:
		return new(Telemetry)
	case TypeNak:
		return new(Nak)
	}
	return nil
}

func TestMessagesRoundTrip(t *testing.T) {
	for _, c := range []struct {
		typ  Type
		msg  message
		wire string
	}{
		{TypeHello, Hello{Version: 1}, "\x01"},
		{TypeHelloAck, HelloAck{Version: 1, Channels: 4, Supplies: 2, Window: 4, MaxDuration: 500 * time.Millisecond, TelemetryPeriod: 100 * time.Millisecond, Faults: FaultReset},
			"\x01\x04\x02\x04\xf4\x01\x64\x00\x02\x00"},
		{TypeSet, SetRequest{Channel: 3, Value: -1500}, "\x03\x24\xfa\xff\xff"},
		{TypeHalt, HaltRequest{Channel: 31}, "\x1f"},
		{TypeSetAck, ChannelReport{Channel: 1, ChannelState: ChannelState{Flags: FlagDetached, Value: 90000}}, "\x01\x01\x90\x5f\x01\x00"},
		{TypePong, Pong{Faults: FaultSupply | FaultOutput}, "\x0c\x00"},
		{TypeNak, Nak{Code: NakRange, Detail: 2}, "\x02\x02"},
		{TypeDescribe, DescribeRequest{Channel: 4}, "\x04"},
		{TypeDescribeAck, ChannelDescription{Channel: 4, Kind: KindDigital, Flags: DescribeActiveLow, Pin: 8, Min: 0, Max: 1000, Safe: 0},
			"\x04\x03\x01\x08\x00\x00\x00\x00\xe8\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"},
		{TypeDescribeAck, ChannelDescription{Channel: 0, Kind: KindServo, Pin: 9, Min: 0, Max: 180000, Safe: 90000, PulseMinUS: 1000, PulseMaxUS: 2000},
			"\x00\x01\x00\x09\x00\x00\x00\x00\x20\xbf\x02\x00\x90\x5f\x01\x00\xe8\x03\xd0\x07"},
		{TypeTelemetry, Telemetry{Faults: 0, Volts: []int32{12340, NoReading}, Channels: []ChannelState{{0, 1000}, {FlagFault, -1}}},
			"\x00\x00\x02\x34\x30\x00\x00\x00\x00\x00\x80\x02\x00\xe8\x03\x00\x00\x02\xff\xff\xff\xff"},
		{TypeTelemetry, Telemetry{Volts: []int32{}, Channels: []ChannelState{}}, "\x00\x00\x00\x00"},
	} {
		got, err := c.msg.AppendBinary(nil)
		if err != nil || string(got) != c.wire {
			t.Errorf("%v %+v: encoded % x, %v; want % x", c.typ, c.msg, got, err, []byte(c.wire))
			continue
		}
		d := decoderFor(c.typ)
		if err := d.UnmarshalBinary([]byte(c.wire)); err != nil {
			t.Errorf("%v: decode: %v", c.typ, err)
			continue
		}
		again, _ := d.(message).AppendBinary(nil)
		if !bytes.Equal(again, got) {
			t.Errorf("%v: re-encoded % x, want % x", c.typ, again, got)
		}
	}
}

func TestMessagesMalformed(t *testing.T) {
	long := make([]byte, 300)
	for _, c := range []struct {
		typ Type
		p   []byte
	}{
		{TypeHello, nil}, {TypeHello, []byte{1, 2}},
		{TypeSet, []byte{1, 2, 3, 4}}, {TypeSet, long[:6]},
		{TypeHalt, nil},
		{TypeSetAck, long[:5]},
		{TypePong, long[:3]},
		{TypeNak, long[:1]},
		{TypeHelloAck, long[:9]},
		{TypeHelloAck, []byte{1, 33, 0, 1, 1, 0, 1, 0, 0, 0}}, // 33 channels
		{TypeHelloAck, []byte{1, 1, 9, 1, 1, 0, 1, 0, 0, 0}},  // 9 supplies
		{TypeHelloAck, []byte{1, 1, 1, 0, 1, 0, 1, 0, 0, 0}},  // window 0
		{TypeHelloAck, []byte{1, 1, 1, 9, 1, 0, 1, 0, 0, 0}},  // window 9
		{TypeHelloAck, []byte{1, 1, 1, 1, 0, 0, 1, 0, 0, 0}},  // no watchdog
		{TypeHelloAck, []byte{1, 1, 1, 1, 1, 0, 0, 0, 0, 0}},  // no telemetry
		{TypeTelemetry, []byte{0, 0}},                         // too short
		{TypeTelemetry, []byte{0, 0, 9}},                      // 9 supplies
		{TypeTelemetry, []byte{0, 0, 1, 1, 2, 3}},             // cut in a supply
		{TypeTelemetry, []byte{0, 0, 0, 33}},                  // 33 channels
		{TypeTelemetry, []byte{0, 0, 0, 1, 0, 0, 0, 0}},       // cut in a channel
		{TypeTelemetry, []byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 0}}, // trailing byte
		{TypeTelemetry, []byte{0, 0, 0, 0, 0}},                // trailing byte
	} {
		err := decoderFor(c.typ).UnmarshalBinary(c.p)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%v % x: err = %v, want ErrMalformed", c.typ, c.p, err)
		}
	}
	if _, err := (Telemetry{Channels: make([]ChannelState, MaxChannels+1)}).AppendBinary(nil); !errors.Is(err, ErrMalformed) {
		t.Errorf("33 channels encoded: %v", err)
	}
	if _, err := (HelloAck{Version: 1, Window: 1, MaxDuration: 1500 * time.Microsecond, TelemetryPeriod: time.Millisecond}).AppendBinary(nil); err == nil {
		t.Error("a watchdog of 1.5 ms encoded")
	}
	// The largest telemetry fits a frame.
	p, err := Telemetry{Volts: make([]int32, MaxSupplies), Channels: make([]ChannelState, MaxChannels)}.AppendBinary(nil)
	if err != nil || len(p) > MaxPayload {
		t.Fatalf("largest telemetry: %d bytes, %v", len(p), err)
	}
}

func TestToMilli(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want int32
		ok   bool
	}{
		{0, 0, true}, {90.5, 90500, true}, {-0.0004, 0, true}, {0.0005, 1, true}, {-1.25, -1250, true},
		{1, 1000, true}, {2147483.647, MaxMilli, true}, {-2147483.647, MinMilli, true},
		{2147483.648, 0, false}, {-2147483.648, 0, false}, // -2147483.648 would be NoReading
		{math.NaN(), 0, false}, {math.Inf(1), 0, false}, {math.Inf(-1), 0, false}, {1e300, 0, false},
	} {
		got, err := ToMilli(c.v)
		if c.ok != (err == nil) || got != c.want {
			t.Errorf("ToMilli(%v) = %d, %v; want %d ok=%v", c.v, got, err, c.want, c.ok)
		}
		if err != nil && CodeOf(err) != CodeValueRange {
			t.Errorf("ToMilli(%v): code %q", c.v, CodeOf(err))
		}
	}
	if FromMilli(-90500) != -90.5 {
		t.Fatal("FromMilli")
	}
}

func TestStrings(t *testing.T) {
	if s := (FaultWatchdog | FaultOutput | FaultEStop | 0x100).String(); s != "watchdog|output|estop|0x0100" {
		t.Errorf("faults %q", s)
	}
	if s := Faults(0).String(); s != "none" {
		t.Errorf("no faults %q", s)
	}
	if TypeNak.String() != "NAK" || Type(0x42).String() != "TYPE_0x42" || !TypeTelemetry.FromMCU() || TypeSet.FromMCU() {
		t.Error("type names")
	}
	if NakNoSession.String() != "NO_SESSION" || NakCode(99).String() != "NAK_99" {
		t.Error("nak names")
	}
}
