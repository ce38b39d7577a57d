package journaltool

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/wal"
)

// lastRecord is the journal's last record: its seq and the first 8 bytes
// of its hash, as the tools print them.
func lastRecord(t *testing.T, dir string) (uint64, string) {
	t.Helper()
	vr, err := wal.Verify(dir, wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return vr.LastSeq, fmt.Sprintf("%x", vr.LastHash[:8])
}

// certify names every torn tail — one a start would cut now, and one cut
// earlier and kept in a .broken file — by segment, offset, bytes and the
// last good record before it (seq and hash), and still passes when that is
// all, saying so. A cut that removed records written whole (a repair of
// mid-log damage) fails it. (A .broken file's size alone says neither
// where it was cut nor after which record.)
func TestCertifyNamesEveryTail(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	writeJournal(t, dir, committed(1, 5)...)
	fs := frames(t, dir)
	lastSeq, lastHash := lastRecord(t, dir)
	last := fs[lastSeq]
	seg := filepath.Base(last.seg)
	off, n := tearAfter(t, last)

	// A fresh torn tail, as verify sees it.
	out, code := run(Certify, "--wal", dir)
	if code != 0 {
		t.Fatalf("certify on a torn tail: exit %d\n%s", code, out)
	}
	contains(t, "certify on a torn tail", out,
		fmt.Sprintf("a torn tail in %s at offset %d, %d bytes, after record seq %d (hash %s)", seg, off, n, lastSeq, lastHash),
		"never acknowledged", "PASS", "torn tails noted above")

	// The next start cuts it, and writes new records where it was.
	l, err := wal.Open(dir, smallSegments)
	if err != nil {
		t.Fatal(err)
	}
	cut := l.OpenReport().TailCut
	for _, r := range committed(6, 1) {
		if _, err := l.Append(uint8(r.Type), r.AppendEncode(nil)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	if cut == nil {
		t.Fatal("Open cut no tail")
	}
	out, code = run(Certify, "--wal", dir)
	if code != 0 {
		t.Fatalf("certify after the cut: exit %d\n%s", code, out)
	}
	contains(t, "certify after the cut", out,
		fmt.Sprintf("%d bytes cut from %s at offset %d after record seq %d (hash %s), kept in %s", n, seg, off, lastSeq, lastHash, cut.BrokenFile),
		"a torn tail, no record written whole in it", "PASS", "torn tails noted above")

	// A cut kept before cut notes existed is still named, with what cannot
	// be known said so.
	os.Remove(filepath.Join(dir, cut.BrokenFile+".cut"))
	out, code = run(Certify, "--wal", dir)
	if code != 0 {
		t.Fatalf("certify with a .broken file without its note: exit %d\n%s", code, out)
	}
	contains(t, "certify with a .broken file without its note", out,
		fmt.Sprintf("%d bytes cut earlier from %s are kept in %s; where they were cut and the record before them are unknown", n, seg, cut.BrokenFile),
		"whether they held records is unknown")

	// A repair of mid-log damage cuts records written whole: certify fails.
	fs = frames(t, dir)
	flipBit(t, fs[10].seg, fs[10].off+20)
	if out, code := run(Repair, "--wal", dir, "--yes"); code != 0 {
		t.Fatalf("repair --yes: exit %d\n%s", code, out)
	}
	out, code = run(Certify, "--wal", dir)
	if code != 1 {
		t.Fatalf("certify after a repair cut records: exit %d\n%s", code, out)
	}
	contains(t, "certify after a repair cut records", out,
		fmt.Sprintf("at offset %d after record seq 9", fs[10].off), "records written whole (seq 11 to", "not certified")
}
