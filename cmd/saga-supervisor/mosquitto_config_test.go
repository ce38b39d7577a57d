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

// stateConfig writes the embedded default config with state_dir set to
// state, and returns its path.
func stateConfig(t *testing.T, dir, state string) string {
	t.Helper()
	text := strings.Replace(string(config.DefaultYAML), "\nstate_dir: .\n", "\nstate_dir: "+state+"\n", 1)
	if !strings.Contains(text, "state_dir: "+state) {
		t.Fatal("the default config no longer has `state_dir: .`: adapt this test")
	}
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// mosquitto-config writes a password file whose logins are the ones the
// config needs (kept on a second run) and an ACL, both 0600, and a conf
// naming them that mosquitto can read again after dropping to its user;
// the clear passwords go to the config's credentials_dir (under its
// state_dir), where the supervisor's config can point and ctl looks; a
// config that does not parse writes nothing.
func TestMosquittoConfigCommand(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cfg := stateConfig(t, dir, state)
	creds := filepath.Join(state, "saga-data", "mqtt", "credentials")
	out, code := run(t, "mosquitto-config", "--config", cfg, "--out", filepath.Join(dir, "mq"), "--mosquitto-user", "")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	for _, want := range []string{"new logins: saga-supervisor-arm1, saga-supervisor-arm1-estop, saga-supervisor-arm1-devices, ctl, planner",
		"username: saga-supervisor-arm1", "password_file: " + filepath.Join(creds, "saga-supervisor-arm1")} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for f, mode := range map[string]os.FileMode{"mq/passwd": 0o600, "mq/saga.acl": 0o600, "mq/mosquitto.conf": 0o644,
		"state/saga-data/mqtt/credentials/ctl": 0o600, "state/saga-data/mqtt/credentials/planner": 0o600,
		"state/saga-data/mqtt/credentials/saga-supervisor-arm1": 0o600, "state/saga-data/mqtt/credentials": 0o700} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v (%v), want mode %04o", f, err, fi, mode)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "mq", "credentials")); err == nil {
		t.Error("clear passwords were written beside mosquitto's files, not in the config's credentials_dir")
	}
	conf, _ := os.ReadFile(filepath.Join(dir, "mq", "mosquitto.conf"))
	for _, line := range []string{"allow_anonymous false", "use_username_as_clientid true", "password_file " + filepath.Join(dir, "mq", "passwd")} {
		if !strings.Contains(string(conf), line+"\n") {
			t.Errorf("mosquitto.conf lacks %q", line)
		}
	}
	before, _ := os.ReadFile(filepath.Join(dir, "mq", "passwd"))
	if out, code := run(t, "mosquitto-config", "--config", cfg, "--out", filepath.Join(dir, "mq"), "--mosquitto-user", ""); code != 0 || strings.Contains(out, "new logins") {
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

// The passwords an older mosquitto-config wrote beside mosquitto's files
// (OUT/credentials) are copied to the config's credentials_dir when a
// second run finds the logins in the password file already: otherwise
// those logins would have no clear password where ctl and the supervisor
// now look.
func TestMosquittoConfigAdoptsOldCredentials(t *testing.T) {
	dir := t.TempDir()
	cfg := stateConfig(t, dir, filepath.Join(dir, "state"))
	old := filepath.Join(dir, "mq", "credentials")
	if out, code := run(t, "mosquitto-config", "--config", cfg, "--out", filepath.Join(dir, "mq"), "--credentials", old, "--mosquitto-user", ""); code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	out, code := run(t, "mosquitto-config", "--config", cfg, "--out", filepath.Join(dir, "mq"), "--mosquitto-user", "")
	if code != 0 || strings.Contains(out, "new logins") || !strings.Contains(out, "copied the passwords of saga-supervisor-arm1, ctl, planner") {
		t.Fatalf("exit %d: %s", code, out)
	}
	for _, login := range []string{"saga-supervisor-arm1", "ctl", "planner"} {
		a, _ := os.ReadFile(filepath.Join(old, login))
		b, err := os.ReadFile(filepath.Join(dir, "state", "saga-data", "mqtt", "credentials", login))
		if err != nil || len(a) == 0 || string(a) != string(b) {
			t.Errorf("%s: not copied (%v)", login, err)
		}
	}
}
