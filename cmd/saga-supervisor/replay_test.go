package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The demo's journal — written by several processes, one killed with
// SIGKILL mid-step and recovered by the next — replays under the embedded
// default config it was written under with nothing different (exit 0);
// under a lower shoulder limit the demo's shoulder moves are refused now
// (exit 1); and a journal that is not there is exit 2.
func TestReplayDemoJournal(t *testing.T) {
	dir := demoDir(t)
	journal := filepath.Join(dir, "journal")
	out, code := run(t, "replay", "--wal", journal)
	if code != 0 || !strings.Contains(out, "SAME:") {
		t.Fatalf("replay of the demo's journal under its own config: exit %d, want 0\n%s", code, out)
	}

	def, err := os.ReadFile("../../supervisor/config/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lower := strings.Replace(string(def), "    min: 0\n    max: 120\n", "    min: 0\n    max: 45\n", 1)
	if lower == string(def) {
		t.Fatal("the default config has no shoulder max of 120 to lower: update the test")
	}
	cfg := filepath.Join(t.TempDir(), "lower.yaml")
	os.WriteFile(cfg, []byte(lower), 0o600)
	out, code = run(t, "replay", "--wal", journal, "--config", cfg)
	if code != 1 || !strings.Contains(out, "now:  refused LIMIT_MAX: shoulder") {
		t.Errorf("replay under a lower shoulder limit: exit %d, want 1 with the shoulder refused\n%s", code, out)
	}

	missing := filepath.Join(dir, "no-such-journal")
	if out, code = run(t, "replay", "--wal", missing); code != 2 {
		t.Errorf("replay of a missing journal: exit %d, want 2\n%s", code, out)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("replay created %s", missing)
	}
}
