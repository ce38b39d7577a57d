package rig

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/drivers/serial"
	"github.com/saga-supervisor/saga-supervisor/internal/longtest"
)

// testdata/standin.c speaks protocol v1 on the firmware's pin map: with
// the host's own driver on the rig's pty, what the host asks for is what
// the pins do — the rig, the driver and a protocol firmware end to end.

var standinELF string

// standin is the stand-in on a rig, with the host's link to it up.
func standin(t *testing.T) (*Rig, *serial.Link) {
	t.Helper()
	if skipWhy != "" {
		t.Skip(skipWhy)
	}
	r, err := Start(Options{Binary: rigBin, ELF: standinELF, Link: filepath.Join(t.TempDir(), "tty")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := serial.Open(ctx, serial.Config{Name: "standin", Port: r.PTY})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := l.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return r, l
}

func waitPins(t *testing.T, r *Rig, what string, cond func(Pins) bool) Pins {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, err := r.Pins(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if cond(p) {
			return p
		}
		if time.Now().After(deadline) {
			h, _ := r.History(context.Background(), 0)
			t.Fatalf("%s: not within 5s: %+v (MCU %s, %d resets, the last %s)", what, p.List, p.State, p.Resets, h.LastReset)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStandInPins(t *testing.T) {
	r, l := standin(t)
	ctx := context.Background()
	set := func(ch int, v, tol float64) {
		t.Helper()
		c, err := l.Channel(ch, serial.WithTolerance(tol))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Set(ctx, v); err != nil {
			t.Fatalf("ch %d = %g: %v", ch, v, err)
		}
	}
	// At power-on: the servos at 90 degrees (1500 us), the rest off, the
	// relay's pin high.
	waitPins(t, r, "power-on", func(p Pins) bool {
		pb1, _ := p.Pin("PB1")
		pb0, _ := p.Pin("PB0")
		return pb1.Wave == "pulsing" && pb1.WaveHigh == 24000 && pb0.Level == 1
	})
	set(0, 30, 0.1)  // 1166.5 us: 30 degrees in 0.5 us steps
	set(1, 135, 0.1) // 1750 us
	set(2, 0.25, 0.002)
	set(3, 1, 0)
	set(4, 1, 0) // the relay on: its pin low
	p := waitPins(t, r, "the sets", func(p Pins) bool {
		pb1, _ := p.Pin("PB1")
		pb2, _ := p.Pin("PB2")
		pd5, _ := p.Pin("PD5")
		pd7, _ := p.Pin("PD7")
		pb0, _ := p.Pin("PB0")
		return pb1.WaveHigh == 18664 && pb2.WaveHigh == 28000 && pd5.Wave == "pulsing" && pd5.WaveHigh == 4096 &&
			pd5.WavePeriod == 16384 && pd7.Level == 1 && pb0.Level == 0 && pb0.Driven
	})
	pb1, _ := p.Pin("PB1")
	t.Logf("ch0 = 30 degrees: PB1 high %.3f us every %.3f ms", p.Micros(pb1.WaveHigh), p.Micros(pb1.WavePeriod)/1000)

	// The supply through the 1:3 divider: 3000 mV at A0 is 9 V.
	if err := r.SetADC(ctx, 0, 3000); err != nil {
		t.Fatal(err)
	}
	s, _ := l.Supply(0)
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, _, err := s.Volts()
		if err == nil && math.Abs(v-9.0) < 0.015 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("supply at 3000 mV (9 V): %v %v", v, err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The e-stop: outputs safe at once, SET refused.
	if err := r.EStop(ctx, true); err != nil {
		t.Fatal(err)
	}
	waitPins(t, r, "e-stop: safe", func(p Pins) bool {
		pb1, _ := p.Pin("PB1")
		pd7, _ := p.Pin("PD7")
		pb0, _ := p.Pin("PB0")
		return pb1.WaveHigh == 24000 && pd7.Level == 0 && pb0.Level == 1
	})
	c, _ := l.Channel(3)
	if err := c.Set(ctx, 1); err == nil || serial.CodeOf(err) == "" {
		t.Fatalf("a SET during the e-stop: %v, want a NAK", err)
	}
	// The host learns the flag from the next TELEMETRY or PONG.
	deadline = time.Now().Add(time.Second)
	for l.Faults()&serial.FaultEStop == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("faults %v a second into the e-stop", l.Faults())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A refused channel: the firmware itself NAKs RANGE, and nothing moves.
	if err := r.EStop(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := r.Refuse(ctx, 3); err != nil {
		t.Fatal(err)
	}
	err := c.Set(ctx, 1)
	var nak *serial.Error
	if !errors.As(err, &nak) || serial.CodeOf(err) != serial.CodeNak {
		t.Fatalf("a SET to the refused channel: %v, want NAK", err)
	}
	if pd7, _ := waitPins(t, r, "", func(Pins) bool { return true }).Pin("PD7"); pd7.Level != 0 {
		t.Errorf("PD7 went high on a refused SET")
	}
}

// TestFigures measures SET to SET_ACK, SET to pin and the watchdog trip on
// the stand-in (go test -run TestFigures -v ./firmware/rig/; make
// avr-figures). They bound what the real firmware can do on the rig: the
// wire and the rig are the same; its processing may differ.
//
// Under -short (make test) it takes 40 and 12 SETs; make test-long and
// make avr-figures take 200 and 60.
func TestFigures(t *testing.T) {
	r, l := standin(t)
	ctx := context.Background()
	nd, ns := 200, 60
	if longtest.Short(t) {
		nd, ns = 40, 12
	}
	p0, _ := r.Pins(ctx)
	digital := Probe{Channel: 3, Pin: "PD7", Values: [2]float64{1, 0}, Shows: LevelOf(false), Settle: 5 * time.Millisecond}
	ack, pin, err := Latency(ctx, r.Client, l, digital, nd)
	if err != nil {
		p, _ := r.Pins(ctx)
		h, _ := r.History(ctx, 0)
		t.Fatalf("%v\nthe rig: MCU %s, %d resets (last %s), lag max %.3f ms, %d slips; link %+v; host %+v", err, p.State, p.Resets, h.LastReset,
			float64(p.LagMaxNS)/1e6, p.Slips, p.Link, l.Stats())
	}
	servoWidth := func(v float64) time.Duration { return time.Duration((1000 + v/180*1000) * float64(time.Microsecond)) }
	servo := Probe{Channel: 0, Pin: "PB1", Values: [2]float64{45, 135}, Shows: PulseOf(16e6, servoWidth, time.Microsecond),
		Settle: 45 * time.Millisecond}
	sack, spin, err := Latency(ctx, r.Client, l, servo, ns, serial.WithTolerance(0.1))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := l.Channel(3)
	if err := c.Set(ctx, 1); err != nil {
		t.Fatal(err)
	}
	trips, err := WatchdogTrip(ctx, r.Client, l, map[string]func(Event) bool{
		"PD7": func(e Event) bool { return e.Kind == "level" && e.Level == 0 },
		"PB1": func(e Event) bool { return e.Kind == "pulse" && e.High == 24000 },
	}, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	p1, _ := r.Pins(ctx)
	t.Logf("stand-in firmware on the rig, 115200 baud, through drivers/serial:")
	t.Logf("  SET to SET_ACK, digital ch3:      %v", ack)
	t.Logf("  SET to pin PD7 (digital ch3):     %v", pin)
	t.Logf("  SET to SET_ACK, servo ch0:        %v", sack)
	t.Logf("  SET to the end of the first new pulse on PB1 (servo ch0): %v", spin)
	for _, tr := range trips {
		t.Logf("  watchdog (max_duration 500 ms) at %s: %.3f ms after the last frame", tr.Pin, float64(tr.After)/1e6)
	}
	t.Logf("  the rig: behind the clock by %.3f ms at most, more than 2 ms %d times, %d slips; %.1f%% of a CPU",
		float64(p1.LagMaxNS)/1e6, p1.Late2ms, p1.Slips, 100*float64(p1.CPUNS-p0.CPUNS)/float64(p1.MonoNS-p0.MonoNS))
	// A SET may fail only if the rig could not keep time (a machine too
	// busy to run it): then the protocol's 200 ms of retries ran out.
	if n := ack.Failed + sack.Failed; n > 0 {
		if p1.LagMaxNS < 100e6 {
			t.Errorf("%d SETs failed while the rig kept within %.1f ms of the clock", n, float64(p1.LagMaxNS)/1e6)
		} else {
			t.Logf("%d SETs failed: the rig fell %.1f ms behind the clock (the machine is busy); not the firmware's doing", n, float64(p1.LagMaxNS)/1e6)
		}
	}
	// What the wire alone takes bounds them from below.
	if ack.P50 < 2*time.Millisecond || pin.P50 < 955*time.Microsecond {
		t.Errorf("faster than the wire: SET to ack p50 %v (23 bytes: 2.0 ms), SET to pin p50 %v (11 bytes: 0.955 ms)", ack.P50, pin.P50)
	}
	for _, tr := range trips {
		if tr.After < 500*time.Millisecond || tr.After > 500*time.Millisecond+25*time.Millisecond {
			t.Errorf("%s reached its safe value %v after the last frame; the watchdog is 500 ms (+ a servo frame)", tr.Pin, tr.After)
		}
	}
}
