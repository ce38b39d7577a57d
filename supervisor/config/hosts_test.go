package config_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// NormalizeHost gives each host one spelling, and refuses what is not a
// host rather than guess.
func TestNormalizeHost(t *testing.T) {
	for _, tc := range []struct{ in, host, port string }{
		{"localhost", "localhost", ""},
		{"localhost:8080", "localhost", "8080"},
		{"LocalHost:8080", "localhost", "8080"},
		{"localhost.:8080", "localhost", "8080"},
		{"Robot.Local.", "robot.local", ""},
		{"robot-1.lan:65535", "robot-1.lan", "65535"},
		{"127.0.0.1:8080", "127.0.0.1", "8080"},
		{"127.0.0.1.", "127.0.0.1", ""},
		{"[::1]", "[::1]", ""},
		{"[::1]:8080", "[::1]", "8080"},
		{"[0:0:0:0:0:0:0:1]:8080", "[::1]", "8080"},
		{"[FD00::A]", "[fd00::a]", ""},
		{"xn--bcher-kva.example", "xn--bcher-kva.example", ""},
	} {
		h, p, err := config.NormalizeHost(tc.in)
		if err != nil || h != tc.host || p != tc.port {
			t.Errorf("NormalizeHost(%q) = %q, %q, %v; want %q, %q", tc.in, h, p, err, tc.host, tc.port)
		}
	}
	for _, in := range []string{
		"", ":8080", "localhost:", "localhost:0", "localhost:08080", "localhost:65536", "localhost:http", "localhost:80:80",
		"::1", "fd00::1:8080", "[::1", "[::1]8080", "[::1]:", "[fe80::1%eth0]", "[127.0.0.1]", "[robot]",
		"http://robot.local", "robot.local/", "user@robot.local", "*.robot.local", "robot..local", "localhost..",
		"robot_1.lan", "-robot.lan", "robo t", "127.1", "0x7f.0.0.1", "robot.123", "2130706433", "é.example",
		strings.Repeat("a", 64) + ".example",
	} {
		if h, p, err := config.NormalizeHost(in); err == nil {
			t.Errorf("NormalizeHost(%q) = %q, %q: want an error", in, h, p)
		}
	}
}

// http.allowed_hosts: a list of hosts or host:port, each checked and
// located at its line; the default is none.
func TestAllowedHosts(t *testing.T) {
	if got := config.Default().HTTP.AllowedHosts; len(got) != 0 {
		t.Errorf("default allowed_hosts %q, want none", got)
	}
	c, err := config.Parse([]byte(minimal+"http:\n  allowed_hosts: [robot.local, \"192.168.1.20:8080\", \"[fd00::1]\"]\n"), "arm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"robot.local", "192.168.1.20:8080", "[fd00::1]"}; !slices.Equal(c.HTTP.AllowedHosts, want) {
		t.Errorf("allowed_hosts %q, want %q", c.HTTP.AllowedHosts, want)
	}
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("warnings: %v", w)
	}
	for _, tc := range []struct{ entries, want string }{
		{"[http://robot.local]", `http.allowed_hosts[0]: "http://robot.local" is not a host`},
		{"[robot.local, ok.lan, '*.lan']", `http.allowed_hosts[2]: "*.lan": wildcards are not supported`},
		{"[fd00::1]", `an IPv6 address goes in brackets: [fd00::1]`},
		{"['robot.local:0']", `bad port "0"`},
		{"[robot.local, Robot.Local.]", `http.allowed_hosts[1]: robot.local is listed twice (first as entry 0)`},
		{"[8080]", `http.allowed_hosts[0]: want a string`},
		{"robot.local", `http.allowed_hosts: want a list of strings`},
	} {
		text := strings.TrimPrefix(minimal, "\n") + "http:\n  allowed_hosts: " + tc.entries + "\n"
		_, err := config.Parse([]byte(text), "arm.yaml")
		line := strings.Count(text, "\n")
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), fmt.Sprintf("arm.yaml:%d:", line)) {
			t.Errorf("allowed_hosts: %s: %v, want arm.yaml:%d: ... %s", tc.entries, err, line, tc.want)
		}
	}
}
