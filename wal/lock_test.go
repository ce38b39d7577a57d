package wal_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/internal/leaktest"
	"github.com/saga-supervisor/saga-supervisor/wal"
	"github.com/saga-supervisor/saga-supervisor/wal/crashfs"
)

// readAll returns the bytes of every file in dir, by name.
func readAll(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}

func sameFiles(t *testing.T, what string, before, after map[string][]byte) {
	t.Helper()
	if len(before) != len(after) {
		t.Fatalf("%s: files changed: %d before, %d after", what, len(before), len(after))
	}
	for name, b := range before {
		if !bytes.Equal(b, after[name]) {
			t.Fatalf("%s: %s changed", what, name)
		}
	}
}

// The journal owns its lock: a second Open of a journal a Log holds is
// refused at once with ErrLocked, naming the holder's pid, and changes not
// one byte — not even bytes after the last frame that look like a torn
// tail (the owner's batch in flight). Without the lock in Open the second
// Open would cut them (the last Open below shows it would).
func TestSecondOpenIsRefusedAndCutsNothing(t *testing.T) {
	dir := t.TempDir()
	first := mustOpen(t, dir, wal.Options{SegmentSize: 4096})
	for i := range 5 {
		if _, err := first.Append(1, []byte("record "+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	// Garbage after the last frame: what a batch being written looks like
	// to anyone else.
	seg := filepath.Join(dir, "0000000000000001.wal")
	vr, err := wal.Verify(dir, wal.Options{})
	if err != nil || !vr.OK() || vr.Records != 5 {
		t.Fatalf("Verify beside the owner: %+v %v", vr, err)
	}
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	tailAt := int64(64 + first.Stats().Bytes) // the segment header, then the frames
	if _, err := f.WriteAt([]byte("half a frame, half a frame"), tailAt); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if vr, err := wal.Verify(dir, wal.Options{}); err != nil || vr.TornTail == nil || vr.TornTail.Offset != tailAt {
		t.Fatalf("the garbage is not a torn tail at %d: %+v %v", tailAt, vr.TornTail, err)
	}
	before := readAll(t, dir)

	second, err := wal.Open(dir, wal.Options{SegmentSize: 4096})
	if !errors.Is(err, wal.ErrLocked) {
		if second != nil {
			second.Close()
		}
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	if pid := "pid " + strconv.Itoa(os.Getpid()); !strings.Contains(err.Error(), pid) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("the refusal does not name the holder (%s) and the journal: %v", pid, err)
	}
	sameFiles(t, "refused Open", before, readAll(t, dir))
	if err := wal.TruncateAt(dir, wal.Options{}, 3); !errors.Is(err, wal.ErrLocked) {
		t.Fatalf("TruncateAt beside the owner: %v, want ErrLocked", err)
	}
	sameFiles(t, "refused TruncateAt", before, readAll(t, dir))

	// Readers take no lock: Verify and Scan work beside the owner.
	n := 0
	if err := wal.Scan(dir, wal.Options{}, 1, func(wal.Record) error { n++; return nil }); err != nil || n != 5 {
		t.Fatalf("Scan beside the owner: %d records, %v", n, err)
	}
	sameFiles(t, "Verify and Scan", before, readAll(t, dir))

	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	// Once the owner is gone the next Open owns the journal, and cuts
	// the torn tail: the bytes the refused Open left alone.
	third := mustOpen(t, dir, wal.Options{SegmentSize: 4096})
	defer third.Close()
	if cut := third.OpenReport().TailCut; cut == nil || cut.Offset != tailAt {
		t.Fatalf("the owner's Open did not cut the tail at %d: %+v", tailAt, cut)
	}
}

// The in-memory FS locks too (a second Open in the "process" is refused),
// and a crash image, like a rebooted machine, holds no lock.
func TestCrashFSLocks(t *testing.T) {
	fsys := crashfs.New()
	opt := wal.Options{SegmentSize: 2048, FS: fsys}
	l := mustOpen(t, "/j", opt)
	if _, err := l.Append(1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	ops := fsys.Ops()
	if _, err := wal.Open("/j", opt); !errors.Is(err, wal.ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	if fsys.Ops() != ops {
		t.Fatalf("the refused Open made %d file-system calls", fsys.Ops()-ops)
	}
	img := fsys.Crash(crashfs.DropUnsynced())
	other := mustOpen(t, "/j", wal.Options{SegmentSize: 2048, FS: img})
	other.Close()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	again := mustOpen(t, "/j", opt)
	again.Close()
}

// A Log leaves no goroutine behind: its writer, its segment preparer and
// its flush timer all end in Close.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	check := leaktest.Check(t)
	dir := t.TempDir()
	l := mustOpen(t, dir, wal.Options{SegmentSize: 2048})
	p := bytes.Repeat([]byte("p"), 300)
	for i := range 40 { // rollovers: the preparer runs
		if i%3 == 0 {
			if _, err := l.Enqueue(2, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := l.Append(1, p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Enqueue(3, p); err != nil { // arms the flush timer
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	check()
}
