package config_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// longToken is a reset token of the minimum length and more.
const longToken = "s3cret-token-0123456789abcdef-0123456789"

// writeFile writes content at mode exactly (umask would otherwise change it).
func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// withSecrets returns a config naming the two secret files.
func withSecrets(passwordFile, tokenFile string) string {
	return fmt.Sprintf(`device: arm1
mqtt:
  broker: tcp://broker.local:1883
  username: arm1
  password_file: %q
http:
  reset_token_file: %q
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, passwordFile, tokenFile)
}

func TestSecretFiles(t *testing.T) {
	dir := t.TempDir()
	pass, token := filepath.Join(dir, "mqtt.pass"), filepath.Join(dir, "reset.token")
	writeFile(t, pass, "hunter2\n", 0o600)
	writeFile(t, token, longToken+"\r\n", 0o400)
	cfgPath := filepath.Join(dir, "arm.yaml")
	writeFile(t, cfgPath, withSecrets(pass, token), 0o644)

	c, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.MQTT.Password.Reveal(); got != "hunter2" {
		t.Errorf("password %q", got)
	}
	if got := c.HTTP.ResetToken.Reveal(); got != longToken {
		t.Errorf("reset token %q", got)
	}
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("warnings: %v", w)
	}
	// A secret never prints.
	for _, s := range []string{fmt.Sprint(c.MQTT), fmt.Sprintf("%+v %#v %q", c.HTTP, c.HTTP, c.HTTP.ResetToken)} {
		if strings.Contains(s, "hunter2") || strings.Contains(s, "s3cret") {
			t.Errorf("secret printed: %s", s)
		}
	}
	if b, _ := c.MQTT.Password.MarshalText(); string(b) != "[redacted]" {
		t.Errorf("MarshalText %q", b)
	}
}

func TestSecretFileRefused(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	writeFile(t, good, longToken+"\n", 0o600)
	mk := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		writeFile(t, p, content, mode)
		return p
	}
	for _, tc := range []struct {
		name string
		path string
		want string
	}{
		{"world readable", mk("0644", "hunter2\n", 0o644), "has mode 0644: a secret must not be accessible to group or others"},
		{"group readable", mk("0640", "hunter2\n", 0o640), "has mode 0640"},
		{"missing", filepath.Join(dir, "nope"), "no such file or directory"},
		{"a directory", dir, "is not a regular file"},
		{"empty", mk("empty", "\n", 0o600), "is empty"},
		{"two lines", mk("two", "a\nb\n", 0o600), "holds more than one line"},
		{"too large", mk("large", strings.Repeat("x", 5000), 0o600), "larger than 4096 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(withSecrets(tc.path, good)), "arm.yaml")
			if err == nil {
				t.Fatal("accepted")
			}
			// password_file is on line 5 of withSecrets' config.
			if !strings.HasPrefix(err.Error(), "arm.yaml:5:18: mqtt.password_file: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v\nwant arm.yaml:5:18: mqtt.password_file: ... %s", err, tc.want)
			}
			if len(errorList(err)) != 1 {
				t.Errorf("more than one error: %v", err)
			}
		})
	}
}

func TestSecretFIFONeverOpened(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := mkfifo(fifo); err != nil {
		if runtime.GOOS == "linux" {
			t.Fatalf("mkfifo: %v", err)
		}
		t.Skipf("no mkfifo on %s: %v", runtime.GOOS, err)
	}
	_, err := config.Parse([]byte(withSecrets(fifo, fifo)), "arm.yaml")
	if err == nil || !strings.Contains(err.Error(), "is not a regular file") {
		t.Errorf("got %v", err)
	}
}

func TestLoadInlineSecretInOpenFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "arm.yaml")
	writeFile(t, p, `device: arm1
http:
  reset_token: inline-0123456789abcdef0123456789abcdef
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, 0o644)
	c, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(c.Warnings(), "\n"); !strings.Contains(w, p+": holds an inline secret but has mode 0644") ||
		!strings.Contains(w, p+":3:16: http.reset_token: an inline secret") {
		t.Errorf("warnings:\n%s", w)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := config.Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	big := filepath.Join(dir, "big.yaml")
	writeFile(t, big, "# "+strings.Repeat("x", 2<<20)+"\n", 0o644)
	if _, err := config.Load(big); err == nil || !strings.HasPrefix(err.Error(), big+": larger than") {
		t.Errorf("big file: %v", err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "device: arm1\nactuators: {}\n", 0o644)
	if _, err := config.Load(bad); err == nil || !strings.HasPrefix(err.Error(), bad+":2:1: actuators: ") {
		t.Errorf("bad file: %v", err)
	}
}

// A reset token shorter than 32 bytes, or one with a space or control
// character, is refused, inline or in its file, at the line that names it.
func TestResetTokenRefused(t *testing.T) {
	dir := t.TempDir()
	pass := filepath.Join(dir, "pass")
	writeFile(t, pass, "hunter2\n", 0o600)
	for _, tc := range []struct {
		name, token, want string
	}{
		{"short", "s3cret-token", "the reset token is 12 bytes: it must be at least 32"},
		{"31 bytes", strings.Repeat("x", 31), "the reset token is 31 bytes: it must be at least 32"},
		{"a space", strings.Repeat("x", 20) + " " + strings.Repeat("y", 20), "must not hold spaces or control characters"},
	} {
		t.Run(tc.name+" in a file", func(t *testing.T) {
			token := filepath.Join(dir, "token")
			writeFile(t, token, tc.token+"\n", 0o600)
			_, err := config.Parse([]byte(withSecrets(pass, token)), "arm.yaml")
			// reset_token_file is on line 7 of withSecrets' config.
			if err == nil || !strings.HasPrefix(err.Error(), "arm.yaml:7:21: http.reset_token_file: "+token+": ") ||
				!strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v\nwant arm.yaml:7:21: http.reset_token_file: ... %s", err, tc.want)
			}
		})
		t.Run(tc.name+" inline", func(t *testing.T) {
			cfg := fmt.Sprintf("device: arm1\nhttp:\n  reset_token: %q\nactuators:\n  base: {kind: servo, driver: sim, min: 0, max: 1}\n", tc.token)
			_, err := config.Parse([]byte(cfg), "arm.yaml")
			if err == nil || !strings.HasPrefix(err.Error(), "arm.yaml:3:16: http.reset_token: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v\nwant arm.yaml:3:16: http.reset_token: ... %s", err, tc.want)
			}
		})
	}
	// 32 bytes exactly is enough.
	token := filepath.Join(dir, "token32")
	writeFile(t, token, strings.Repeat("k", 32)+"\n", 0o600)
	if _, err := config.Parse([]byte(withSecrets(pass, token)), "arm.yaml"); err != nil {
		t.Errorf("a 32-byte token: %v", err)
	}
}

// The TLS client key is checked like the other secrets: a key group or
// others may read is refused, at its line; a private one is accepted.
func TestTLSKeyFileMode(t *testing.T) {
	dir := t.TempDir()
	cfg := func(key string) []byte {
		return fmt.Appendf(nil, `device: arm1
mqtt:
  broker: ssl://broker.local:8883
  tls:
    cert_file: /etc/saga/client.crt
    key_file: %q
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, key)
	}
	for _, tc := range []struct {
		mode os.FileMode
		want string // "" accepted
	}{
		{0o600, ""},
		{0o400, ""},
		{0o640, "has mode 0640: a secret must not be accessible to group or others"},
		{0o644, "has mode 0644: a secret must not be accessible to group or others"},
		{0o604, "has mode 0604"},
	} {
		key := filepath.Join(dir, fmt.Sprintf("client-%o.key", tc.mode))
		writeFile(t, key, "-----BEGIN PRIVATE KEY-----\n", tc.mode)
		_, err := config.Parse(cfg(key), "arm.yaml")
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("mode %04o refused: %v", tc.mode, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), "arm.yaml:6:15: mqtt.tls.key_file: "+key) ||
			!strings.Contains(err.Error(), tc.want)):
			t.Errorf("mode %04o: got %v, want arm.yaml:6:15: mqtt.tls.key_file: ... %s", tc.mode, err, tc.want)
		}
	}
	if _, err := config.Parse(cfg(filepath.Join(dir, "missing.key")), "arm.yaml"); err == nil ||
		!strings.Contains(err.Error(), "mqtt.tls.key_file: stat ") {
		t.Errorf("missing key: %v", err)
	}
}

// The operator token is generated by default (the embedded default and a
// file that omits it alike): a reset_token_file that is missing is left to
// the daemon to create, one that exists is read and checked at load as
// before, an inline token needs no file, and a config that asks for a
// generated token but names no file to keep it in is refused.
func TestGeneratedResetToken(t *testing.T) {
	def := config.Default()
	if def.HTTP.OperatorTokenFile() != config.DefaultResetTokenFile || config.DefaultResetTokenFile != "./saga-data/operator-token" ||
		!def.HTTP.GenerateResetToken || def.HTTP.ResetToken != "" {
		t.Errorf("the default http: %+v", def.HTTP)
	}
	dir := t.TempDir()
	cfg := func(http string) []byte {
		return []byte("device: arm1\n" + http + "actuators:\n  base: {kind: servo, driver: sim, min: 0, max: 1}\n")
	}
	missing := filepath.Join(dir, "missing", "token")
	c, err := config.Parse(cfg("http:\n  reset_token_file: "+missing+"\n"), "arm.yaml")
	if err != nil || c.HTTP.ResetToken != "" || !c.HTTP.GenerateResetToken || c.HTTP.OperatorTokenFile() != missing {
		t.Errorf("a missing file to generate: %+v %v", c, err)
	}
	if _, err := os.Stat(filepath.Dir(missing)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a parse created something: %v", err)
	}
	existing := filepath.Join(dir, "token")
	writeFile(t, existing, longToken+"\n", 0o600)
	if c, err := config.Parse(cfg("http:\n  reset_token_file: "+existing+"\n"), "arm.yaml"); err != nil || c.HTTP.ResetToken.Reveal() != longToken {
		t.Errorf("an existing generated token is read at load: %v", err)
	}
	loose := filepath.Join(dir, "loose")
	writeFile(t, loose, longToken+"\n", 0o644)
	if _, err := config.Parse(cfg("http:\n  reset_token_file: "+loose+"\n"), "arm.yaml"); err == nil ||
		!strings.HasPrefix(err.Error(), "arm.yaml:3:21: http.reset_token_file: ") || !strings.Contains(err.Error(), "has mode 0644") {
		t.Errorf("an existing token open to others: %v", err)
	}
	if _, err := config.Parse(cfg("http:\n  reset_token_file: "+missing+"\n  generate_reset_token: false\n"), "arm.yaml"); err == nil ||
		!strings.Contains(err.Error(), "no such file") {
		t.Errorf("a missing file not to generate: %v", err)
	}
	c, err = config.Parse(cfg("http:\n  reset_token: "+longToken+"\n"), "arm.yaml")
	if err != nil || c.HTTP.ResetToken.Reveal() != longToken || c.HTTP.OperatorTokenFile() != "" {
		t.Errorf("an inline token: %+v %v", c.HTTP.OperatorTokenFile(), err)
	}
	if _, err := config.Parse(cfg("http:\n  reset_token_file: \"\"\n  generate_reset_token: true\n"), "arm.yaml"); err == nil ||
		!strings.HasPrefix(err.Error(), "arm.yaml:4:25: http.generate_reset_token: needs reset_token_file") {
		t.Errorf("generating into no file: %v", err)
	}
	c, err = config.Parse(cfg("http:\n  reset_token_file: \"\"\n"), "arm.yaml")
	if err != nil || !strings.Contains(strings.Join(c.Warnings(), "\n"), "arm.yaml:3:21: http.reset_token_file: no operator token: a halt can never be reset") {
		t.Errorf("no token at all: %v, warnings %v", err, c.Warnings())
	}
}

// Default reads nothing from the working directory, not even a token file
// that would be refused: the daemon reads (or creates) the default's token.
func TestDefaultReadsNoTokenFile(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.MkdirAll("saga-data", 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, config.DefaultResetTokenFile, "short\n", 0o644)
	if c := config.Default(); c.HTTP.ResetToken != "" {
		t.Errorf("Default read %s", config.DefaultResetTokenFile)
	}
}
