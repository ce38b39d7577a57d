package mcu

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/drivers/serial"
)

const hangGuard = 10 * time.Second

func testOptions() Options {
	return Options{
		Channels:        []ChannelSpec{{Safe: 90}, {Safe: 0, SafeDetach: true}, {Min: 0, Max: 1, Quantum: 0.25}},
		Supplies:        []float64{12},
		MaxDuration:     300 * time.Millisecond,
		TelemetryPeriod: time.Second, // out of the way: these tests read answers
		Window:          4,
	}
}

// host is a bare host written against the codec alone, to test the MCU's
// rules without the Link's.
type host struct {
	t    *testing.T
	m    *MCU
	conn net.Conn
	dec  serial.Decoder
}

func newHost(t *testing.T, opts Options) *host {
	t.Helper()
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx, b) }()
	t.Cleanup(func() {
		cancel()
		a.Close()
		<-done
		m.Close()
	})
	return &host{t: t, m: m, conn: a}
}

func (h *host) send(seq uint8, typ serial.Type, payload []byte) []byte {
	h.t.Helper()
	b, err := serial.Frame{Seq: seq, Type: typ, Payload: payload}.MarshalBinary()
	if err != nil {
		h.t.Fatal(err)
	}
	h.conn.SetWriteDeadline(time.Now().Add(hangGuard))
	if _, err := h.conn.Write(b); err != nil {
		h.t.Fatal(err)
	}
	return b
}

// recv returns the next answer (telemetry skipped), or false when none
// comes within wait.
func (h *host) recv(wait time.Duration) (serial.Frame, bool) {
	h.t.Helper()
	deadline := time.Now().Add(wait)
	buf := make([]byte, 256)
	for {
		for {
			f, ok := h.dec.Next()
			if !ok {
				break
			}
			if f.Type != serial.TypeTelemetry {
				return f, true
			}
		}
		h.conn.SetReadDeadline(deadline)
		n, err := h.conn.Read(buf)
		if err != nil {
			return serial.Frame{}, false
		}
		h.dec.Write(buf[:n])
	}
}

func (h *host) call(seq uint8, typ serial.Type, payload []byte) serial.Frame {
	h.t.Helper()
	h.send(seq, typ, payload)
	f, ok := h.recv(hangGuard)
	if !ok {
		h.t.Fatalf("no answer to %v seq %d", typ, seq)
	}
	if f.Seq != seq {
		h.t.Fatalf("answer to seq %d carries seq %d", seq, f.Seq)
	}
	return f
}

func (h *host) hello(seq uint8) serial.HelloAck {
	h.t.Helper()
	f := h.call(seq, serial.TypeHello, []byte{serial.ProtocolVersion})
	var a serial.HelloAck
	if f.Type != serial.TypeHelloAck || a.UnmarshalBinary(f.Payload) != nil {
		h.t.Fatalf("HELLO answered %v % x", f.Type, f.Payload)
	}
	return a
}

func setPayload(ch uint8, milli int32) []byte {
	p, _ := serial.SetRequest{Channel: ch, Value: milli}.AppendBinary(nil)
	return p
}

func wantNak(t *testing.T, f serial.Frame, code serial.NakCode) {
	t.Helper()
	var n serial.Nak
	if f.Type != serial.TypeNak || n.UnmarshalBinary(f.Payload) != nil || n.Code != code {
		t.Fatalf("got %v % x, want NAK %v", f.Type, f.Payload, code)
	}
}

func wantAck(t *testing.T, f serial.Frame, ch uint8, milli int32) {
	t.Helper()
	var r serial.ChannelReport
	if f.Type != serial.TypeSetAck || r.UnmarshalBinary(f.Payload) != nil || r.Channel != ch || r.Value != milli {
		t.Fatalf("got %v % x, want SET_ACK ch %d value %d", f.Type, f.Payload, ch, milli)
	}
}

func TestHandshake(t *testing.T) {
	h := newHost(t, testOptions())
	wantNak(t, h.call(3, serial.TypeSet, setPayload(0, 1000)), serial.NakNoSession)
	wantNak(t, h.call(4, serial.TypeHello, []byte{2}), serial.NakVersion)
	wantNak(t, h.call(5, serial.TypeHello, nil), serial.NakMalformed)
	if v, _ := h.m.Output(0); v != 90 || h.m.InSession() {
		t.Fatalf("refused requests changed something: %v %v", v, h.m.InSession())
	}
	a := h.hello(6)
	want := serial.HelloAck{Version: 1, Channels: 3, Supplies: 1, Window: 4, MaxDuration: 300 * time.Millisecond,
		TelemetryPeriod: time.Second, Faults: serial.FaultReset}
	if a != want {
		t.Fatalf("HELLO_ACK %+v, want %+v", a, want)
	}
	if a := h.hello(7); a.Faults != 0 {
		t.Fatalf("the reset flag survived a HELLO: %v", a.Faults)
	}
}

// TestOrderAndDuplicates: requests are taken strictly in order; a
// retransmission is answered from the cache without acting again.
func TestOrderAndDuplicates(t *testing.T) {
	h := newHost(t, testOptions())
	h.hello(250) // the sequence wraps below
	wantAck(t, h.call(251, serial.TypeSet, setPayload(0, 5000)), 0, 5000)
	wantAck(t, h.call(251, serial.TypeSet, setPayload(0, 5000)), 0, 5000) // retransmission
	if s := h.m.Stats(); s.Sets != 1 || s.Duplicates != 1 {
		t.Fatalf("a duplicate acted: %+v", s)
	}
	h.send(253, serial.TypeSet, setPayload(0, 7000)) // ahead of 252: dropped
	if f, ok := h.recv(50 * time.Millisecond); ok {
		t.Fatalf("a request out of order was answered: %v", f)
	}
	if v, _ := h.m.Output(0); v != 5 {
		t.Fatalf("a request out of order acted: %v", v)
	}
	wantAck(t, h.call(252, serial.TypeSet, setPayload(0, 6000)), 0, 6000)
	wantAck(t, h.call(253, serial.TypeSet, setPayload(0, 7000)), 0, 7000)
	for seq := range 8 { // through the wrap
		wantAck(t, h.call(254+uint8(seq), serial.TypeSet, setPayload(0, int32(seq))), 0, int32(seq))
	}
	// The same sequence number with other content is no retransmission.
	h.send(5, serial.TypeSet, setPayload(0, 99000))
	if f, ok := h.recv(50 * time.Millisecond); ok {
		t.Fatalf("a forged duplicate was answered: %v", f)
	}
	// Too old to be in the cache (window 4): dropped, not re-applied.
	h.send(1, serial.TypeSet, setPayload(0, 3))
	if f, ok := h.recv(50 * time.Millisecond); ok {
		t.Fatalf("a request older than the window was answered: %v", f)
	}
	if v, _ := h.m.Output(0); v != 0.007 {
		t.Fatalf("output %v", v)
	}
	if s := h.m.Stats(); s.OutOfOrder != 3 {
		t.Fatalf("%d dropped, want 3", s.OutOfOrder)
	}
}

func TestRequests(t *testing.T) {
	h := newHost(t, testOptions())
	h.hello(0)
	wantNak(t, h.call(1, serial.TypeSet, setPayload(3, 0)), serial.NakBadChannel)
	wantNak(t, h.call(2, serial.TypeSet, setPayload(2, 1500)), serial.NakRange)
	wantNak(t, h.call(3, serial.TypeSet, []byte{0, 1}), serial.NakMalformed)
	wantNak(t, h.call(4, serial.Type(0x30), nil), serial.NakUnsupported)
	wantNak(t, h.call(5, serial.TypeHalt, []byte{7}), serial.NakBadChannel)
	wantNak(t, h.call(6, serial.TypePing, []byte{1}), serial.NakMalformed)
	wantAck(t, h.call(7, serial.TypeSet, setPayload(2, 600)), 2, 500) // quantum 0.25
	h.m.NakChannel(2, serial.NakFault)
	wantNak(t, h.call(8, serial.TypeSet, setPayload(2, 250)), serial.NakFault)
	h.m.NakChannel(2, 0)
	if v, _ := h.m.Output(2); v != 0.5 {
		t.Fatalf("output %v", v)
	}
	f := h.call(9, serial.TypeHalt, []byte{2})
	var r serial.ChannelReport
	if f.Type != serial.TypeHaltAck || r.UnmarshalBinary(f.Payload) != nil || r.Flags != serial.FlagDetached || r.Value != 500 {
		t.Fatalf("HALT answered %v %+v", f.Type, r)
	}
	h.m.SetFault(serial.FaultSupply, true)
	f = h.call(10, serial.TypePing, nil)
	var p serial.Pong
	if f.Type != serial.TypePong || p.UnmarshalBinary(f.Payload) != nil || p.Faults != serial.FaultSupply {
		t.Fatalf("PING answered %v %+v", f.Type, p)
	}
	if s := h.m.Stats(); s.Sets != 1 || s.Halts != 1 || s.Naks != 7 {
		t.Fatalf("stats %+v", s)
	}
	h.send(11, serial.TypePong, []byte{0, 0}) // an MCU's frame echoed back: ignored
	if _, ok := h.recv(50 * time.Millisecond); ok || h.m.Stats().Foreign != 1 {
		t.Fatal("an echoed MCU frame was answered")
	}
}

func TestWatchdog(t *testing.T) {
	h := newHost(t, testOptions())
	h.hello(0)
	wantAck(t, h.call(1, serial.TypeSet, setPayload(0, 10000)), 0, 10000)
	// Frames more often than max_duration keep it quiet.
	for i := range 6 {
		time.Sleep(60 * time.Millisecond)
		h.call(uint8(2+i), serial.TypePing, nil)
	}
	if s := h.m.Stats(); s.WatchdogTrips != 0 {
		t.Fatalf("watchdog fired while pinged: %+v", s)
	}
	deadline := time.Now().Add(hangGuard)
	for h.m.Stats().WatchdogTrips == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the watchdog never fired")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if v, _ := h.m.Output(0); v != 90 {
		t.Fatalf("output %v after the watchdog, want the safe 90", v)
	}
	if _, detached := h.m.Output(1); !detached {
		t.Fatal("channel 1 not detached")
	}
	if h.m.InSession() {
		t.Fatal("session survived the watchdog")
	}
	wantNak(t, h.call(8, serial.TypeSet, setPayload(0, 1000)), serial.NakNoSession)
	if a := h.hello(9); a.Faults != serial.FaultWatchdog {
		t.Fatalf("HELLO_ACK after the watchdog: %v", a.Faults)
	}
}

func TestReset(t *testing.T) {
	h := newHost(t, testOptions())
	h.hello(0)
	wantAck(t, h.call(1, serial.TypeSet, setPayload(0, 1000)), 0, 1000)
	h.m.Reset()
	if v, _ := h.m.Output(0); v != 90 || h.m.InSession() || h.m.Faults() != serial.FaultReset {
		t.Fatal("reset did not restart the MCU")
	}
	wantNak(t, h.call(2, serial.TypeSet, setPayload(0, 1000)), serial.NakNoSession)
}

func TestTelemetry(t *testing.T) {
	o := testOptions()
	o.TelemetryPeriod = 10 * time.Millisecond
	h := newHost(t, o)
	h.m.SetVolts(0, 11.5)
	buf := make([]byte, 256)
	h.conn.SetReadDeadline(time.Now().Add(hangGuard))
	for {
		n, err := h.conn.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		h.dec.Write(buf[:n])
		f, ok := h.dec.Next()
		if !ok {
			continue
		}
		var tm serial.Telemetry
		if f.Type != serial.TypeTelemetry || tm.UnmarshalBinary(f.Payload) != nil {
			t.Fatalf("got %v", f.Type)
		}
		want := serial.Telemetry{Faults: serial.FaultReset, Volts: []int32{11500},
			Channels: []serial.ChannelState{{Value: 90000}, {Flags: serial.FlagDetached}, {}}}
		a, _ := tm.AppendBinary(nil)
		b, _ := want.AppendBinary(nil)
		if !bytes.Equal(a, b) {
			t.Fatalf("telemetry %+v, want %+v", tm, want)
		}
		return
	}
}

func TestUnplugSilences(t *testing.T) {
	h := newHost(t, testOptions())
	h.m.Unplug()
	h.send(0, serial.TypeHello, []byte{1})
	if _, ok := h.recv(50 * time.Millisecond); ok || h.m.InSession() {
		t.Fatal("an unplugged MCU answered")
	}
	h.m.Replug()
	h.hello(1)
}

func TestNewRejects(t *testing.T) {
	for _, o := range []Options{
		{Channels: make([]ChannelSpec, serial.MaxChannels+1)},
		{Supplies: make([]float64, serial.MaxSupplies+1)},
		{Window: serial.MaxWindow + 1},
		{MaxDuration: 1500 * time.Microsecond},
		{MaxDuration: 70 * time.Second},
		{Channels: []ChannelSpec{{Min: 2, Max: 1}}},
		{Channels: []ChannelSpec{{Quantum: -1}}},
		{Channels: []ChannelSpec{{Safe: 3e9}}},
	} {
		if m, err := New(o); err == nil {
			m.Close()
			t.Errorf("New(%+v) accepted", o)
		}
	}
}
