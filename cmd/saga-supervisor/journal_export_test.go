package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// runSplit runs the binary and returns its stdout, stderr and exit code
// apart: export's records go to one, its verdict to the other.
func runSplit(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &ee):
		return stdout.String(), stderr.String(), ee.ExitCode()
	}
	t.Fatalf("running %v: %v", args, err)
	return "", "", -1
}

// The binary's `journal export`: records on stdout as JSON lines, exit 0;
// a broken journal prints the records before the break and exits 1 with
// the reason on stderr; no journal, a bad format or an unknown subcommand
// exit 2 with a message.
func TestJournalExportCommand(t *testing.T) {
	dir := t.TempDir()
	journal := filepath.Join(dir, "journal")
	l, err := wal.Open(journal, wal.Options{SegmentSize: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	for i := range n {
		r := rollback.Record{Type: rollback.RecBegin, Saga: uint64(i + 1), Agent: "planner", UnixNano: int64(i + 1)}
		if _, err := l.Append(uint8(r.Type), r.AppendEncode(nil)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	stdout, stderr, code := runSplit(t, "journal", "export", "--wal", journal, "--format", "jsonl")
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if code != 0 || len(lines) != n || stderr != "" {
		t.Fatalf("export: exit %d, %d lines, stderr %q; want 0, %d lines, nothing on stderr:\n%s", code, len(lines), stderr, n, stdout)
	}
	for i, line := range lines {
		var m struct {
			Seq  uint64 `json:"seq"`
			Type string `json:"type"`
			Saga uint64 `json:"saga"`
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil || m.Seq != uint64(i+1) || m.Type != "BEGIN" || m.Saga != uint64(i+1) {
			t.Errorf("line %d: %+v (%v):\n%s", i+1, m, err, line)
		}
	}

	// Damage record 3: records 1 and 2 are printed, then exit 1.
	_, offs, _ := frameOffsets(t, journal)
	seg := filepath.Join(journal, "0000000000000001.wal")
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[offs[2]+17] ^= 0x40
	if err := os.WriteFile(seg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = runSplit(t, "journal", "export", "--wal", journal)
	if code != 1 || strings.Count(stdout, "\n") != 2 || !strings.Contains(stderr, "journal broken at seq 3") {
		t.Errorf("export of a broken journal: exit %d, stdout:\n%s\nstderr: %s\nwant exit 1, 2 records, the break on stderr", code, stdout, stderr)
	}

	for _, args := range [][]string{
		{"journal", "export", "--wal", filepath.Join(dir, "typo")},
		{"journal", "export", "--wal", journal, "--format", "csv"},
		{"journal", "bogus"},
		{"journal"},
	} {
		stdout, stderr, code := runSplit(t, args...)
		if code != 2 || stdout != "" || stderr == "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 with a message on stderr only", args, code, stdout, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "typo")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("export created the directory it was mistakenly given: %v", err)
	}
}
