package daemon

import (
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

func testConfig(t *testing.T) *config.Config {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Journal.Dir = filepath.Join(dir, "journal")
	cfg.Sim.World = filepath.Join(dir, "world")
	cfg.MQTT.Listen = "127.0.0.1:0"
	cfg.MQTT.Auth.PasswordFile = filepath.Join(dir, "mqtt", "passwd")
	cfg.MQTT.Auth.CredentialsDir = filepath.Join(dir, "mqtt", "credentials")
	cfg.HTTP.Listen = "127.0.0.1:0"
	return cfg
}

// The embedded default starts whole — locked broker, supervisor, transport,
// HTTP — and becomes ready; Close stops it all (a second Start on the same
// journal then works, so nothing held the journal's lock).
func TestStartAndClose(t *testing.T) {
	cfg := testConfig(t)
	d, err := Start(Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if d.Broker == nil || d.Broker.Anonymous || cfg.MQTT.Username == "" {
		t.Fatal("the embedded broker did not start locked with the supervisor's login")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := http.Get("http://" + d.HTTPAddr() + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("never ready: %v %v", d.Sup.Status().Reasons, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	cfg2 := testConfig(t)
	cfg2.Journal, cfg2.Sim, cfg2.MQTT.Auth = cfg.Journal, cfg.Sim, cfg.MQTT.Auth
	d2, err := Start(Options{Config: cfg2})
	if err != nil {
		t.Fatalf("a second start on the same journal: %v", err)
	}
	d2.Close()
}

// A port in use is an error from Start — before recovery, before the
// transport connects, before anything could report ready — and what was
// started is stopped again: `run` must not print its banner and tell
// systemd READY, and only then find the HTTP port taken.
func TestBusyPortsFailStart(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	cfg := testConfig(t)
	cfg.HTTP.Listen = busy.Addr().String()
	if d, err := Start(Options{Config: cfg}); err == nil || !strings.Contains(err.Error(), "http") {
		if d != nil {
			d.Close()
		}
		t.Fatalf("HTTP on a busy port: %v", err)
	}
	// Nothing was left holding the journal or the broker.
	cfg.HTTP.Listen = "127.0.0.1:0"
	d, err := Start(Options{Config: cfg})
	if err != nil {
		t.Fatalf("after a failed start: %v", err)
	}
	d.Close()

	cfg = testConfig(t)
	cfg.MQTT.Listen = busy.Addr().String()
	if d, err := Start(Options{Config: cfg}); err == nil {
		d.Close()
		t.Fatal("the embedded broker on a busy port started")
	}
}
