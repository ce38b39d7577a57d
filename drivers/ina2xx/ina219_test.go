package ina2xx

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"periph.io/x/conn/v3/conntest"
	"periph.io/x/conn/v3/i2c"
	"periph.io/x/conn/v3/i2c/i2ctest"
)

// ina219Default is the configuration word of the zero INA219Config: 32 V,
// ±320 mV, 16-sample averaging of bus and shunt, continuous.
const ina219Default = 0x3e67

var ina219Init = []conntest.IO{wr(regConfig, ina219Default), rd(regConfig, ina219Default)}

func TestINA219ConfigWord(t *testing.T) {
	for i, tc := range []struct {
		cfg  INA219Config
		want uint16
	}{
		{INA219Config{}, ina219Default},
		// The chip's power-on default is 0x399F (12-bit, no averaging);
		// 0b1000 is the same setting spelled as "1 sample".
		{INA219Config{Averages: 1}, 0x3c47},
		{INA219Config{BusRangeVolts: 16, ShuntRangeMillivolts: 40, Averages: 128}, 0x07ff},
		{INA219Config{ShuntRangeMillivolts: 80, Averages: 2}, 0x2ccf},
		{INA219Config{ShuntRangeMillivolts: 160}, 0x3667},
	} {
		got, _, err := tc.cfg.word()
		if err != nil || got != tc.want {
			t.Errorf("#%d: word() = %#04x, %v; want %#04x", i, got, err, tc.want)
		}
	}
	for i, bad := range []INA219Config{
		{BusRangeVolts: 24}, {ShuntRangeMillivolts: 100}, {ShuntRangeMillivolts: 640}, {ShuntRangeMillivolts: -40},
		{Averages: 3}, {Averages: 256}, {Averages: -1},
	} {
		if _, err := NewINA219(playback(t), bad); !errors.Is(err, ErrConfig) {
			t.Errorf("#%d: NewINA219(%+v) = %v, want ErrConfig", i, bad, err)
		}
	}
	if _, err := NewINA219(playback(t), INA219Config{ShuntOhms: -0.1}); !errors.Is(err, ErrConfig) {
		t.Errorf("negative shunt: %v", err)
	}
}

func TestINA219Volts(t *testing.T) {
	p := playback(t, append(ina219Init,
		rd(regBus, 3000<<3|ina219CNVR), rd(regPower, 0), // 12.000 V, fresh: CNVR cleared
		rd(regBus, 3000<<3),                                  // the same conversion, read again soon
		rd(regBus, 1234<<3|ina219CNVR|1<<2), rd(regPower, 0), // 4.936 V; bit 2 is reserved
	)...)
	d, err := NewINA219(p, INA219Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []float64{12, 12, 4.936} {
		before := time.Now()
		v, at, err := d.Volts()
		if err != nil || !near(v, want) {
			t.Fatalf("Volts() = %g, %v; want %g", v, err, want)
		}
		if at.Before(before) || at.After(time.Now()) {
			t.Fatalf("reading time %v is not the time of the read", at)
		}
	}
}

// The supervisor's code path: an i2c.Dev on a bus.
func TestINA219OnBus(t *testing.T) {
	bus := &i2ctest.Playback{DontPanic: true, Ops: []i2ctest.IO{
		{Addr: 0x41, W: []byte{regConfig, 0x3e, 0x67}},
		{Addr: 0x41, W: []byte{regConfig}, R: []byte{0x3e, 0x67}},
		{Addr: 0x41, W: []byte{regBus}, R: []byte{0x2e, 0xe2}}, // 1500<<3 | CNVR: 6 V
		{Addr: 0x41, W: []byte{regPower}, R: []byte{0, 0}},
	}}
	d, err := NewINA219(&i2c.Dev{Bus: bus, Addr: 0x41}, INA219Config{})
	if err != nil {
		t.Fatal(err)
	}
	if v, _, err := d.Volts(); err != nil || v != 6 {
		t.Fatalf("Volts() = %g, %v; want 6", v, err)
	}
	if err := bus.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestINA219Overflow(t *testing.T) {
	p := playback(t, append(ina219Init, rd(regBus, 3000<<3|ina219CNVR|ina219OVF))...)
	d, err := NewINA219(p, INA219Config{})
	if err != nil {
		t.Fatal(err)
	}
	if v, at, err := d.Volts(); !errors.Is(err, ErrOverflow) || v != 0 || !at.IsZero() {
		t.Fatalf("Volts() with OVF = %g, %v, %v; want ErrOverflow and no value", v, at, err)
	}
}

// An I2C failure is an error every time, never the last good value.
func TestINA219BusErrorIsNeverAFrozenValue(t *testing.T) {
	p := playback(t, append(ina219Init, rd(regBus, 3000<<3|ina219CNVR), rd(regPower, 0))...)
	d, err := NewINA219(&failConn{Conn: p, n: 4}, INA219Config{})
	if err != nil {
		t.Fatal(err)
	}
	if v, _, err := d.Volts(); err != nil || v != 12 {
		t.Fatalf("Volts() = %g, %v; want 12", v, err)
	}
	for range 2 {
		if v, at, err := d.Volts(); !errors.Is(err, ErrBus) || v != 0 || !at.IsZero() {
			t.Fatalf("Volts() on a dead bus = %g, %v, %v; want ErrBus and no value", v, at, err)
		}
	}
	if _, err := d.Read(); !errors.Is(err, ErrBus) {
		t.Fatalf("Read() on a dead bus = %v", err)
	}
}

func TestINA219Missing(t *testing.T) {
	// Nothing answers: the bus reads 0 where the configuration should be.
	p := playback(t, wr(regConfig, ina219Default), rd(regConfig, 0))
	if _, err := NewINA219(p, INA219Config{}); !errors.Is(err, ErrWrongDevice) {
		t.Fatalf("NewINA219 with nothing there = %v, want ErrWrongDevice", err)
	}
	if _, err := NewINA219(&failConn{Conn: playback(t)}, INA219Config{}); !errors.Is(err, ErrBus) {
		t.Fatalf("NewINA219 on a dead bus = %v, want ErrBus", err)
	}
}

func TestINA219Stale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := playback(t, append(ina219Init,
			rd(regBus, 3000<<3),                             // no conversion yet, 50 ms after configuring
			rd(regBus, 3000<<3),                             // none for 150 ms: the chip stopped
			rd(regBus, 3001<<3|ina219CNVR), rd(regPower, 0), // converting again
		)...)
		d, err := NewINA219(p, INA219Config{StaleAfter: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		if v, _, err := d.Volts(); err != nil || v != 12 {
			t.Fatalf("Volts() within StaleAfter = %g, %v", v, err)
		}
		time.Sleep(100 * time.Millisecond)
		if v, _, err := d.Volts(); !errors.Is(err, ErrStale) || v != 0 {
			t.Fatalf("Volts() after StaleAfter = %g, %v; want ErrStale", v, err)
		}
		if v, _, err := d.Volts(); err != nil || !near(v, 12.004) {
			t.Fatalf("Volts() after a new conversion = %g, %v", v, err)
		}
	})
}

func TestINA219Current(t *testing.T) {
	p := playback(t, append(ina219Init,
		rd(regBus, 3000<<3|ina219CNVR), rd(regPower, 0), rd(regShunt, 1000), // 10 mV
		rd(regBus, 3000<<3), rd(regShunt, 0xfc18), // -10 mV
		rd(regBus, 3000<<3), rd(regShunt, 32000), // at +320 mV: saturated
	)...)
	d, err := NewINA219(p, INA219Config{ShuntOhms: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	r, err := d.Read()
	if err != nil || r.BusVolts != 12 || !near(r.ShuntVolts, 0.01) || !near(r.Amps, 0.1) {
		t.Fatalf("Read() = %+v, %v", r, err)
	}
	if a, _, err := d.Amps(); err != nil || !near(a, -0.1) {
		t.Fatalf("Amps() = %g, %v; want -0.1", a, err)
	}
	if _, _, err := d.Amps(); !errors.Is(err, ErrOverflow) {
		t.Fatalf("Amps() at full scale = %v, want ErrOverflow", err)
	}
	nd, err := NewINA219(playback(t, ina219Init...), INA219Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := nd.Amps(); !errors.Is(err, ErrNoShunt) {
		t.Fatalf("Amps() with no shunt = %v", err)
	}
}

func TestDecodeINA219(t *testing.T) {
	for i, tc := range []struct {
		raw   uint16
		volts float64
		ready bool
		err   error
	}{
		{0x0000, 0, false, nil},
		{0x0002, 0, true, nil},
		{0xfff8, 8191 * 0.004, false, nil},
		{0x5dc0, 12, false, nil},
		{0x5dc1, 0, false, ErrOverflow},
		{0x5dc3, 0, true, ErrOverflow},
	} {
		v, ready, err := decodeBus219(tc.raw)
		if !near(v, tc.volts) || ready != tc.ready || !errors.Is(err, tc.err) {
			t.Errorf("#%d: decodeBus219(%#04x) = %g, %t, %v", i, tc.raw, v, ready, err)
		}
	}
	for i, tc := range []struct {
		raw   uint16
		pga   int
		volts float64
		err   error
	}{
		{0, 0, 0, nil},
		{3999, 0, 0.03999, nil},
		{4000, 0, 0, ErrOverflow},
		{0xf060, 0, 0, ErrOverflow}, // -4000
		{0xf061, 0, -0.03999, nil},
		{31999, 3, 0.31999, nil},
		{0x8000, 3, 0, ErrOverflow},
	} {
		v, err := decodeShunt219(tc.raw, tc.pga)
		if !near(v, tc.volts) || !errors.Is(err, tc.err) {
			t.Errorf("#%d: decodeShunt219(%#04x, %d) = %g, %v", i, tc.raw, tc.pga, v, err)
		}
	}
}

func TestINA219StaleCheckOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := playback(t, append(ina219Init, rd(regBus, 3000<<3))...)
		d, err := NewINA219(p, INA219Config{StaleAfter: -1})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Hour)
		if v, _, err := d.Volts(); err != nil || v != 12 {
			t.Fatalf("Volts() with the check off = %g, %v", v, err)
		}
	})
}
