package pca9685_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/drivers/pca9685"
	"github.com/saga-supervisor/saga-supervisor/drivers/pca9685/pca9685test"
	"periph.io/x/conn/v3/i2c/i2ctest"
)

// rd is a recorded one-register read at 0x40.
func rd(reg, v byte) i2ctest.IO { return i2ctest.IO{Addr: 0x40, W: []byte{reg}, R: []byte{v}} }

// wr is a recorded write at 0x40.
func wr(b ...byte) i2ctest.IO { return i2ctest.IO{Addr: 0x40, W: b} }

// playback replays ops and checks at the end of the test that all were
// consumed. Unexpected traffic is an error from Tx, not a panic.
func playback(t *testing.T, ops ...i2ctest.IO) *i2ctest.Playback {
	t.Helper()
	p := &i2ctest.Playback{Ops: ops, DontPanic: true}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

// coldOpen is Open's register sequence on a chip fresh from power-on, at
// 50 Hz from 25 MHz: PRE_SCALE round(25e6/(4096*50)) - 1 = 121.
var coldOpen = []i2ctest.IO{
	rd(0x00, 0x11), // MODE1: asleep, ALLCALL
	rd(0x01, 0x04), // MODE2
	rd(0xFE, 0x1E), // PRE_SCALE: power-on 30 (200 Hz)
	wr(0xFD, 0x10), // ALL_LED_OFF_H: every channel full off
	wr(0x00, 0x31), // MODE1: SLEEP | AI | ALLCALL
	wr(0xFE, 121),  // PRE_SCALE
	wr(0x01, 0x04), // MODE2: totem pole, change on STOP
	wr(0x00, 0x21), // MODE1: awake, AI, ALLCALL
	rd(0x00, 0x21),
	rd(0x01, 0x04),
	rd(0xFE, 121),
}

func TestOpenSequence(t *testing.T) {
	b, err := pca9685.Open(playback(t, coldOpen...), pca9685.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b.Prescale() != 121 {
		t.Errorf("prescale %d", b.Prescale())
	}
	if f := b.Frequency(); f < 50.02 || f > 50.03 {
		t.Errorf("frequency %g, want 25e6/(4096*122) = 50.02..", f)
	}
	if p := b.Period(); p != 19988480*time.Nanosecond {
		t.Errorf("period %s", p)
	}
}

// A chip already running as configured (the supervisor restarted) is only
// read: no output moves.
func TestOpenWarmWritesNothing(t *testing.T) {
	p := playback(t, rd(0x00, 0x21), rd(0x01, 0x04), rd(0xFE, 121))
	if _, err := pca9685.Open(p, pca9685.Options{}); err != nil {
		t.Fatal(err)
	}
}

// After a sleep with channels running, RESTART reads 1 and is cleared by
// writing it.
func TestOpenClearsRestart(t *testing.T) {
	ops := append([]i2ctest.IO{}, coldOpen[:8]...)
	ops = append(ops, rd(0x00, 0xA1), wr(0x00, 0xA1), rd(0x00, 0x21), rd(0x01, 0x04), rd(0xFE, 121))
	if _, err := pca9685.Open(playback(t, ops...), pca9685.Options{}); err != nil {
		t.Fatal(err)
	}
}

func TestOpenOptions(t *testing.T) {
	c := pca9685test.New(0x41)
	// 330 Hz from a chip measured at 26.1 MHz: round(26.1e6/(4096*330)) - 1 = 18.
	b, err := pca9685.Open(c, pca9685.Options{Addr: 0x41, Frequency: 330, OscillatorHz: 26.1e6})
	if err != nil {
		t.Fatal(err)
	}
	if b.Prescale() != 18 || c.Reg(0xFE) != 18 {
		t.Errorf("prescale %d, chip %d", b.Prescale(), c.Reg(0xFE))
	}
	if !strings.Contains(b.String(), "0x41") {
		t.Errorf("name %q", b)
	}
}

func TestOpenRefusesConfig(t *testing.T) {
	for _, o := range []pca9685.Options{
		{Addr: 0x3F}, {Addr: 0x80}, {Frequency: 2000}, {Frequency: 20}, {Frequency: -1},
		{OscillatorHz: -1}, {OscillatorHz: 60e6},
	} {
		// No traffic expected: a Playback with no ops fails any Tx.
		_, err := pca9685.Open(playback(t), o)
		if !errors.Is(err, pca9685.ErrConfig) {
			t.Errorf("%+v: %v", o, err)
		}
	}
	if _, err := pca9685.Open(nil, pca9685.Options{}); !errors.Is(err, pca9685.ErrConfig) {
		t.Errorf("nil bus: %v", err)
	}
}

func TestOpenNAK(t *testing.T) {
	c := pca9685test.New(0)
	c.Absent = true
	_, err := pca9685.Open(c, pca9685.Options{})
	if !errors.Is(err, pca9685.ErrBus) || !strings.Contains(err.Error(), "0x40") {
		t.Fatalf("absent chip: %v", err)
	}
	// Wrong address: the chip is at 0x41.
	if _, err := pca9685.Open(pca9685test.New(0x41), pca9685.Options{}); !errors.Is(err, pca9685.ErrBus) {
		t.Fatalf("wrong address: %v", err)
	}
}

func TestOpenWrongDevice(t *testing.T) {
	// Reserved MODE2 bits set: refused before any write.
	p := playback(t, rd(0x00, 0x39), rd(0x01, 0x9F), rd(0xFE, 0x00))
	if _, err := pca9685.Open(p, pca9685.Options{}); !errors.Is(err, pca9685.ErrWrongDevice) {
		t.Fatalf("reserved bits: %v", err)
	}
	// PRE_SCALE below the chip's minimum of 3.
	p = playback(t, rd(0x00, 0x11), rd(0x01, 0x04), rd(0xFE, 0x02))
	if _, err := pca9685.Open(p, pca9685.Options{}); !errors.Is(err, pca9685.ErrWrongDevice) {
		t.Fatalf("prescale 2: %v", err)
	}
	// A device that takes the writes but does not keep them.
	ops := append([]i2ctest.IO{}, coldOpen[:8]...)
	ops = append(ops, rd(0x00, 0x11), rd(0x01, 0x04), rd(0xFE, 0x1E))
	if _, err := pca9685.Open(playback(t, ops...), pca9685.Options{}); !errors.Is(err, pca9685.ErrWrongDevice) {
		t.Fatalf("not kept: %v", err)
	}
}

// Open on the fake chip and again on the same (warm) chip: the second Open
// writes nothing and the channel keeps its pulse.
func TestReopenKeepsOutputs(t *testing.T) {
	s, c := pca9685test.NewServo(t, pca9685test.Calibration)
	if err := s.Set(ctx(t), 45); err != nil {
		t.Fatal(err)
	}
	before := c.LED(0)
	c.ResetOps()
	b2, err := pca9685.Open(c, pca9685.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if w := c.Writes(); len(w) != 0 {
		t.Errorf("warm open wrote %x", w)
	}
	if c.LED(0) != before {
		t.Errorf("channel 0 %x, was %x", c.LED(0), before)
	}
	s2, err := b2.Servo(0, pca9685test.Calibration)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s2.ReadBack(ctx(t))
	if err != nil || got < 44.5 || got > 45.5 {
		t.Errorf("read back after reopen %g, %v", got, err)
	}
	// Another frequency: every channel full off first.
	if _, err := pca9685.Open(c, pca9685.Options{Frequency: 60}); err != nil {
		t.Fatal(err)
	}
	if c.LED(0)[3]&0x10 == 0 || c.Reg(0xFE) != 101 {
		t.Errorf("after re-clock: channel 0 %x, prescale %d", c.LED(0), c.Reg(0xFE))
	}
}

func TestChannels(t *testing.T) {
	b, _ := pca9685test.Open(t)
	if _, err := b.Servo(16, pca9685test.Calibration); !errors.Is(err, pca9685.ErrConfig) {
		t.Errorf("channel 16: %v", err)
	}
	if _, err := b.PWM(-1); !errors.Is(err, pca9685.ErrConfig) {
		t.Errorf("channel -1: %v", err)
	}
	if _, err := b.Servo(3, pca9685test.Calibration); err != nil {
		t.Fatal(err)
	}
	_, err := b.PWM(3)
	if !errors.Is(err, pca9685.ErrConfig) || !strings.Contains(err.Error(), "channel 3") {
		t.Errorf("channel 3 twice: %v", err)
	}
	for _, cal := range []pca9685.ServoCalibration{
		{MinPulse: 0, MaxPulse: 2 * time.Millisecond, MinAngle: 0, MaxAngle: 180},
		{MinPulse: time.Millisecond, MaxPulse: 25 * time.Millisecond, MinAngle: 0, MaxAngle: 180},
		{MinPulse: time.Millisecond, MaxPulse: time.Millisecond + time.Microsecond, MinAngle: 0, MaxAngle: 180},
		{MinPulse: time.Millisecond, MaxPulse: 2 * time.Millisecond, MinAngle: 90, MaxAngle: 90},
		{MinPulse: time.Millisecond, MaxPulse: 2 * time.Millisecond, MinAngle: 0},
	} {
		if _, err := b.Servo(4, cal); !errors.Is(err, pca9685.ErrConfig) {
			t.Errorf("%+v: %v", cal, err)
		}
	}
}

func TestHaltAllAndClose(t *testing.T) {
	b, c := pca9685test.Open(t)
	s, _ := b.Servo(0, pca9685test.Calibration)
	p, _ := b.PWM(5)
	if err := s.Set(ctx(t), 0); err != nil {
		t.Fatal(err)
	}
	if err := p.Set(ctx(t), 0.5); err != nil {
		t.Fatal(err)
	}
	// Close writes nothing and refuses Set; Halt and HaltAll still work.
	c.ResetOps()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if len(c.Ops()) != 0 {
		t.Errorf("close: %v", c.Ops())
	}
	if err := s.Set(ctx(t), 10); !errors.Is(err, pca9685.ErrClosed) || !notApplied(err) {
		t.Errorf("set after close: %v", err)
	}
	if _, err := b.PWM(6); !errors.Is(err, pca9685.ErrClosed) {
		t.Errorf("open after close: %v", err)
	}
	if err := b.HaltAll(); err != nil {
		t.Fatal(err)
	}
	if w := c.Writes(); len(w) != 1 || string(w[0]) != "\xfd\x10" {
		t.Errorf("halt all wrote %x", w)
	}
	for _, ch := range []int{0, 5, 15} {
		if c.LED(ch)[3]&0x10 == 0 {
			t.Errorf("channel %d not full off: %x", ch, c.LED(ch))
		}
	}
}

// TestCheck: the configuration check refuses, without a chip, exactly what
// Open and Servo refuse, so check-config and the daemon agree.
func TestCheck(t *testing.T) {
	good := pca9685.ServoCalibration{MinPulse: 500 * time.Microsecond, MaxPulse: 2500 * time.Microsecond, MinAngle: -90, MaxAngle: 90}
	cases := []struct {
		name string
		opts pca9685.Options
		cal  *pca9685.ServoCalibration
		ok   bool
	}{
		{"defaults", pca9685.Options{}, nil, true},
		{"servo", pca9685.Options{}, &good, true},
		{"address below", pca9685.Options{Addr: 0x3f}, nil, false},
		{"address above", pca9685.Options{Addr: 0x80}, nil, false},
		{"frequency too high", pca9685.Options{Frequency: 2000}, nil, false},
		{"frequency too low", pca9685.Options{Frequency: 20}, nil, false},
		{"oscillator", pca9685.Options{OscillatorHz: 60e6}, nil, false},
		{"pulse over the period", pca9685.Options{Frequency: 500}, &good, false},
		{"pulses under one count", pca9685.Options{}, &pca9685.ServoCalibration{MinPulse: 1500 * time.Microsecond, MaxPulse: 1502 * time.Microsecond, MinAngle: 0, MaxAngle: 1}, false},
		{"angles", pca9685.Options{}, &pca9685.ServoCalibration{MinPulse: good.MinPulse, MaxPulse: good.MaxPulse, MinAngle: 90, MaxAngle: -90}, false},
	}
	for _, tc := range cases {
		err := pca9685.Check(tc.opts, tc.cal)
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, pca9685.ErrConfig) {
			t.Errorf("%s: Check = %v, want ok %v", tc.name, err, tc.ok)
		}
		// Open and Servo on a real (fake) chip say the same.
		b, oerr := pca9685.Open(pca9685test.New(tc.opts.Addr), tc.opts)
		if oerr == nil && tc.cal != nil {
			_, oerr = b.Servo(0, *tc.cal)
		}
		if (oerr == nil) != (err == nil) {
			t.Errorf("%s: Check = %v but Open/Servo = %v", tc.name, err, oerr)
		}
	}
}
