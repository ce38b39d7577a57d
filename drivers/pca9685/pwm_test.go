package pca9685_test

import (
	"errors"
	"math"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/drivers/pca9685"
	"github.com/saga-supervisor/saga-supervisor/drivers/pca9685/pca9685test"
)

func TestPWM(t *testing.T) {
	p, c := pca9685test.NewPWM(t)
	if got, err := p.ReadBack(ctx(t)); got != 0 || err != nil {
		t.Errorf("power-on: %g, %v", got, err)
	}
	for _, x := range []struct {
		duty float64
		regs [4]byte
	}{
		{0, [4]byte{0, 0, 0, 0x10}},         // full off
		{0.00001, [4]byte{0, 0, 0, 0x10}},   // rounds to 0: full off
		{0.25, [4]byte{0, 0, 0x00, 0x04}},   // 1024
		{0.5, [4]byte{0, 0, 0x00, 0x08}},    // 2048
		{0.1234, [4]byte{0, 0, 0xF9, 0x01}}, // 505.4 -> 505
		{1, [4]byte{0, 0x10, 0, 0}},         // full on
	} {
		if err := p.Set(ctx(t), x.duty); err != nil {
			t.Fatal(err)
		}
		if got := c.LED(0); got != x.regs {
			t.Errorf("duty %g: registers %x, want %x", x.duty, got, x.regs)
		}
		if got, err := p.ReadBack(ctx(t)); got != x.duty || err != nil {
			t.Errorf("duty %g: read back %g, %v", x.duty, got, err)
		}
	}
	c.SetReg(0x08, 0)
	c.SetReg(0x09, 0x04)
	c.SetReg(0x07, 0)
	if got, err := p.ReadBack(ctx(t)); got != 0.25 || err != nil {
		t.Errorf("foreign 1024: %g, %v", got, err)
	}
	if err := p.Halt(); err != nil {
		t.Fatal(err)
	}
	if got, err := p.ReadBack(ctx(t)); got != 0 || err != nil {
		t.Errorf("halted: %g, %v", got, err)
	}
	c.ResetOps()
	for _, v := range []float64{-0.01, 1.01, math.NaN(), math.Inf(1)} {
		err := p.Set(ctx(t), v)
		if !errors.Is(err, actuators.ErrNotApplied) || !errors.Is(err, pca9685.ErrInvalidValue) {
			t.Errorf("set %g: %v", v, err)
		}
	}
	if len(c.Ops()) != 0 {
		t.Errorf("bus traffic: %v", c.Ops())
	}
}
