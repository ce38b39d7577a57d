package pca9685_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/drivers/pca9685"
	"github.com/saga-supervisor/saga-supervisor/drivers/pca9685/pca9685test"
	"periph.io/x/conn/v3/i2c/i2ctest"
)

func ctx(t *testing.T) context.Context { return t.Context() }

func notApplied(err error) bool { return errors.Is(err, actuators.ErrNotApplied) }

// Exact register traffic of Set, ReadBack and Halt on channel 3, replayed
// after a cold Open. 50 Hz from 25 MHz: a count is 122/25 MHz = 4.88 µs;
// 500 µs = 102.46 counts, 2500 µs = 512.3 counts.
func TestServoRegisters(t *testing.T) {
	ops := append([]i2ctest.IO{}, coldOpen...)
	ops = append(ops,
		rd(0x00, 0x21), wr(0x12, 0, 0, 102, 0), // Set(-90): LED3 at 0x12, OFF 102
		rd(0x00, 0x21), wr(0x12, 0, 0, 0x00, 0x02), // Set(90): OFF 512
		rd(0x00, 0x21), wr(0x12, 0, 0, 0x33, 0x01), // Set(0): 1500 µs = 307.4 -> 307
		rd(0x00, 0x21), i2ctest.IO{Addr: 0x40, W: []byte{0x12}, R: []byte{0, 0, 0x33, 0x01}},
		wr(0x15, 0x10), // Halt: LED3_OFF_H full off
		rd(0x00, 0x21), i2ctest.IO{Addr: 0x40, W: []byte{0x12}, R: []byte{0, 0, 0x33, 0x11}},
	)
	b, err := pca9685.Open(playback(t, ops...), pca9685.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := b.Servo(3, pca9685test.Calibration)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []float64{-90, 90, 0} {
		if err := s.Set(ctx(t), a); err != nil {
			t.Fatalf("set %g: %v", a, err)
		}
	}
	if got, err := s.ReadBack(ctx(t)); got != 0 || err != nil {
		t.Errorf("read back %g, %v", got, err)
	}
	if err := s.Halt(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadBack(ctx(t)); !errors.Is(err, pca9685.ErrNotDriven) || !errors.Is(err, actuators.ErrNoReading) {
		t.Errorf("read back after halt: %v", err)
	}
}

func TestServoTicks(t *testing.T) {
	s, _ := pca9685test.NewServo(t, pca9685test.Calibration)
	for _, c := range []struct {
		angle float64
		ticks int
	}{{-90, 102}, {-45, 205}, {0, 307}, {45, 410}, {90, 512}} {
		if n, err := s.Ticks(c.angle); n != c.ticks || err != nil {
			t.Errorf("Ticks(%g) = %d, %v; want %d", c.angle, n, err, c.ticks)
		}
	}
	// Reversed: the longer pulse at the smaller angle.
	b, _ := pca9685test.Open(t)
	r, err := b.Servo(1, pca9685.ServoCalibration{MinPulse: 2500_000, MaxPulse: 500_000, MinAngle: 0, MaxAngle: 180})
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := r.Ticks(0); n != 512 {
		t.Errorf("reversed Ticks(0) = %d", n)
	}
}

func TestServoRoundTrip(t *testing.T) {
	s, c := pca9685test.NewServo(t, pca9685test.Calibration)
	if _, err := s.ReadBack(ctx(t)); !errors.Is(err, actuators.ErrNoReading) {
		t.Fatalf("never driven: %v", err)
	}
	for _, a := range []float64{-90, -12.345, 0, 33.3, 90} {
		if err := s.Set(ctx(t), a); err != nil {
			t.Fatal(err)
		}
		if got, err := s.ReadBack(ctx(t)); got != a || err != nil {
			t.Errorf("set %g, read back %g, %v", a, got, err)
		}
	}
	// Someone else writes the channel: the count is converted.
	c.SetReg(0x08, 0x00)
	c.SetReg(0x09, 0x02) // 512 counts
	if got, err := s.ReadBack(ctx(t)); got != 90 || err != nil {
		t.Errorf("foreign 512: %g, %v", got, err)
	}
	// Phase-shifted by another program: ON 100, OFF 100+307.
	c.SetReg(0x06, 100)
	c.SetReg(0x08, byte(407&0xFF))
	c.SetReg(0x09, byte(407>>8))
	if got, err := s.ReadBack(ctx(t)); math.Abs(got) > 0.5 || err != nil {
		t.Errorf("phase-shifted: %g, %v", got, err)
	}
	c.SetReg(0x07, 0x10) // full on
	if _, err := s.ReadBack(ctx(t)); !errors.Is(err, pca9685.ErrBadReading) {
		t.Errorf("full on: %v", err)
	}
	c.SetReg(0x07, 0x80) // reserved bit
	if _, err := s.ReadBack(ctx(t)); !errors.Is(err, pca9685.ErrBadReading) {
		t.Errorf("reserved: %v", err)
	}
}

// Refused values and a done ctx: ErrNotApplied, and nothing reaches the bus.
func TestServoRefusesWithoutIO(t *testing.T) {
	s, c := pca9685test.NewServo(t, pca9685test.Calibration)
	c.ResetOps()
	for _, v := range []float64{-90.001, 90.5, math.NaN(), math.Inf(1), math.Inf(-1)} {
		err := s.Set(ctx(t), v)
		if !notApplied(err) || !errors.Is(err, pca9685.ErrInvalidValue) {
			t.Errorf("set %g: %v", v, err)
		}
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Set(done, 0); !notApplied(err) || !errors.Is(err, context.Canceled) {
		t.Errorf("done ctx: %v", err)
	}
	if ops := c.Ops(); len(ops) != 0 {
		t.Errorf("bus traffic: %v", ops)
	}
}

func TestServoBusErrors(t *testing.T) {
	s, c := pca9685test.NewServo(t, pca9685test.Calibration)
	if err := s.Set(ctx(t), 10); err != nil {
		t.Fatal(err)
	}
	// The write fails after the bytes went out: in doubt, link lost.
	c.Fault = func(w, r []byte) (bool, error) {
		if len(w) == 5 {
			return true, errors.New("i2c: remote I/O error")
		}
		return true, nil
	}
	err := s.Set(ctx(t), 20)
	if err == nil || notApplied(err) || !errors.Is(err, actuators.ErrLinkLost) || !errors.Is(err, pca9685.ErrBus) {
		t.Fatalf("failed write: %v", err)
	}
	// ReadBack now reports what the chip holds, converted (20°, to a count).
	if got, err := s.ReadBack(ctx(t)); math.Abs(got-20) > 0.5 || err != nil {
		t.Errorf("read back after a doubtful write: %g, %v", got, err)
	}
	// Halt still works: a separate, single write.
	c.ResetOps()
	if err := s.Halt(); err != nil {
		t.Fatal(err)
	}
	if w := c.Writes(); len(w) != 1 || string(w[0]) != "\x09\x10" {
		t.Errorf("halt wrote %x", w)
	}
	// The MODE1 check fails: nothing written, not applied, link lost.
	c.Fault = func(w, r []byte) (bool, error) { return false, errors.New("i2c: remote I/O error") }
	err = s.Set(ctx(t), 30)
	if !notApplied(err) || !errors.Is(err, actuators.ErrLinkLost) {
		t.Errorf("failed MODE1 read: %v", err)
	}
	if err := s.Halt(); err == nil || !errors.Is(err, pca9685.ErrBus) {
		t.Errorf("halt on a dead bus: %v", err)
	}
	if _, err := s.ReadBack(ctx(t)); !errors.Is(err, actuators.ErrLinkLost) {
		t.Errorf("read back on a dead bus: %v", err)
	}
}

// A chip that lost power comes back asleep at 200 Hz with every channel
// off: Set refuses (not applied) rather than write pulses that would run at
// the wrong period once someone wakes it.
func TestChipReset(t *testing.T) {
	s, c := pca9685test.NewServo(t, pca9685test.Calibration)
	if err := s.Set(ctx(t), 10); err != nil {
		t.Fatal(err)
	}
	c.PowerOn()
	c.ResetOps()
	err := s.Set(ctx(t), 20)
	if !errors.Is(err, pca9685.ErrChipReset) || !notApplied(err) {
		t.Fatalf("set on a reset chip: %v", err)
	}
	if w := c.Writes(); len(w) != 0 {
		t.Errorf("wrote %x", w)
	}
	if _, err := s.ReadBack(ctx(t)); !errors.Is(err, pca9685.ErrChipReset) {
		t.Errorf("read back on a reset chip: %v", err)
	}
}

// Channels share the bus: concurrent Sets and ReadBacks on one board, with
// -race.
func TestConcurrent(t *testing.T) {
	b, c := pca9685test.Open(t)
	var wg sync.WaitGroup
	for ch := 0; ch < pca9685.Channels; ch++ {
		s, err := b.Servo(ch, pca9685test.Calibration)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				a := float64((ch*7+i)%181 - 90)
				if err := s.Set(t.Context(), a); err != nil {
					t.Error(err)
					return
				}
				if got, err := s.ReadBack(t.Context()); got != a || err != nil {
					t.Errorf("channel %d: set %g, read back %g, %v", ch, a, got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, op := range c.Ops() {
		if len(op.W) == 5 && (op.W[0]-0x06)%4 != 0 {
			t.Fatalf("torn write %x", op.W)
		}
	}
}
