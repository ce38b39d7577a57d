package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// state_dir is the base of every relative file path, for Parse (the
// daemon) and ParseLayout (ctl, credentials, mosquitto-config) alike;
// absolute paths and device paths are taken as written; "." keeps the
// paths as written (the working directory).
func TestStateDirResolvesPaths(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "state", "token")
	os.MkdirAll(filepath.Dir(token), 0o700)
	if err := os.WriteFile(token, []byte(strings.Repeat("t", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	text := `device: arm1
state_dir: ` + filepath.Join(dir, "state") + `
journal:
  dir: ./journal
  retention: {archive_dir: archive}
mqtt:
  auth:
    password_file: mqtt/passwd
    credentials_dir: /etc/elsewhere/credentials
http:
  reset_token_file: token
sim:
  world: world
mcus:
  pico: {port: dev/ttyACM0}
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`
	state := filepath.Join(dir, "state")
	want := map[string]string{
		"journal.dir":                 filepath.Join(state, "journal"),
		"journal.retention":           filepath.Join(state, "archive"),
		"mqtt.auth.password_file":     filepath.Join(state, "mqtt", "passwd"),
		"mqtt.auth.credentials_dir":   "/etc/elsewhere/credentials",
		"http.reset_token_file":       token,
		"sim.world":                   filepath.Join(state, "world"),
		"mcus.pico.port (not a file)": "dev/ttyACM0",
	}
	full, err := config.Parse([]byte(text), "arm.yaml")
	if err != nil {
		t.Fatalf("Parse: %v (the token is read from state_dir)", err)
	}
	layout, err := config.ParseLayout([]byte(text), "arm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*config.Config{full, layout} {
		got := map[string]string{
			"journal.dir":                 c.Journal.Dir,
			"journal.retention":           c.Journal.Retention.ArchiveDir,
			"mqtt.auth.password_file":     c.MQTT.Auth.PasswordFile,
			"mqtt.auth.credentials_dir":   c.MQTT.Auth.CredentialsDir,
			"http.reset_token_file":       c.HTTP.ResetTokenFile,
			"sim.world":                   c.Sim.World,
			"mcus.pico.port (not a file)": c.MCUs["pico"].Port,
		}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("%s = %q, want %q", k, got[k], w)
			}
		}
	}
	if full.HTTP.ResetToken.Reveal() != strings.Repeat("t", 40) {
		t.Error("the reset token was not read from state_dir")
	}

	// The default: paths as written, relative to the working directory.
	def := config.Default()
	if def.StateDir != "." || def.Journal.Dir != "./saga-data/journal" || def.MQTT.Auth.CredentialsDir != "./saga-data/mqtt/credentials" {
		t.Errorf("default: state_dir %q, journal %q, credentials %q", def.StateDir, def.Journal.Dir, def.MQTT.Auth.CredentialsDir)
	}
	// A relative state_dir is relative to the working directory.
	c, err := config.ParseLayout([]byte(strings.Replace(text, "state_dir: "+state, "state_dir: data", 1)), "arm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Journal.Dir != filepath.Join("data", "journal") {
		t.Errorf("state_dir data: journal %q", c.Journal.Dir)
	}
	// An empty one is refused where it is written.
	_, err = config.ParseLayout([]byte(strings.Replace(text, "state_dir: "+state, `state_dir: ""`, 1)), "arm.yaml")
	if err == nil || !strings.Contains(err.Error(), "arm.yaml:2:12: state_dir: want a directory") {
		t.Errorf("state_dir \"\": %v", err)
	}
}
