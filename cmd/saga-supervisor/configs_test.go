package main

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// needTool finds a program the tests use (package testtool).
func needTool(t *testing.T, name, pkg string) string { return testtool.Need(t, pkg, name) }

// The shipped default config is the embedded one, byte for byte.
func TestShippedDefaultConfigIsTheEmbeddedOne(t *testing.T) {
	b, err := os.ReadFile("../../configs/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, config.DefaultYAML) {
		t.Fatal("configs/default.yaml differs from supervisor/config/default.yaml: copy it over")
	}
	out, code := run(t, "check-config", "../../configs/default.yaml")
	if code != 0 || !strings.Contains(out, "valid") {
		t.Fatalf("check-config on the default: exit %d\n%s", code, out)
	}
}

func TestCheckConfigNamesTheLine(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "arm.yaml")
	os.WriteFile(bad, []byte("device: arm1\nactuators:\n  base:\n    kind: servo\n    driver: sim\n    min: 0\n    max: 10\n    slew: 5\n"), 0o600)
	out, code := run(t, "check-config", bad)
	if code != 1 || !strings.Contains(out, "arm.yaml:8:") || !strings.Contains(out, "slew") {
		t.Fatalf("check-config on an unknown key: exit %d\n%s", code, out)
	}
	if _, code := run(t, "check-config", filepath.Join(t.TempDir(), "missing.yaml")); code != 2 {
		t.Fatalf("missing file: exit %d, want 2", code)
	}
}

// check-config refuses two actuators on one GPIO pin, however the pin is
// written, naming both keys and their lines.
func TestCheckConfigRefusesOnePinTwice(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "arm.yaml")
	os.WriteFile(bad, []byte(`device: arm1
actuators:
  pump:
    kind: digital
    driver: gpio
    gpio: {pin: GPIO17}
  valve:
    kind: digital
    driver: gpio
    gpio:
      pin: "17"
`), 0o600)
	out, code := run(t, "check-config", bad)
	if want := "arm.yaml:11:12: actuators.valve.gpio.pin: GPIO17 is already used by actuators.pump.gpio.pin (line 6)"; code != 1 || !strings.Contains(out, want) {
		t.Fatalf("check-config on one pin twice: exit %d\n%s\nwant exit 1 and %s", code, out, want)
	}
}

// systemd accepts the unit without a single warning (systemd-analyze exits
// 0 even on unknown keys, so any output fails the test).
func TestSystemdUnitVerifies(t *testing.T) {
	analyze := needTool(t, "systemd-analyze", "systemd")
	unit, err := os.ReadFile("../../configs/saga-supervisor.service")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// verify checks that ExecStart exists: point it at the test binary.
	text := strings.ReplaceAll(string(unit), "/usr/local/bin/saga-supervisor", binary)
	path := filepath.Join(dir, "saga-supervisor.service")
	os.WriteFile(path, []byte(text), 0o644)
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	for _, want := range []string{"Type=notify", "WatchdogSec=", "Restart=on-failure", "ProtectSystem=strict", "DevicePolicy=closed",
		"DeviceAllow=char-gpiochip", "DeviceAllow=char-ttyUSB", "DeviceAllow=char-ttyACM", "DeviceAllow=char-ttyAMA",
		"DeviceAllow=char-i2c", "DeviceAllow=/dev/gpiomem", "SupplementaryGroups=gpio dialout i2c", "UMask=0077",
		"SystemCallFilter=@system-service", "SystemCallFilter=~@privileged @resources", "SystemCallErrorNumber=EPERM",
		"MemoryDenyWriteExecute=yes", "RestrictRealtime=yes", "PrivateMounts=yes", "ProtectProc=invisible",
		"IPAddressDeny=any", "IPAddressAllow=localhost", "TimeoutStartSec=", "RemoveIPC=yes"} {
		if !strings.Contains(text, want) {
			t.Errorf("unit lacks %q", want)
		}
	}
	// What would break the hardware: a read-only /sys (sysfs PWM), hidden
	// devices (GPIO, I2C, serial), a hidden /proc/device-tree (periph's
	// board detection), the device groups lost in a user namespace.
	for _, line := range strings.Split(text, "\n") {
		for _, never := range []string{"ProtectKernelTunables=yes", "PrivateDevices=yes", "ProcSubset=pid", "PrivateUsers=yes"} {
			if strings.HasPrefix(strings.TrimSpace(line), never) {
				t.Errorf("unit sets %q: the hardware drivers would break", never)
			}
		}
	}
}

// The Raspberry Pi example is a valid config for the hardware drivers (its
// secret files pointed at temporary ones: check-config reads them).
func TestRaspberryPiExampleIsValid(t *testing.T) {
	b, err := os.ReadFile("../../configs/raspberry-pi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	text := string(b)
	// Its state directory here, the supervisor's password where
	// mosquitto-config writes it (relative to state_dir).
	const state = "\nstate_dir: /var/lib/saga-supervisor\n"
	if !strings.Contains(text, state) || !strings.Contains(text, "  password_file: ./mqtt/credentials/saga-supervisor\n") {
		t.Fatal("the example no longer has its state_dir and its password under it")
	}
	text = strings.Replace(text, state, "\nstate_dir: "+dir+"\n", 1)
	os.MkdirAll(filepath.Join(dir, "mqtt", "credentials"), 0o700)
	os.WriteFile(filepath.Join(dir, "mqtt", "credentials", "saga-supervisor"), []byte("s3cret-0123456789abcdef-0123456789abcdef\n"), 0o600)
	// The operator token is generated under state_dir at the first start.
	if !strings.Contains(text, "  reset_token_file: saga-data/operator-token\n  generate_reset_token: true\n") {
		t.Fatal("the example no longer generates its operator token under state_dir")
	}
	for _, driver := range []string{"driver: gpio", "driver: mcu", "driver: ina219", "pwm: sysfs"} {
		if !strings.Contains(text, driver) {
			t.Errorf("the Raspberry Pi example does not use %s", driver)
		}
	}
	path := filepath.Join(dir, "config.yaml")
	os.WriteFile(path, []byte(text), 0o600)
	if out, code := run(t, "check-config", path); code != 0 {
		t.Fatalf("check-config on the Raspberry Pi example: exit %d\n%s", code, out)
	}
}

// The mosquitto config loads in the real broker (with its password file and
// ACL paths pointed at temporary copies).
func TestMosquittoConfigLoads(t *testing.T) {
	mosq := needTool(t, "mosquitto", "mosquitto")
	dir := t.TempDir()
	conf, _ := os.ReadFile("../../configs/mosquitto.conf")
	acl, _ := os.ReadFile("../../configs/mosquitto.acl")
	os.WriteFile(filepath.Join(dir, "saga.acl"), acl, 0o600)
	os.WriteFile(filepath.Join(dir, "passwd"), nil, 0o600)
	// Port 0 makes mosquitto listen on a unix socket at the given path: in
	// the temporary directory, not in the package's source directory.
	text := strings.NewReplacer(shippedMosquittoDir+"/passwd", filepath.Join(dir, "passwd"), shippedMosquittoDir+"/saga.acl", filepath.Join(dir, "saga.acl"),
		"listener 1883 127.0.0.1", "listener 0 "+filepath.Join(dir, "mosquitto.sock")).Replace(string(conf))
	if text == string(conf) || !strings.Contains(text, filepath.Join(dir, "passwd")) {
		t.Fatal("configs/mosquitto.conf no longer names the files this test replaces")
	}
	if os.Getuid() == 0 {
		// As root, mosquitto drops to its own user, who cannot read the
		// test's private temporary directory.
		text += "user root\n"
	}
	path := filepath.Join(dir, "mosquitto.conf")
	os.WriteFile(path, []byte(text), 0o600)
	cmd := exec.Command(mosq, "-c", path)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("mosquitto exited on our config: %v\n%s", err, out.String())
	case <-timeAfter(1500):
	}
	cmd.Process.Kill()
	<-done
	if strings.Contains(out.String(), "Error") {
		t.Fatalf("mosquitto reported errors:\n%s", out.String())
	}
}

func timeAfter(ms int) <-chan time.Time { return time.After(time.Duration(ms) * time.Millisecond) }

// maxUnitExposure is the highest "Overall exposure level" systemd-analyze
// security may give the unit (0 is locked down, 10 fully exposed).
const maxUnitExposure = 2.5

var exposureLine = regexp.MustCompile(`Overall exposure level for \S+: ([0-9]+(?:\.[0-9]+)?)`)

// The unit stays hardened: systemd-analyze security --offline scores it
// 2.5 or below. On failure the test prints the score and the settings that
// cost the most.
func TestSystemdUnitExposure(t *testing.T) {
	analyze := needTool(t, "systemd-analyze", "systemd")
	// --threshold would do the comparison, but its scale differs between
	// systemd versions: the score is read from the report instead.
	out, err := exec.Command(analyze, "security", "--offline=yes", "--no-pager", "../../configs/saga-supervisor.service").CombinedOutput()
	m := exposureLine.FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security: %v: no overall exposure level in:\n%s", err, out)
	}
	score, perr := strconv.ParseFloat(string(m[1]), 64)
	if perr != nil {
		t.Fatal(perr)
	}
	t.Logf("systemd-analyze security: exposure %.1f (at most %.1f)", score, maxUnitExposure)
	if score <= maxUnitExposure {
		return
	}
	// The worst lines: each ✗ line ends with what it costs.
	type cost struct {
		line  string
		score float64
	}
	var worst []cost
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || f[0] != "✗" {
			continue
		}
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			worst = append(worst, cost{strings.Join(f, " "), v})
		}
	}
	slices.SortStableFunc(worst, func(a, b cost) int { return cmp.Compare(b.score, a.score) })
	var b strings.Builder
	for _, w := range worst[:min(len(worst), 12)] {
		fmt.Fprintf(&b, "  %s\n", w.line)
	}
	t.Fatalf("configs/saga-supervisor.service has exposure %.1f, above %.1f; the costliest settings:\n%s", score, maxUnitExposure, b.String())
}
