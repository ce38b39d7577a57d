package ina2xx

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"periph.io/x/conn/v3/conntest"
)

// ina226Default is the configuration word of the zero INA226Config:
// 16 averages, 1.1 ms bus and shunt conversions, continuous.
const ina226Default = 0x4527

var ina226Init = []conntest.IO{
	rd(regManufacturer, 0x5449), rd(regDieID, 0x2260),
	wr(regConfig, ina226Default), rd(regConfig, ina226Default),
}

func TestINA226ConfigWord(t *testing.T) {
	for i, tc := range []struct {
		cfg  INA226Config
		want uint16
	}{
		{INA226Config{}, ina226Default},
		// The chip's power-on default: 1 sample, 1.1 ms.
		{INA226Config{Averages: 1}, 0x4127},
		{INA226Config{Averages: 1024, ConversionTime: 8244 * time.Microsecond}, 0x4fff},
		{INA226Config{Averages: 4, ConversionTime: 140 * time.Microsecond}, 0x4207},
	} {
		got, _, err := tc.cfg.word()
		if err != nil || got != tc.want {
			t.Errorf("#%d: word() = %#04x, %v; want %#04x", i, got, err, tc.want)
		}
	}
	for i, bad := range []INA226Config{{Averages: 2}, {Averages: 2048}, {ConversionTime: time.Millisecond}} {
		if _, err := NewINA226(playback(t), bad); !errors.Is(err, ErrConfig) {
			t.Errorf("#%d: NewINA226(%+v) = %v, want ErrConfig", i, bad, err)
		}
	}
}

func TestINA226Identify(t *testing.T) {
	t.Run("other revision", func(t *testing.T) {
		p := playback(t, rd(regManufacturer, 0x5449), rd(regDieID, 0x2261),
			wr(regConfig, ina226Default), rd(regConfig, 0x4527))
		if _, err := NewINA226(p, INA226Config{}); err != nil {
			t.Fatal(err)
		}
	})
	for name, ops := range map[string][]conntest.IO{
		"manufacturer": {rd(regManufacturer, 0x5448), rd(regDieID, 0x2260)},
		"die":          {rd(regManufacturer, 0x5449), rd(regDieID, 0x2270)}, // an INA227-ish part
		"nothing":      {rd(regManufacturer, 0xffff), rd(regDieID, 0xffff)},
		"config lost": {rd(regManufacturer, 0x5449), rd(regDieID, 0x2260),
			wr(regConfig, ina226Default), rd(regConfig, 0x4127)},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := NewINA226(playback(t, ops...), INA226Config{}); !errors.Is(err, ErrWrongDevice) {
				t.Fatalf("NewINA226 = %v, want ErrWrongDevice", err)
			}
		})
	}
	if _, err := NewINA226(&failConn{Conn: playback(t)}, INA226Config{}); !errors.Is(err, ErrBus) {
		t.Fatalf("NewINA226 on a dead bus = %v, want ErrBus", err)
	}
}

func TestINA226Volts(t *testing.T) {
	p := playback(t, append(ina226Init,
		rd(regMaskEnable, ina226CVRF), rd(regBus, 9600), // 12.000 V
		rd(regMaskEnable, 0), rd(regBus, 9600), // the same conversion
		rd(regMaskEnable, ina226CVRF|ina226OVF), rd(regBus, 9600),
		rd(regMaskEnable, ina226CVRF), rd(regBus, 0x8000|9600), // impossible
		rd(regMaskEnable, ina226CVRF), rd(regBus, 0x7fff),
	)...)
	d, err := NewINA226(p, INA226Config{})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		before := time.Now()
		v, at, err := d.Volts()
		if err != nil || v != 12 || at.Before(before) || at.After(time.Now()) {
			t.Fatalf("Volts() = %g, %v, %v; want 12 now", v, at, err)
		}
	}
	if v, at, err := d.Volts(); !errors.Is(err, ErrOverflow) || v != 0 || !at.IsZero() {
		t.Fatalf("Volts() with OVF = %g, %v, %v", v, at, err)
	}
	if v, _, err := d.Volts(); !errors.Is(err, ErrBadReading) || v != 0 {
		t.Fatalf("Volts() with bit 15 = %g, %v", v, err)
	}
	if v, _, err := d.Volts(); err != nil || !near(v, 40.95875) {
		t.Fatalf("Volts() at full scale = %g, %v", v, err)
	}
}

func TestINA226BusErrorIsNeverAFrozenValue(t *testing.T) {
	p := playback(t, append(ina226Init, rd(regMaskEnable, ina226CVRF), rd(regBus, 9600), rd(regMaskEnable, 0))...)
	d, err := NewINA226(&failConn{Conn: p, n: 7}, INA226Config{})
	if err != nil {
		t.Fatal(err)
	}
	if v, _, err := d.Volts(); err != nil || v != 12 {
		t.Fatalf("Volts() = %g, %v", v, err)
	}
	// The flags read works; the bus voltage read fails.
	if v, at, err := d.Volts(); !errors.Is(err, ErrBus) || v != 0 || !at.IsZero() {
		t.Fatalf("Volts() on a failing bus = %g, %v, %v; want ErrBus and no value", v, at, err)
	}
}

func TestINA226Stale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := playback(t, append(ina226Init,
			rd(regMaskEnable, ina226CVRF), rd(regBus, 9600),
			rd(regMaskEnable, 0), rd(regBus, 9600),
		)...)
		// Default StaleAfter: 4 cycles of 16 x 2 x 1.1 ms, plus 50 ms.
		d, err := NewINA226(p, INA226Config{})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := d.Volts(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(4*35200*time.Microsecond + 50*time.Millisecond + time.Millisecond)
		if _, _, err := d.Volts(); !errors.Is(err, ErrStale) {
			t.Fatalf("Volts() with no conversion for %s = %v, want ErrStale", 191*time.Millisecond, err)
		}
	})
}

func TestINA226Current(t *testing.T) {
	p := playback(t, append(ina226Init,
		rd(regMaskEnable, ina226CVRF), rd(regBus, 9600), rd(regShunt, 4000), // 10 mV
		rd(regMaskEnable, 0), rd(regBus, 9600), rd(regShunt, 0x8000), // saturated
	)...)
	d, err := NewINA226(p, INA226Config{ShuntOhms: 0.002})
	if err != nil {
		t.Fatal(err)
	}
	if a, _, err := d.Amps(); err != nil || !near(a, 5) {
		t.Fatalf("Amps() = %g, %v; want 5", a, err)
	}
	if _, err := d.Read(); !errors.Is(err, ErrOverflow) {
		t.Fatalf("Read() saturated = %v, want ErrOverflow", err)
	}
}
