package serial

import (
	"context"
	"io"
	"testing"
	"time"
)

func TestConfig(t *testing.T) {
	op := func(context.Context) (io.ReadWriteCloser, error) { return nil, io.EOF }
	for _, c := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"port", Config{Port: "/dev/ttyACM0"}, true},
		{"usb", Config{VID: "2341", PID: "0043", SerialNumber: "x"}, true},
		{"opener", Config{Opener: op}, true},
		{"nothing", Config{}, false},
		{"port and usb", Config{Port: "/dev/x", VID: "1", PID: "2"}, false},
		{"vid only", Config{VID: "2341"}, false},
		{"opener and port", Config{Opener: op, Port: "/dev/x"}, false},
		{"negative timeout", Config{Port: "p", LinkTimeout: -1}, false},
		{"window 9", Config{Port: "p", Window: 9}, false},
		{"retries -2", Config{Port: "p", Retries: -2}, false},
		{"heartbeat too slow", Config{Port: "p", Heartbeat: 200 * time.Millisecond}, false},
		{"ack timeout >= link timeout", Config{Port: "p", AckTimeout: time.Second}, false},
	} {
		got, err := c.cfg.withDefaults()
		if (err == nil) != c.ok {
			t.Errorf("%s: err = %v", c.name, err)
			continue
		}
		if err != nil {
			if CodeOf(err) != CodeConfig {
				t.Errorf("%s: code %q", c.name, CodeOf(err))
			}
			if _, err := Open(context.Background(), c.cfg); err == nil {
				t.Errorf("%s: Open accepted it", c.name)
			}
			continue
		}
		if got.Baud != DefaultBaud || got.Retries != DefaultRetries || got.Window != DefaultWindow || got.FrameGap < 20*time.Millisecond || got.Name == "" {
			t.Errorf("%s: defaults %+v", c.name, got)
		}
	}
	c, _ := Config{Port: "p", Retries: NoRetries, Baud: 9600}.withDefaults()
	if c.Retries != 0 || c.FrameGap != 31250*time.Microsecond {
		t.Errorf("NoRetries → %d, gap at 9600 baud %v", c.Retries, c.FrameGap)
	}
}
