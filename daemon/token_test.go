package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/internal/secretfile"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// The first start creates the operator token (private, long enough, never
// the same twice); later starts use the one there; a token the operator
// wrote is used and never replaced, one that is refused is an error and
// stays as it was; a config that does not generate, or holds its token
// already, is left alone.
func TestEnsureResetToken(t *testing.T) {
	dir := t.TempDir()
	cfgAt := func(path string) *config.Config {
		c := config.Default()
		c.HTTP.ResetTokenFile = path
		return c
	}
	path := filepath.Join(dir, "state", "operator-token")
	first := cfgAt(path)
	created, err := EnsureResetToken(first)
	if err != nil || !created {
		t.Fatalf("first start: created %v, %v", created, err)
	}
	tok := first.HTTP.ResetToken.Reveal()
	if len(tok) < config.MinResetTokenLen || config.CheckResetToken(tok) != nil {
		t.Errorf("generated token of %d bytes: %v", len(tok), config.CheckResetToken(tok))
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("token file: %v %v, want mode 0600", st.Mode(), err)
	}
	if onDisk, err := secretfile.Read(path); err != nil || onDisk != tok {
		t.Errorf("the file holds %q (%v), the supervisor %q", onDisk, err, tok)
	}
	again := cfgAt(path)
	if created, err := EnsureResetToken(again); err != nil || created || again.HTTP.ResetToken.Reveal() != tok {
		t.Errorf("restart: created %v, %v; the token changed: %v", created, err, again.HTTP.ResetToken.Reveal() != tok)
	}
	other := cfgAt(filepath.Join(dir, "other-token"))
	if _, err := EnsureResetToken(other); err != nil || other.HTTP.ResetToken.Reveal() == tok {
		t.Errorf("a second robot's token is the first's, or %v", err)
	}

	mine := filepath.Join(dir, "mine")
	const operators = "the-operators-own-token-0123456789abcdef"
	os.WriteFile(mine, []byte(operators+"\n"), 0o600)
	c := cfgAt(mine)
	if created, err := EnsureResetToken(c); err != nil || created || c.HTTP.ResetToken.Reveal() != operators {
		t.Errorf("the operator's token: created %v, %v, token replaced: %v", created, err, c.HTTP.ResetToken.Reveal() != operators)
	}
	for name, tc := range map[string]struct {
		content string
		mode    os.FileMode
		want    string
	}{
		"open to others": {operators, 0o644, "has mode 0644"},
		"too short":      {"short", 0o600, "the reset token is 5 bytes"},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		os.WriteFile(p, []byte(tc.content+"\n"), tc.mode)
		os.Chmod(p, tc.mode)
		c := cfgAt(p)
		_, err := EnsureResetToken(c)
		if err == nil || !strings.HasPrefix(err.Error(), "default.yaml:") || !strings.Contains(err.Error(), "http.reset_token_file: ") ||
			!strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), tc.want) || c.HTTP.ResetToken != "" {
			t.Errorf("%s: %v, want an error naming the config line, %s and %q", name, err, p, tc.want)
		}
		if b, _ := os.ReadFile(p); string(b) != tc.content+"\n" {
			t.Errorf("%s: the file was changed to %q", name, b)
		}
	}

	off := cfgAt(filepath.Join(dir, "not-generated"))
	off.HTTP.GenerateResetToken = false
	inline := cfgAt(filepath.Join(dir, "inline"))
	inline.HTTP.ResetToken = operators
	for name, c := range map[string]*config.Config{"not generated": off, "inline": inline} {
		if created, err := EnsureResetToken(c); err != nil || created {
			t.Errorf("%s: created %v, %v", name, created, err)
		}
		if _, err := os.Stat(c.HTTP.ResetTokenFile); !os.IsNotExist(err) {
			t.Errorf("%s: a file was written (%v)", name, err)
		}
	}
}
