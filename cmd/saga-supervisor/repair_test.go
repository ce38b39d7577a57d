package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// repair, as an operator runs it on the demo's journal with a flipped bit
// in the middle: it says what a cut removes and changes nothing, then cuts
// with --yes; verify, recover and a second repair then find the journal
// intact. On a path holding no journal it fails with exit 2.
func TestRepairCommandLine(t *testing.T) {
	if out, _ := run(t, "help"); !strings.Contains(out, "repair") {
		t.Fatalf("help does not list repair:\n%s", out)
	}
	if out, code := run(t, "repair", "--wal", filepath.Join(t.TempDir(), "nope")); code != 2 {
		t.Fatalf("repair on a missing journal: exit %d, want 2\n%s", code, out)
	}
	dir := demoDir(t)
	journal := filepath.Join(dir, "journal")
	seg, offs, lens := frameOffsets(t, journal)
	k := len(offs) / 2
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	at := offs[k] + 17 + int64(lens[k]/2)
	b := make([]byte, 1)
	f.ReadAt(b, at)
	b[0] ^= 0x10
	f.WriteAt(b, at)
	f.Close()
	before, _ := os.ReadFile(seg)

	out, code := run(t, "repair", "--wal", journal)
	if code != 1 || !strings.Contains(out, fmt.Sprintf("first bad record: seq %d ", k+1)) || !strings.Contains(out, "run again with --yes") {
		t.Fatalf("repair: exit %d, want 1 naming record %d:\n%s", code, k+1, out)
	}
	if after, _ := os.ReadFile(seg); string(after) != string(before) {
		t.Fatal("repair without --yes changed the segment")
	}
	out, code = run(t, "repair", "--wal", journal, "--yes")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("the journal now ends at record seq %d", k)) {
		t.Fatalf("repair --yes: exit %d\n%s", code, out)
	}
	if out, code := run(t, "verify", "--wal", journal); code != 0 {
		t.Fatalf("verify after the repair: exit %d\n%s", code, out)
	}
	// Recovery takes the journal over (a saga the cut left open is
	// finished; exit 1 only if that unwind was not clean).
	if out, code := run(t, "recover", "--wal", journal, "--world", filepath.Join(dir, "arm.world")); code > 1 || !strings.Contains(out, "journal verified") {
		t.Fatalf("recover after the repair: exit %d\n%s", code, out)
	}
	if out, code := run(t, "repair", "--wal", journal); code != 0 || !strings.Contains(out, "nothing to repair") {
		t.Fatalf("repair after the repair: exit %d\n%s", code, out)
	}
}
