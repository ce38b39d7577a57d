//go:build !saga_lean

package supervisor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/drivers/serial"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim/mcu"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// unoBoard serves a simulated MCU with the reference firmware's ATmega328P
// table (firmware/saga_mcu/src/saga_atmega328p.h) on one end of a socat
// pty pair, and returns it and the other end.
func unoBoard(t *testing.T) (*mcu.MCU, string) {
	t.Helper()
	socat := testtool.Need(t, "socat", "socat")
	dir := t.TempDir()
	a, b := filepath.Join(dir, "host"), filepath.Join(dir, "board")
	cmd := exec.Command(socat, "pty,raw,echo=0,link="+a, "pty,raw,echo=0,link="+b)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		_, errA := os.Stat(a)
		_, errB := os.Stat(b)
		if errA == nil && errB == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("socat made no ptys")
		}
	}
	m, err := mcu.New(mcu.Options{
		Channels: []mcu.ChannelSpec{
			{Kind: serial.KindServo, Pin: 9, Safe: 90},
			{Kind: serial.KindServo, Pin: 10, Safe: 90},
			{Kind: serial.KindPWM, Pin: 5},
			{Kind: serial.KindDigital, Pin: 7},
			{Kind: serial.KindDigital, Pin: 8, ActiveLow: true},
		},
		Supplies: []float64{12},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.ServePort(ctx, b, serial.DefaultBaud)
	}()
	t.Cleanup(func() { cancel(); <-done; m.Close() })
	return m, a
}

func unoConfig(t *testing.T, port, pump, gripper string) *config.Config {
	t.Helper()
	yaml := fmt.Sprintf(`
device: uno1
journal: {dir: %s}
http: {listen: ""}
sim: {world: ""}
mcus:
  uno: {port: %s}
actuators:
  pump:
    kind: digital
    driver: mcu
    mcu: {board: uno, channel: 4%s}
    safe: {value: 0}
  gripper:
    kind: servo
    driver: mcu
    mcu: {board: uno, channel: 1%s}
    min: 0
    max: 120
    initial: 90
    safe: {value: 90}
`, filepath.Join(t.TempDir(), "journal"), port, pump, gripper)
	cfg, err := config.Parse([]byte(yaml), "uno.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTP.ResetToken = "operator-token-0123456789abcdef-test"
	return cfg
}

// TestMCUTableRefusedAtStart: a config that says the Uno's active-low relay
// (channel 4, D8) is active-high is refused when the supervisor starts,
// with a coded error naming the actuator, the channel and the mismatch,
// and nothing reaches the board.
func TestMCUTableRefusedAtStart(t *testing.T) {
	m, port := unoBoard(t)
	b, err := FromConfig(unoConfig(t, port, "", ", tolerance: 0.05"), nil)
	if err == nil {
		b.Close()
		t.Fatal("the supervisor started on a board whose relay is active-low, configured active-high")
	}
	for _, want := range []string{"SERIAL_TABLE", "actuator pump: channel 4 (pin 8): the MCU drives it active-low", "mcu.active_low: false"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("start refused with %q; want it to say %q", err, want)
		}
	}
	if s := m.Stats(); s.Sets != 0 || s.Halts != 0 {
		t.Errorf("the board got %d SETs and %d HALTs", s.Sets, s.Halts)
	}
}

// TestMCUTableMatchesAndGripperTolerance: with active_low: true the board
// is accepted; a step of the relay to 1 drives its pin LOW (on). A servo
// step to 20 degrees on a board that moves in 0.09-degree steps is in
// doubt without a tolerance — and says the read-back differed from the
// target by more than the tolerance, not that the link was lost — and
// succeeds with mcu.tolerance.
func TestMCUTableMatchesAndGripperTolerance(t *testing.T) {
	for _, tc := range []struct {
		name, tolerance string
		ok              bool
	}{{"without tolerance", "", false}, {"with tolerance", ", tolerance: 0.05", true}} {
		t.Run(tc.name, func(t *testing.T) {
			m, port := unoBoard(t)
			b, err := FromConfig(unoConfig(t, port, ", active_low: true", tc.tolerance), nil)
			if err != nil {
				t.Fatal(err)
			}
			s, err := New(b.Options)
			if err != nil {
				b.Close()
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close(); b.Close() })
			do := func(format string, args ...any) api.Reply {
				req, derr := api.DecodeRequest(fmt.Appendf(nil, format, args...), 8192)
				if derr != nil {
					t.Fatal(derr)
				}
				return s.Handle(req, time.Now())
			}
			h := do(`{"id":"h","agent":"ctl","op":"hello","ttl_ms":60000}`)
			lease := fmt.Sprintf(`"lease":%q,"epoch":%d`, h.Lease, h.Epoch)
			saga := do(`{"id":"b","agent":"ctl","op":"begin",%s}`, lease).Saga
			if r := do(`{"id":"s1","agent":"ctl","op":"step",%s,"saga":%d,"actuator":"pump","value":1}`, lease, saga); !r.OK || m.Drive(4) != 0 {
				t.Fatalf("pump on: %s %s; pin %d, want LOW", r.Code, r.Message, m.Drive(4))
			}
			r := do(`{"id":"s2","agent":"ctl","op":"step",%s,"saga":%d,"actuator":"gripper","value":20}`, lease, saga)
			if tc.ok {
				if !r.OK {
					t.Fatalf("gripper to 20 with a tolerance: %s %s", r.Code, r.Message)
				}
				return
			}
			if r.OK || r.Code != "STEP_IN_DOUBT" {
				t.Fatalf("gripper to 20 without a tolerance: ok=%v %s %s", r.OK, r.Code, r.Message)
			}
			if strings.Contains(r.Message, "link lost") || !strings.Contains(r.Message, "read-back 19.98 differs from the target 20") ||
				!strings.Contains(r.Message, "more than the tolerance 0") {
				t.Errorf("STEP_IN_DOUBT says %q; want the read-back, the target and the tolerance, and no lost link", r.Message)
			}
		})
	}
}
