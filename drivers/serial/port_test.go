package serial

import (
	"strings"
	"testing"

	"go.bug.st/serial/enumerator"
)

func TestPickPort(t *testing.T) {
	list := []*enumerator.PortDetails{
		{Name: "/dev/ttyS0"},
		{Name: "/dev/ttyACM0", IsUSB: true, VID: "2341", PID: "0043", SerialNumber: "A1"},
		{Name: "/dev/ttyACM1", IsUSB: true, VID: "2341", PID: "0043", SerialNumber: "B2"},
		{Name: "/dev/ttyUSB0", IsUSB: true, VID: "1A86", PID: "7523"},
		nil,
	}
	for _, c := range []struct {
		vid, pid, sn string
		want, err    string
	}{
		{"1a86", "7523", "", "/dev/ttyUSB0", ""}, // hex compared case-insensitively
		{"2341", "0043", "B2", "/dev/ttyACM1", ""},
		{"2341", "0043", "", "", "2 ports"}, // two boards alike: refuse to guess
		{"2341", "0043", "C3", "", "no port"},
		{"dead", "beef", "", "", "no port"},
	} {
		got, err := pickPort(list, c.vid, c.pid, c.sn)
		if got != c.want || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("pickPort(%s:%s %q) = %q, %v; want %q, %q", c.vid, c.pid, c.sn, got, err, c.want, c.err)
		}
	}
}
