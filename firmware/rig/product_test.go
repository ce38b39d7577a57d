package rig

import (
	"path/filepath"
	"testing"
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
