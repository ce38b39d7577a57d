package rig

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/drivers/serial"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
)

// productELF is the saga firmware itself (firmware/saga_mcu, built by
// `make firmware`'s rule into the test's directory).
var productELF string

// The saga firmware at power-on, before any host speaks to it: each
// servo pulses at its safe 90 degrees (1500 us, the table's 1000..2000 us
// calibration) every 20 ms, the PWM output and the digital output are
// driven low, the active-low relay's pin is driven high (OFF) and was
// never driven low, and the e-stop input has its pull-up.
func TestProductFirmwarePowerOn(t *testing.T) {
	if skipWhy != "" {
		t.Skip(skipWhy)
	}
	r, err := Start(Options{Binary: rigBin, ELF: productELF, Link: filepath.Join(t.TempDir(), "tty")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop() })
	p := waitPins(t, r, "both servos pulsing at their safe width", func(p Pins) bool {
		pb1, _ := p.Pin("PB1")
		pb2, _ := p.Pin("PB2")
		return pulsing(pb1) && pulsing(pb2)
	})
	for _, tm := range p.Timers {
		if tm.Name == "1" && (tm.WGM != 14 || tm.Top != 39999 || tm.TOVCycles != 320000) {
			t.Errorf("Timer1 as simavr runs it: %+v; want mode 14, TOP 39999 (ICR1), a period of 320000 cycles", tm)
		}
	}
	for _, name := range []string{"PB1", "PB2"} {
		pin, _ := p.Pin(name)
		if pin.WaveHigh != usCycles(1500) || pin.WavePeriod != 320000 || !pin.Driven {
			t.Errorf("%s: high %d cycles (%.3f us) every %d cycles, driven %v; want 1500 us (%d) every 20 ms (320000), driven",
				name, pin.WaveHigh, p.Micros(pin.WaveHigh), pin.WavePeriod, pin.Driven, usCycles(1500))
		}
	}
	for _, c := range []struct {
		pin            string
		level          int
		driven, pullup bool
		what           string
	}{
		{"PD5", 0, true, false, "the PWM output, duty 0: driven low"},
		{"PD7", 0, true, false, "the digital output, off: driven low"},
		{"PB0", 1, true, false, "the active-low relay, off: driven high"},
		{"PD2", 0, false, true, "the e-stop input with its pull-up, the loop closed"},
	} {
		pin, _ := p.Pin(c.pin)
		if pin.Level != c.level || pin.Driven != c.driven || pin.Pullup != c.pullup || (c.pin == "PD5" && pin.Wave != "static") {
			t.Errorf("%s: level %d driven %v pull-up %v wave %s; want %s", c.pin, pin.Level, pin.Driven, pin.Pullup, pin.Wave, c.what)
		}
	}
	h, err := r.History(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range h.Events {
		if e.Pin == "PB0" && e.Driven && e.Level == 0 {
			t.Errorf("PB0 (the active-low relay) driven low at cycle %d: the relay ON", e.Cycle)
		}
	}
	// The first pulse came within a frame or two of the boot.
	for _, e := range h.Events {
		if e.Pin == "PB1" && e.Kind == "pulse" {
			if ms := p.Micros(e.Cycle) / 1000; ms > 100 {
				t.Errorf("PB1's first pulse %.1f ms after power-on", ms)
			}
			break
		}
	}
}

// A reset stops the pulse trains, and the rig dates each stop no earlier
// than the reset that made it. The firmware sleeps between interrupts, so
// the MCU lands on the cycle its next timer event is due, which simavr runs
// only in its next step: a reset taken in between cancelled a PWM edge
// that was due, and the rig dated the end of PD5's pulses a cycle before
// the reset (which the AVR profile's audit found unexplained).
func TestProductResetStopsPulsesNoEarlier(t *testing.T) {
	r, l := linked(t, productELF)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p0, err := r.Pins(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 30
	rng := rand.New(rand.NewPCG(5, 6))
	c, err := l.Channel(2, serial.WithTolerance(0.003))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		// After a reset the host needs a moment to find the session gone
		// and start a new one.
		deadline := time.Now().Add(testtool.Slow(10 * time.Second))
		for {
			err := c.Set(ctx, 0.25)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("reset %d: fan = 0.25: %v", i, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		waitPins(t, r, "PD5 pulsing", func(p Pins) bool { pd5, _ := p.Pin("PD5"); return pulsing(pd5) })
		time.Sleep(time.Duration(2+rng.IntN(15)) * time.Millisecond)
		if err := r.Reset(ctx, 0); err != nil {
			t.Fatal(err)
		}
		waitPins(t, r, "PD5 stopped", func(p Pins) bool { pd5, _ := p.Pin("PD5"); return pd5.Wave == "static" })
	}
	h, err := r.History(ctx, p0.Cycle)
	if err != nil {
		t.Fatal(err)
	}
	var reset uint64
	resets := 0
	for _, e := range h.Events {
		switch {
		case e.Kind == "reset":
			reset, resets = e.Cycle, resets+1
		case (e.Pin == "PD5" || e.Pin == "PB1" || e.Pin == "PB2") && e.Kind == "level" && e.Cycle < reset:
			t.Errorf("%s: its pulses stopped at cycle %d, before the reset at %d that stopped them", e.Pin, e.Cycle, reset)
		}
	}
	if resets != n {
		t.Errorf("%d resets in the history, want %d", resets, n)
	}
}
