package ctl

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/supervisor"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// sysfsServo adds a pwm: sysfs servo "pan" on a fresh sysfs PWM tree, as
// after a reboot: the channel is not exported, so no pulse runs.
func sysfsServo(t *testing.T) func(*config.Config) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "pwm")
	chip := filepath.Join(root, "pwmchip0")
	for name, v := range map[string]string{"npwm": "2", "export": "", "unexport": "",
		"pwm0/period": "0", "pwm0/duty_cycle": "0", "pwm0/enable": "0", "pwm0/polarity": "normal"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(chip, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(chip, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	parsed, err := config.Parse(fmt.Appendf(nil, `
device: pi1
http: {listen: ""}
actuators:
  pan:
    kind: servo
    driver: gpio
    gpio: {pwm: sysfs, chip: 0, channel: 0, sysfs_root: %s, min_pulse: 500us, max_pulse: 2500us, min_angle: -90, max_angle: 90}
    min: -90
    max: 90
`, root), "pan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return func(c *config.Config) { c.Actuators["pan"] = parsed.Actuators["pan"] }
}

// A servo not commanded since the supervisor started is no fault, as
// docs/API.md ("status — ask how the supervisor is") says: the supervisor
// is ready, the status has "not_driven":true and no error, ctl status
// shows a note, not an ERROR, and the dashboard's reading is not_driven.
func TestCtlStatusNotDriven(t *testing.T) {
	doc, err := os.ReadFile("../../../../docs/API.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(strings.Fields(string(doc)), " "), "`\"not_driven\":true`, which is no fault and does not count against `ready`") {
		t.Error("docs/API.md no longer says that a not_driven actuator is no fault: this test holds that rule")
	}
	d := startCtlDaemon(t, sysfsServo(t))
	out, msg, code := d.ctl(t, "status")
	if code != 0 {
		t.Fatalf("status exited %d: %s\n%s", code, msg, out)
	}
	var pan string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "actuator:   pan ") {
			pan = line
		}
	}
	if !strings.Contains(out, "ready:      yes") || !strings.Contains(pan, "not driven") || strings.Contains(pan, "ERROR") {
		t.Errorf("a servo not driven since start: want ready and a note, not an ERROR:\n%s", out)
	}

	out, msg, code = d.ctl(t, "status", "--json")
	var st supervisor.Status
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("status --json exited %d (%s): %s", code, msg, out)
	}
	for _, a := range st.Actuators {
		if a.Name == "pan" && (!st.Ready || a.Error != "" || !a.NotDriven) {
			t.Errorf("status --json: ready %v, pan %+v: want ready, not_driven and no error", st.Ready, a)
		}
	}

	// The dashboard names its reading not_driven too (docs/API.md, HTTP).
	resp, err := http.Get(d.http + "/api/v1/dashboard")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var dash supervisor.Dashboard
	if err := json.NewDecoder(resp.Body).Decode(&dash); err != nil {
		t.Fatal(err)
	}
	for _, a := range dash.Actuators {
		if a.Name == "pan" && a.Reading != "not_driven" {
			t.Errorf("the dashboard's reading of pan is %q, want not_driven", a.Reading)
		}
	}
}
