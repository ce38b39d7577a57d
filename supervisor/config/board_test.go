package config_test

import (
	"testing"

	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// TestBoardPin: every way of writing a pin periph finds is one name; the
// ways it would not find are refused.
func TestBoardPin(t *testing.T) {
	for _, tc := range []struct {
		board, pin, want string // want "" for refused
	}{
		{"", "GPIO18", "GPIO18"},
		{"", "18", "GPIO18"},
		{"raspberry-pi-4", "0", "GPIO0"},
		{"raspberry-pi-4", "GPIO27", "GPIO27"},
		{"raspberry-pi-4", "GPIO28", ""},
		{"", "GPIO9999", ""},
		{"", "P1_12", ""},
		{"", "J8_40", ""},
		{"", "gpio18", ""},
		{"", "GPIO018", ""},
		{"", "-3", ""},
		{"", "EXPANDER_3", "EXPANDER_3"},
		{"raspberry-pi-5", "GPIO18", "GPIO18"},
		{"raspberry-pi-5", "18", ""},
		{"generic", "GPIO500", "GPIO500"},
		{"generic", "500", "GPIO500"},
		{"generic", "1024", ""},
		{"generic", "GPIO9999", ""},
		{"generic", "P1_12", "P1_12"},
	} {
		b, ok := config.LookupBoard(tc.board)
		if !ok {
			t.Fatalf("no board %q", tc.board)
		}
		p, err := b.Pin(tc.pin)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%s: %q accepted as %+v", b.Name, tc.pin, p)
		case tc.want != "" && (err != nil || p.Name != tc.want):
			t.Errorf("%s: %q = %+v, %v; want %s", b.Name, tc.pin, p, err, tc.want)
		}
	}
}

func TestI2CBus(t *testing.T) {
	for in, want := range map[string]string{"1": "1", "I2C1": "1", "/dev/i2c-1": "1", "": "", "SAGA_TEST_I2C": "SAGA_TEST_I2C"} {
		if got := config.I2CBus(in); got != want {
			t.Errorf("I2CBus(%q) = %q, want %q", in, got, want)
		}
	}
}
