package serial_test

import (
	"context"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/drivers/serial"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim/mcu"
)

func TestSetAckAndReadBack(t *testing.T) {
	r := newRig(t, fourChannels(), fastConfig())
	r.ready()
	servo := r.channel(0)
	if v, err := servo.ReadBack(context.Background()); err != nil || v != 90 {
		// Telemetry arrives every 20 ms; the power-on value is the safe one.
		eventually(t, "the first telemetry", func() bool { v, err = servo.ReadBack(context.Background()); return err == nil })
		if v != 90 {
			t.Fatalf("read back %v before any set, want the power-on 90", v)
		}
	}
	for _, v := range []float64{45.5, 120, -0.001, 0} {
		if err := r.set(servo, v); err != nil {
			t.Fatalf("set %v: %v", v, err)
		}
		if got := output(r.m, 0); got != v {
			t.Fatalf("MCU output %v, want %v", got, v)
		}
		// The ack itself carries the applied value: read back at once.
		if got, err := servo.ReadBack(context.Background()); err != nil || got != v {
			t.Fatalf("read back %v, %v; want %v", got, err, v)
		}
	}
	if s := r.m.Stats(); s.Sets != 4 {
		t.Fatalf("MCU applied %d sets, want 4", s.Sets)
	}
	if a, ok := r.l.MCU(); !ok || a.Channels != 4 || a.Supplies != 2 || a.MaxDuration != 500*time.Millisecond {
		t.Fatalf("MCU() = %+v, %v", a, ok)
	}
	if r.l.Stats().MCUResets != 1 {
		t.Fatalf("the first session should report the MCU's power-on: %+v", r.l.Stats())
	}
}

func TestTelemetryVolts(t *testing.T) {
	r := newRig(t, fourChannels(), fastConfig())
	r.ready()
	bat, _ := r.l.Supply(0)
	rail, _ := r.l.Supply(1)
	r.m.SetVolts(0, 11.1)
	eventually(t, "11.1 V", func() bool { v, _, err := bat.Volts(); return err == nil && v == 11.1 })
	_, at, _ := bat.Volts()
	if time.Since(at) > time.Second || at.IsZero() {
		t.Fatalf("reading time %v", at)
	}
	if v, _, err := rail.Volts(); err != nil || v != 5 {
		t.Fatalf("rail %v, %v", v, err)
	}
	r.m.SetVoltsUnknown(1)
	eventually(t, "an unreadable rail", func() bool { _, _, err := rail.Volts(); return serial.CodeOf(err) == serial.CodeNoReading })
	third, err := r.l.Supply(2)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := third.Volts(); serial.CodeOf(err) != serial.CodeNoSupply {
		t.Fatalf("supply the MCU does not have: %v", err)
	}
	if _, err := r.l.Supply(serial.MaxSupplies); err == nil {
		t.Fatal("supply 8 accepted")
	}
	// A silent MCU never leaves a frozen voltage behind.
	r.m.Unplug()
	eventually(t, "volts to fail", func() bool { _, _, err := bat.Volts(); return errors.Is(err, actuators.ErrLinkLost) })
}

func TestNakChangesNothing(t *testing.T) {
	r := newRig(t, fourChannels(), fastConfig())
	r.ready()
	servo, limited := r.channel(0), r.channel(3)
	if err := r.set(servo, 30); err != nil {
		t.Fatal(err)
	}
	r.m.NakChannel(0, serial.NakFault)
	err := r.set(servo, 60)
	var e *serial.Error
	if !errors.As(err, &e) || e.Code != serial.CodeNak || e.Nak.Code != serial.NakFault || inDoubt(err) {
		t.Fatalf("NAKed set: %v", err)
	}
	if output(r.m, 0) != 30 {
		t.Fatalf("a NAKed set moved the output to %v", output(r.m, 0))
	}
	r.m.NakChannel(0, 0)
	if err := r.set(servo, 60); err != nil {
		t.Fatal(err)
	}

	// Out of the channel's range on the MCU: NAK RANGE, nothing moves.
	err = r.set(limited, 175)
	if !errors.As(err, &e) || e.Nak.Code != serial.NakRange || inDoubt(err) || output(r.m, 3) != 90 {
		t.Fatalf("out of range: %v, output %v", err, output(r.m, 3))
	}

	// A channel the MCU does not have: refused before anything is sent.
	before := r.m.Stats()
	missing := r.channel(7)
	if err := r.set(missing, 1); serial.CodeOf(err) != serial.CodeNoChannel || inDoubt(err) {
		t.Fatalf("missing channel: %v", err)
	}
	if _, err := missing.ReadBack(context.Background()); serial.CodeOf(err) != serial.CodeNoChannel {
		t.Fatalf("missing channel read back: %v", err)
	}
	if after := r.m.Stats(); after.Naks != before.Naks || after.Sets != before.Sets {
		t.Fatalf("something reached the MCU: %+v → %+v", before, after)
	}
	if _, err := r.l.Channel(serial.MaxChannels); err == nil {
		t.Fatal("channel 32 accepted")
	}
}

// TestNoSessionNakInDoubt: the MCU acts on a SET, its answer is lost, and
// it restarts before the retransmission, which it answers NAK NO_SESSION.
// That NAK refuses the retransmission, not the SET it had acted on: the
// step is in doubt, and indeed the output moved (to 60, then to its safe
// value on the restart), never staying at its prior.
func TestNoSessionNakInDoubt(t *testing.T) {
	o := fourChannels()
	// No telemetry during the test: the RESET flag it would carry ends the
	// session too, and the NAK is what is tested here.
	o.TelemetryPeriod = 30 * time.Second
	cfg := fastConfig()
	cfg.LinkTimeout = 2 * time.Second
	cfg.AckTimeout = 100 * time.Millisecond
	r := newRig(t, o, cfg)
	r.ready()
	servo := r.channel(0)
	if err := r.set(servo, 30); err != nil {
		t.Fatal(err)
	}
	r.m.DropReplies(1 << 20) // every answer is lost until the restart
	res := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		res <- servo.Set(ctx, 60)
	}()
	eventually(t, "the SET acted on", func() bool { return output(r.m, 0) == 60 })
	r.m.Reset()
	r.m.DropReplies(0)
	err := <-res
	var e *serial.Error
	if !errors.As(err, &e) || e.Nak.Code != serial.NakNoSession {
		t.Fatalf("set answered NO_SESSION: %v, want the NAK NO_SESSION error", err)
	}
	if !inDoubt(err) || !errors.Is(err, actuators.ErrLinkLost) || e.Code != serial.CodeLinkLost {
		t.Fatalf("set answered NO_SESSION: %v (code %s), want in doubt (CodeLinkLost)", err, e.Code)
	}
	if got := output(r.m, 0); got == 30 {
		t.Fatalf("output back at its prior %v: the scenario did not happen", got)
	}
}

func TestValueRefusedNothingSent(t *testing.T) {
	r := newRig(t, fourChannels(), fastConfig())
	r.ready()
	c := r.channel(1)
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), 2147484, -3e9} {
		err := r.set(c, v)
		if serial.CodeOf(err) != serial.CodeValueRange || inDoubt(err) {
			t.Fatalf("set %v: %v", v, err)
		}
	}
	if s := r.m.Stats(); s.Sets != 0 || s.Naks != 0 || output(r.m, 1) != 0 {
		t.Fatalf("a refused value reached the MCU: %+v", s)
	}
}

// TestRetransmit: answers lost or corrupted on the line, and requests lost,
// are made good by retransmission — and the MCU applies each SET once.
func TestRetransmit(t *testing.T) {
	for _, c := range []struct {
		name  string
		fault func(m *mcu.MCU)
	}{
		{"answer dropped", func(m *mcu.MCU) { m.DropReplies(1) }},
		{"answers dropped twice", func(m *mcu.MCU) { m.DropReplies(2) }},
		{"answer corrupted", func(m *mcu.MCU) { m.CorruptReplies(1) }},
		{"request dropped", func(m *mcu.MCU) { m.DropRequests(1) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := fastConfig()
			cfg.LinkTimeout = 2 * time.Second // heartbeats every 125 ms: rarely in the way
			cfg.Retries = 10                  // a loaded machine must not end the session
			r := newRig(t, fourChannels(), cfg)
			r.ready()
			servo := r.channel(0)
			const n = 5
			for i := range n {
				c.fault(r.m)
				if err := r.set(servo, float64(10+i)); err != nil {
					t.Fatalf("set %d: %v", i, err)
				}
				if output(r.m, 0) != float64(10+i) {
					t.Fatalf("output %v", output(r.m, 0))
				}
			}
			ms, hs := r.m.Stats(), r.l.Stats()
			if ms.Sets != n {
				t.Fatalf("the MCU applied %d sets for %d asked: a retransmission acted twice (%+v)", ms.Sets, n, ms)
			}
			if hs.Retransmits < n {
				t.Fatalf("%d retransmissions for %d faults: %+v", hs.Retransmits, n, hs)
			}
			if c.name == "answer corrupted" && hs.BadCRC < n {
				t.Fatalf("corrupted answers not counted: %+v", hs)
			}
			if c.name != "request dropped" && ms.Duplicates == 0 {
				t.Fatalf("no duplicate answered from the cache: %+v", ms)
			}
			if hs.SessionsLost != 0 {
				t.Fatalf("a fault within the retries ended the session: %+v", hs)
			}
		})
	}
}

// TestGarbageMovesNothing: random bytes both ways never move an output and
// never crash either end; the link keeps working.
func TestGarbageMovesNothing(t *testing.T) {
	r := newRig(t, fourChannels(), fastConfig())
	r.ready()
	servo := r.channel(0)
	if err := r.set(servo, 33); err != nil {
		t.Fatal(err)
	}
	before := r.m.Stats()
	rng := rand.New(rand.NewPCG(1, 2))
	junk := make([]byte, 4096)
	for round := range 8 {
		for i := range junk {
			junk[i] = byte(rng.Uint32())
			if i%37 == 0 {
				junk[i] = serial.Sync // plenty of false starts
			}
		}
		if round%2 == 0 {
			r.toMCU(junk)
		} else {
			r.m.InjectGarbage(junk)
		}
	}
	// Most junk bytes are skipped while hunting for a sync byte: wait
	// until both decoders have chewed through most of it.
	eventually(t, "the garbage decoded", func() bool { return r.m.Stats().Skipped > 8000 && r.l.Stats().Skipped > 8000 })
	after := r.m.Stats()
	if after.Sets != before.Sets || after.Halts != 0 {
		t.Fatalf("garbage applied something: %+v → %+v", before, after)
	}
	for ch, want := range []float64{33, 0, 0, 90} {
		if got := output(r.m, ch); got != want {
			t.Fatalf("channel %d moved to %v", ch, got)
		}
	}
	r.ready()
	if err := r.set(servo, 34); err != nil {
		t.Fatalf("set after garbage: %v", err)
	}
}

// TestDelayInDoubt: an MCU that applies a SET but answers too late leaves
// the step in doubt — and it really did move.
func TestDelayInDoubt(t *testing.T) {
	r := newRig(t, fourChannels(), fastConfig())
	r.ready()
	servo := r.channel(0)
	r.m.DelayReplies(400 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	err := servo.Set(ctx, 77)
	cancel()
	if !inDoubt(err) || (serial.CodeOf(err) != serial.CodeNoAck && serial.CodeOf(err) != serial.CodeLinkLost) {
		t.Fatalf("late answer: %v", err)
	}
	// It did move (the frame left before the deadline; on a loaded machine
	// the MCU may act on it a little later).
	eventually(t, "the in-doubt set applied", func() bool { return output(r.m, 0) == 77 })
	// Answers 400 ms late end the session (retries run out, or the link
	// falls silent); a new one starts once the MCU answers in time again.
	eventually(t, "the session lost", func() bool { return r.l.Stats().SessionsLost > 0 })
	r.m.DelayReplies(0)
	r.ready()
	if err := r.set(servo, 78); err != nil {
		t.Fatal(err)
	}
}

// TestSilentMCU: an MCU that stops answering makes the link lost — Set in
// doubt, ReadBack and Ready failing — until it speaks again.
func TestSilentMCU(t *testing.T) {
	r := newRig(t, fourChannels(), fastConfig())
	r.ready()
	servo := r.channel(0)
	r.m.Unplug()
	eventually(t, "the link to be lost", func() bool { return errors.Is(r.l.Ready(), actuators.ErrLinkLost) })
	if err := r.set(servo, 10); !errors.Is(err, actuators.ErrLinkLost) || serial.CodeOf(err) != serial.CodeLinkLost {
		t.Fatalf("set over a lost link: %v", err)
	}
	if _, err := servo.ReadBack(context.Background()); !errors.Is(err, actuators.ErrLinkLost) {
		t.Fatalf("read back over a lost link: %v", err)
	}
	r.m.Replug()
	r.ready()
	if err := r.set(servo, 10); err != nil {
		t.Fatal(err)
	}
	if r.l.Stats().SessionsLost == 0 {
		t.Fatal("no session loss counted")
	}
}

// TestUnplugReconnect: the port fails (the cable is pulled) with a SET in
// flight; the SET is in doubt, the link not ready; plugged in again, the
// port is reopened and a new session starts.
func TestUnplugReconnect(t *testing.T) {
	r := newRig(t, fourChannels(), fastConfig())
	r.ready()
	servo := r.channel(0)
	r.m.DelayReplies(time.Second) // keep the answer off the line while we pull the cable
	errc := make(chan error, 1)
	go func() { errc <- r.set(servo, 66) }()
	eventually(t, "the set to reach the MCU", func() bool { return output(r.m, 0) == 66 })
	r.unplug()
	if err := <-errc; !errors.Is(err, actuators.ErrLinkLost) {
		t.Fatalf("set in flight during an unplug: %v", err)
	}
	if err := r.l.Ready(); !errors.Is(err, actuators.ErrLinkLost) {
		t.Fatalf("ready after an unplug: %v", err)
	}
	r.m.DelayReplies(0)
	time.Sleep(50 * time.Millisecond) // some failed reopen attempts
	if err := r.l.Ready(); err == nil {
		t.Fatal("ready while unplugged")
	}
	r.plug()
	r.ready()
	if err := r.set(servo, 67); err != nil {
		t.Fatal(err)
	}
	if s := r.l.Stats(); s.Opens < 2 || s.Handshakes < 2 {
		t.Fatalf("no reconnect counted: %+v", s)
	}
}

// TestMCUWatchdog: when the host goes silent, the MCU puts every output to
// its safe value within max_duration.
func TestMCUWatchdog(t *testing.T) {
	r := newRig(t, fourChannels(), fastConfig())
	r.ready()
	for ch, v := range []float64{10, 0.5, 1, 100} {
		if err := r.set(r.channel(ch), v); err != nil {
			t.Fatal(err)
		}
	}
	// Idle but healthy: heartbeats keep the watchdog quiet for many
	// max_durations.
	time.Sleep(3 * 500 * time.Millisecond)
	if s := r.m.Stats(); s.WatchdogTrips != 0 || output(r.m, 0) != 10 {
		t.Fatalf("the MCU's watchdog fired on an idle, healthy link: %+v", s)
	}
	r.l.Close() // the host goes silent
	eventually(t, "the MCU's watchdog", func() bool { return r.m.Stats().WatchdogTrips == 1 })
	for ch, want := range []float64{90, 0, 1, 90} {
		if got := output(r.m, ch); got != want {
			t.Fatalf("channel %d at %v after the watchdog, want %v", ch, got, want)
		}
	}
	if _, detached := r.m.Output(2); !detached {
		t.Fatal("the detach-when-safe channel is still driven")
	}
	if r.m.InSession() || r.m.Faults()&serial.FaultWatchdog == 0 {
		t.Fatal("the watchdog left the session open or no flag set")
	}
	if err := r.set(r.channel(0), 5); !errors.Is(err, serial.ErrClosed) {
		t.Fatalf("set after Close: %v", err)
	}
}

// TestWatchdogSeenByHost: after the MCU's watchdog fired, the host
// re-handshakes, counts it, and reads back the safe values — not the
// values it last commanded.
func TestWatchdogSeenByHost(t *testing.T) {
	r := newRig(t, fourChannels(), fastConfig())
	r.ready()
	servo := r.channel(0)
	if err := r.set(servo, 12); err != nil {
		t.Fatal(err)
	}
	r.m.Unplug()
	eventually(t, "the MCU's watchdog", func() bool { return r.m.Stats().WatchdogTrips == 1 })
	r.m.Replug()
	r.ready()
	eventually(t, "the safe value read back", func() bool { v, err := servo.ReadBack(context.Background()); return err == nil && v == 90 })
	if s := r.l.Stats(); s.MCUWatchdog != 1 {
		t.Fatalf("watchdog trip not counted: %+v", s)
	}
}

func TestMCUResetRehandshake(t *testing.T) {
	r := newRig(t, fourChannels(), fastConfig())
	r.ready()
	servo := r.channel(0)
	if err := r.set(servo, 12); err != nil {
		t.Fatal(err)
	}
	r.m.Reset()
	eventually(t, "the reset noticed", func() bool { return r.l.Stats().MCUResets == 2 })
	r.ready()
	if v, _ := r.m.Output(0); v != 90 {
		t.Fatalf("reset left output at %v", v)
	}
	eventually(t, "the power-on value read back", func() bool { v, err := servo.ReadBack(context.Background()); return err == nil && v == 90 })
	if err := r.set(servo, 13); err != nil {
		t.Fatal(err)
	}
}

func TestVersionMismatch(t *testing.T) {
	o := fourChannels()
	o.Version = 2
	r := newRig(t, o, fastConfig())
	eventually(t, "the version refused", func() bool { return serial.CodeOf(r.l.Ready()) == serial.CodeVersion })
	if err := r.l.Ready(); !errors.Is(err, actuators.ErrLinkLost) {
		t.Fatalf("version refusal does not say link lost: %v", err)
	}
	if err := r.set(r.channel(0), 1); !errors.Is(err, actuators.ErrLinkLost) || r.m.Stats().Sets != 0 {
		t.Fatalf("set without a session: %v", err)
	}
}

func TestMismatchInDoubt(t *testing.T) {
	o := fourChannels()
	o.Channels[0].Quantum = 0.5
	r := newRig(t, o, fastConfig())
	r.ready()
	exact := r.channel(0)
	err := r.set(exact, 10.2)
	if serial.CodeOf(err) != serial.CodeMismatch || !inDoubt(err) {
		t.Fatalf("quantised set: %v", err)
	}
	if output(r.m, 0) != 10 {
		t.Fatalf("output %v", output(r.m, 0))
	}
	lenient := r.channel(0, serial.WithTolerance(0.25))
	if err := r.set(lenient, 10.2); err != nil {
		t.Fatalf("within tolerance: %v", err)
	}
	if _, err := r.l.Channel(0, serial.WithTolerance(-1)); err == nil {
		t.Fatal("negative tolerance accepted")
	}
}

// TestOutOfToleranceSaysSo: a SET_ACK further from the target than the
// tolerance is in doubt, and its error says what happened — the read-back
// differed from the target by more than the tolerance, with both values —
// not that the link was lost: it was not.
func TestOutOfToleranceSaysSo(t *testing.T) {
	o := fourChannels()
	o.Channels[0].Quantum = 0.18 // whole microseconds of a 1000..2000 us servo
	r := newRig(t, o, fastConfig())
	r.ready()
	gripper := r.channel(0)
	err := r.set(gripper, 20)
	if serial.CodeOf(err) != serial.CodeMismatch || !inDoubt(err) {
		t.Fatalf("set 20 on a quantising channel without tolerance: %v", err)
	}
	msg := err.Error()
	for _, want := range []string{"read-back 19.98", "target 20", "more than the tolerance 0"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "link lost") || errors.Is(err, actuators.ErrLinkLost) {
		t.Errorf("error %q says the link was lost; it was not", msg)
	}
	if !errors.Is(err, serial.ErrMismatch) {
		t.Errorf("error %q does not wrap serial.ErrMismatch", msg)
	}
	if err := r.l.Ready(); err != nil {
		t.Errorf("the link is not ready after an out-of-tolerance ack: %v", err)
	}
}

func TestHalt(t *testing.T) {
	r := newRig(t, fourChannels(), fastConfig())
	r.ready()
	servo := r.channel(0)
	if err := r.set(servo, 20); err != nil {
		t.Fatal(err)
	}
	if err := servo.Halt(); err != nil {
		t.Fatal(err)
	}
	if v, detached := r.m.Output(0); !detached || v != 20 {
		t.Fatalf("after halt: %v detached=%v", v, detached)
	}
	st, _, err := servo.State()
	if err != nil || st.Flags&serial.FlagDetached == 0 {
		t.Fatalf("state %+v, %v", st, err)
	}
	// A detached output still reads back, so a halted supervisor can be
	// reset once it is safe.
	if v, err := servo.ReadBack(context.Background()); err != nil || v != 20 {
		t.Fatalf("read back detached: %v, %v", v, err)
	}
	if err := r.set(servo, 21); err != nil {
		t.Fatal(err)
	}
	if _, detached := r.m.Output(0); detached {
		t.Fatal("set did not re-attach")
	}
	if err := r.channel(9).Halt(); serial.CodeOf(err) != serial.CodeNoChannel {
		t.Fatalf("halt of a missing channel: %v", err)
	}
}

func TestMCUFaultNotReady(t *testing.T) {
	r := newRig(t, fourChannels(), fastConfig())
	r.ready()
	r.m.SetFault(serial.FaultSupply, true)
	eventually(t, "the fault reported", func() bool { return serial.CodeOf(r.l.Ready()) == serial.CodeMCUFault })
	if r.l.Faults() != serial.FaultSupply {
		t.Fatalf("faults %v", r.l.Faults())
	}
	r.m.SetFault(serial.FaultSupply, false)
	r.ready()
}

// TestMCUEStop: an e-stop wired to the MCU puts its outputs safe, makes it
// refuse SETs, and the host sees the flag (not ready) until it is released.
func TestMCUEStop(t *testing.T) {
	r := newRig(t, fourChannels(), fastConfig())
	r.ready()
	servo := r.channel(0)
	if err := r.set(servo, 12); err != nil {
		t.Fatal(err)
	}
	r.m.SetFault(serial.FaultEStop, true)
	if output(r.m, 0) != 90 {
		t.Fatalf("e-stop left the output at %v", output(r.m, 0))
	}
	eventually(t, "the e-stop reported", func() bool { return r.l.Faults()&serial.FaultEStop != 0 })
	if serial.CodeOf(r.l.Ready()) != serial.CodeMCUFault {
		t.Fatalf("ready during e-stop: %v", r.l.Ready())
	}
	var e *serial.Error
	if err := r.set(servo, 13); !errors.As(err, &e) || e.Nak.Code != serial.NakFault || inDoubt(err) || output(r.m, 0) != 90 {
		t.Fatalf("set during e-stop: %v", err)
	}
	r.m.SetFault(serial.FaultEStop, false)
	r.ready()
	if err := r.set(servo, 13); err != nil {
		t.Fatal(err)
	}
}

// TestEchoNeverReady: a loopback (an echoing pty, a jumper on TX/RX) hands
// the host its own frames. They are host types: never mistaken for an MCU.
func TestEchoNeverReady(t *testing.T) {
	cfg := fastConfig()
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	cfg.Opener = func(context.Context) (io.ReadWriteCloser, error) {
		host, loop := net.Pipe()
		wg.Add(1)
		go func() { defer wg.Done(); io.Copy(loop, loop) }()
		return host, nil
	}
	l, err := serial.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	eventually(t, "echoed frames", func() bool { return l.Stats().Foreign > 3 })
	if err := l.Ready(); err == nil || l.Stats().Handshakes != 0 {
		t.Fatalf("a loopback passed for an MCU: %v %+v", err, l.Stats())
	}
}

func TestConcurrentSets(t *testing.T) {
	r := newRig(t, fourChannels(), fastConfig())
	r.ready()
	var wg sync.WaitGroup
	errs := make(chan error, 4*25)
	for ch := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := r.channel(ch)
			for i := range 25 {
				if err := r.set(c, float64(ch*100+i)); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for ch := range 3 {
		if got := output(r.m, ch); got != float64(ch*100+24) {
			t.Errorf("channel %d ended at %v", ch, got)
		}
	}
	if s := r.m.Stats(); s.Sets != 75 {
		t.Fatalf("MCU applied %d sets, want 75", s.Sets)
	}
}

// TestWindowFullNothingSent: while the window is full, a Set whose context
// ends first is refused without sending anything (not in doubt).
func TestWindowFullNothingSent(t *testing.T) {
	cfg := fastConfig()
	cfg.Window = 1
	cfg.LinkTimeout = 2 * time.Second
	cfg.AckTimeout = time.Second
	r := newRig(t, fourChannels(), cfg)
	r.ready()
	r.m.DelayReplies(300 * time.Millisecond)
	first := make(chan error, 1)
	go func() { first <- r.set(r.channel(0), 1) }()
	eventually(t, "the first set applied", func() bool { return output(r.m, 0) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err := r.channel(1).Set(ctx, 0.5)
	cancel()
	if serial.CodeOf(err) != serial.CodeBusy || inDoubt(err) {
		t.Fatalf("second set with a full window: %v", err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if output(r.m, 1) != 0 || r.m.Stats().Sets != 1 {
		t.Fatalf("the refused set reached the MCU")
	}
}

// TestOpenDoesNotWait: Open never blocks on hardware; a done context
// starts nothing.
func TestOpenDoesNotWait(t *testing.T) {
	cfg := fastConfig()
	cfg.Opener = func(context.Context) (io.ReadWriteCloser, error) { return nil, errors.New("no board") }
	l, err := serial.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Ready(); !errors.Is(err, actuators.ErrLinkLost) {
		t.Fatalf("ready with no board: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := l.WaitReady(ctx); !errors.Is(err, actuators.ErrLinkLost) || !strings.Contains(err.Error(), "no board") {
		t.Fatalf("WaitReady with no board: %v", err)
	}
	done, stop := context.WithCancel(context.Background())
	stop()
	if l, err := serial.Open(done, cfg); err == nil {
		l.Close()
		t.Fatal("Open with a done context started a link")
	}
}

func TestOpenConn(t *testing.T) {
	m, err := mcu.New(fourChannels())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	host, dev := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Serve(ctx, dev) }()
	defer func() { cancel(); <-done }()
	wait, stop := context.WithTimeout(context.Background(), hangGuard)
	defer stop()
	l, err := serial.OpenConn(wait, host, fastConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.WaitReady(wait); err != nil {
		t.Fatal(err)
	}
	dev.Close() // the stream fails: it cannot be reopened
	eventually(t, "the link lost for good", func() bool { return errors.Is(l.Ready(), actuators.ErrLinkLost) })
}

// TestResumedLinkIsNotReadyOnItsOldSession: a process stopped (SIGSTOP)
// or starved past the link timeout comes back with a session the MCU may
// have given up on — its watchdog fires after a silence of its own. The
// link was ready on that old session until its tick ran, and a SET sent in
// that window was in doubt (hil-avr's TestAVRRelayOff, at load 20). Ready
// and a SET now check the silence themselves: not ready, and the SET
// refused with nothing sent.
func TestResumedLinkIsNotReadyOnItsOldSession(t *testing.T) {
	cfg := fastConfig()
	r := newRig(t, fourChannels(), cfg)
	r.ready()
	servo := r.channel(0)
	r.l.Freeze(2 * cfg.LinkTimeout)
	if err := r.l.Ready(); !errors.Is(err, actuators.ErrLinkLost) {
		t.Fatalf("Ready after a silence of twice the link timeout: %v, want link lost", err)
	}
	r.ready()
	sets := r.m.Stats().Sets
	r.l.Freeze(2 * cfg.LinkTimeout)
	err := r.set(servo, 30)
	if !errors.Is(err, actuators.ErrLinkLost) || serial.CodeOf(err) != serial.CodeLinkLost {
		t.Fatalf("SET after a silence of twice the link timeout: %v, want refused, link lost", err)
	}
	if got := r.m.Stats().Sets; got != sets {
		t.Fatalf("the MCU got %d SETs over a session the host should have ended", got-sets)
	}
}
