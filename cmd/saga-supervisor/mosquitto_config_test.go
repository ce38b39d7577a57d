package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/daemon/brokerauth"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// shippedMosquittoDir is where configs/mosquitto.conf expects the files
// `mosquitto-config --out` writes.
const shippedMosquittoDir = "/etc/mosquitto/saga"

// The shipped mosquitto.conf and ACL are mosquitto-config's output for the
// shipped Raspberry Pi example: the robot's name, its logins and the
// supervisor's topics agree (the ACL once hard-coded arm1 while the example
// named pi-arm). Regenerate them with
//
//	go test ./cmd/saga-supervisor -run TestShippedMosquittoFiles -update-mosquitto
func TestShippedMosquittoFiles(t *testing.T) {
	b, err := os.ReadFile("../../configs/raspberry-pi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.ParseLayout(b, "raspberry-pi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"../../configs/mosquitto.acl": generatedFrom("configs/raspberry-pi.yaml") + brokerauth.Policy(cfg).MosquittoACL(),
		"../../configs/mosquitto.conf": generatedFrom("configs/raspberry-pi.yaml") + brokerauth.MosquittoConf(cfg, filepath.Join(shippedMosquittoDir, "passwd"),
			filepath.Join(shippedMosquittoDir, "saga.acl"), "127.0.0.1:1883", 0, "", ""),
	}
	for path, text := range want {
		if os.Getenv("UPDATE_MOSQUITTO") != "" {
			os.WriteFile(path, []byte(text), 0o644)
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != text {
			t.Errorf("%s is not mosquitto-config's output for configs/raspberry-pi.yaml (UPDATE_MOSQUITTO=1 go test -run TestShippedMosquittoFiles rewrites it)", path)
		}
	}
}

// mosquitto-config writes a password file whose logins are the ones the
// config needs (kept on a second run), an ACL and a conf naming them, and
// the supervisor's clear password where its config can point; a config
// that does not parse writes nothing.
func TestMosquittoConfigCommand(t *testing.T) {
	dir := t.TempDir()
	out, code := run(t, "mosquitto-config", "--out", filepath.Join(dir, "mq"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	for _, want := range []string{"new logins: saga-supervisor-arm1, saga-supervisor-arm1-estop, saga-supervisor-arm1-devices, ctl, planner",
		"username: saga-supervisor-arm1", "password_file: " + filepath.Join(dir, "mq", "credentials", "saga-supervisor-arm1")} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"passwd", "saga.acl", "mosquitto.conf", "credentials/ctl", "credentials/planner"} {
		fi, err := os.Stat(filepath.Join(dir, "mq", f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v (%v)", f, err, fi)
		}
	}
	conf, _ := os.ReadFile(filepath.Join(dir, "mq", "mosquitto.conf"))
	for _, line := range []string{"allow_anonymous false", "use_username_as_clientid true", "password_file " + filepath.Join(dir, "mq", "passwd")} {
		if !strings.Contains(string(conf), line+"\n") {
			t.Errorf("mosquitto.conf lacks %q", line)
		}
	}
	before, _ := os.ReadFile(filepath.Join(dir, "mq", "passwd"))
	if out, code := run(t, "mosquitto-config", "--out", filepath.Join(dir, "mq")); code != 0 || strings.Contains(out, "new logins") {
		t.Fatalf("second run: exit %d: %s", code, out)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "mq", "passwd")); string(after) != string(before) {
		t.Error("a second run changed the password file")
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("device: x\nspeed: 3\n"), 0o600)
	if _, code := run(t, "mosquitto-config", "--config", bad, "--out", filepath.Join(dir, "none")); code != 1 {
		t.Errorf("a bad config: exit %d", code)
	}
	if _, err := os.Stat(filepath.Join(dir, "none")); err == nil {
		t.Error("a bad config still wrote files")
	}
}
