package pca9685test

import (
	"errors"
	"testing"
)

// The fake follows the data sheet's write rules the driver relies on.
func TestChipRules(t *testing.T) {
	c := New(0)
	tx := func(w []byte, n int) []byte {
		t.Helper()
		r := make([]byte, n)
		if err := c.Tx(0x40, w, r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	if err := c.Tx(0x41, []byte{0}, make([]byte, 1)); !errors.Is(err, ErrNAK) {
		t.Errorf("wrong address: %v", err)
	}
	// Asleep: PRE_SCALE writable, never below 3.
	tx([]byte{0xFE, 1}, 0)
	if c.Reg(0xFE) != 3 {
		t.Errorf("prescale %d", c.Reg(0xFE))
	}
	// Awake: PRE_SCALE writes are blocked.
	tx([]byte{0x00, 0x21}, 0)
	tx([]byte{0xFE, 121}, 0)
	if c.Reg(0xFE) != 3 {
		t.Errorf("prescale written while awake: %d", c.Reg(0xFE))
	}
	// Auto-increment: LED15_OFF_H rolls over to MODE1.
	if r := tx([]byte{0x44}, 3); r[0] != 0 || r[1] != 0x10 || r[2] != 0x21 {
		t.Errorf("read across 0x45: % x", r)
	}
	// ALL_LED_* reach every channel and read 0; reserved bits are dropped.
	tx([]byte{0xFA, 1, 0xFF, 2, 0xFF}, 0)
	if c.LED(7) != [4]byte{1, 0x1F, 2, 0x1F} || c.Reg(0xFB) != 0 {
		t.Errorf("all led: % x, ALL_LED_ON_H %#x", c.LED(7), c.Reg(0xFB))
	}
	// Sleeping with a channel running sets RESTART; writing 1 clears it.
	tx([]byte{0x06, 0, 0, 100, 0}, 0)
	tx([]byte{0x00, 0x31}, 0)
	if c.Reg(0) != 0xB1 {
		t.Errorf("MODE1 after sleep %#x", c.Reg(0))
	}
	tx([]byte{0x00, 0x21}, 0)
	if c.Reg(0) != 0xA1 {
		t.Errorf("MODE1 after wake %#x", c.Reg(0))
	}
	tx([]byte{0x00, 0xA1}, 0)
	if c.Reg(0) != 0x21 {
		t.Errorf("MODE1 after restart %#x", c.Reg(0))
	}
}
