package crashfs_test

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/wal"
	"github.com/saga-supervisor/saga-supervisor/wal/crashfs"
)

func create(t *testing.T, fsys *crashfs.FS, name string) wal.File {
	t.Helper()
	f, err := fsys.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func write(t *testing.T, f wal.File, p []byte, off int64) {
	t.Helper()
	if _, err := f.WriteAt(p, off); err != nil {
		t.Fatal(err)
	}
}

func content(t *testing.T, fsys *crashfs.FS, name string) []byte {
	t.Helper()
	b, err := fsys.ReadFile(name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return b
}

func exists(fsys *crashfs.FS, name string) bool {
	_, err := fsys.ReadFile(name)
	return err == nil
}

func TestDataDurableOnlyAfterSync(t *testing.T) {
	fsys := crashfs.New()
	f := create(t, fsys, "/a")
	fsys.SyncDir("/")
	write(t, f, []byte("synced"), 0)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	write(t, f, []byte("-unsynced"), 6)
	if got := content(t, fsys, "/a"); string(got) != "synced-unsynced" {
		t.Fatalf("current content %q", got)
	}
	if got := content(t, fsys.Crash(crashfs.DropUnsynced()), "/a"); string(got) != "synced" {
		t.Fatalf("after crash %q", got)
	}
	if got := content(t, fsys.Crash(crashfs.KeepAll()), "/a"); string(got) != "synced-unsynced" {
		t.Fatalf("KeepAll %q", got)
	}
	// Crash does not change the FS it was called on.
	if got := content(t, fsys, "/a"); string(got) != "synced-unsynced" {
		t.Fatalf("original changed: %q", got)
	}
}

func TestNamesDurableOnlyAfterSyncDir(t *testing.T) {
	fsys := crashfs.New()
	if err := fsys.MkdirAll("/d/e", 0o755); err != nil {
		t.Fatal(err)
	}
	f := create(t, fsys, "/d/e/f")
	write(t, f, []byte("data"), 0)
	f.Sync()
	if after := fsys.Crash(nil); exists(after, "/d/e/f") {
		t.Fatal("file survived without any directory sync")
	}
	fsys.SyncDir("/d/e")
	if after := fsys.Crash(nil); exists(after, "/d/e/f") {
		t.Fatal("file survived though its directory's own entry was not durable")
	}
	fsys.SyncDir("/")
	fsys.SyncDir("/d")
	after := fsys.Crash(nil)
	if string(content(t, after, "/d/e/f")) != "data" {
		t.Fatal("synced file lost")
	}

	// Rename: old name until the directory is synced.
	if err := fsys.Rename("/d/e/f", "/d/e/g"); err != nil {
		t.Fatal(err)
	}
	after = fsys.Crash(nil)
	if !exists(after, "/d/e/f") || exists(after, "/d/e/g") {
		t.Fatal("rename durable without SyncDir")
	}
	fsys.SyncDir("/d/e")
	after = fsys.Crash(nil)
	if exists(after, "/d/e/f") || string(content(t, after, "/d/e/g")) != "data" {
		t.Fatal("rename not durable after SyncDir")
	}

	// Remove: back after a crash until the directory is synced.
	fsys.Remove("/d/e/g")
	if !exists(fsys.Crash(nil), "/d/e/g") {
		t.Fatal("remove durable without SyncDir")
	}
	fsys.SyncDir("/d/e")
	if exists(fsys.Crash(nil), "/d/e/g") {
		t.Fatal("remove not durable after SyncDir")
	}
}

func TestUnsyncedNewFileIsEmpty(t *testing.T) {
	fsys := crashfs.New()
	f := create(t, fsys, "/x")
	write(t, f, []byte("never synced"), 0)
	fsys.SyncDir("/")
	if got := content(t, fsys.Crash(crashfs.DropUnsynced()), "/x"); len(got) != 0 {
		t.Fatalf("%q", got)
	}
}

func TestHandlesFollowTheFile(t *testing.T) {
	fsys := crashfs.New()
	f := create(t, fsys, "/old")
	fsys.Rename("/old", "/new")
	write(t, f, []byte("after rename"), 0)
	if string(content(t, fsys, "/new")) != "after rename" {
		t.Fatal("handle lost its file on rename")
	}
	f.Close()
	if _, err := f.WriteAt([]byte("x"), 0); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
}

func TestOpenFlags(t *testing.T) {
	fsys := crashfs.New()
	create(t, fsys, "/f")
	if _, err := fsys.OpenFile("/f", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("O_EXCL: %v", err)
	}
	if _, err := fsys.OpenFile("/missing", os.O_RDONLY, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
	if _, err := fsys.OpenFile("/nodir/f", os.O_RDWR|os.O_CREATE, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing parent: %v", err)
	}
	ro, _ := fsys.OpenFile("/f", os.O_RDONLY, 0)
	if _, err := ro.WriteAt([]byte("x"), 0); err == nil {
		t.Fatal("write through a read-only handle")
	}
	rw, _ := fsys.OpenFile("/f", os.O_RDWR, 0)
	write(t, rw, []byte("abc"), 0)
	tr, _ := fsys.OpenFile("/f", os.O_RDWR|os.O_TRUNC, 0)
	if n, _ := tr.Size(); n != 0 {
		t.Fatal("O_TRUNC did not truncate")
	}
	buf := make([]byte, 4)
	write(t, tr, []byte("ab"), 0)
	if n, err := tr.ReadAt(buf, 0); n != 2 || err != io.EOF {
		t.Fatalf("short read: %d %v", n, err)
	}
	if _, err := fsys.ReadDir("/f"); err == nil {
		t.Fatal("ReadDir of a file")
	}
	if names, _ := fsys.ReadDir("/"); len(names) != 1 || names[0] != "f" {
		t.Fatal(names)
	}
}

func TestAllocateAndTruncate(t *testing.T) {
	fsys := crashfs.New()
	f := create(t, fsys, "/f")
	write(t, f, []byte("0123456789"), 0)
	f.Truncate(4)
	f.Allocate(8) // grows with zeros, not with the old bytes
	if got := content(t, fsys, "/f"); !bytes.Equal(got, []byte("0123\x00\x00\x00\x00")) {
		t.Fatalf("%q", got)
	}
	f.Allocate(2) // never shrinks
	if n, _ := f.Size(); n != 8 {
		t.Fatal(n)
	}
	write(t, f, []byte("z"), 12) // a gap reads as zeros
	if got := content(t, fsys, "/f"); !bytes.Equal(got[8:], []byte("\x00\x00\x00\x00z")) {
		t.Fatalf("%q", got)
	}
}

// image makes a one-file FS whose file has durable content d and current
// content c.
func image(t *testing.T, d, c []byte) *crashfs.FS {
	t.Helper()
	fsys := crashfs.New()
	if err := fsys.WriteFile("/f", d); err != nil {
		t.Fatal(err)
	}
	f, _ := fsys.OpenFile("/f", os.O_RDWR, 0)
	if len(c) < len(d) {
		f.Truncate(int64(len(c)))
	}
	write(t, f, c, 0)
	return fsys
}

func TestInjectors(t *testing.T) {
	d := bytes.Repeat([]byte{'d'}, 1000)
	c := bytes.Clone(d)
	for i := 100; i < 900; i++ {
		c[i] = 'c'
	}
	c = append(c, bytes.Repeat([]byte{'c'}, 200)...) // 1200 bytes, dirty [100, 1200)
	fsys := image(t, d, c)

	if got := content(t, fsys.Crash(crashfs.DropUnsynced()), "/f"); !bytes.Equal(got, d) {
		t.Fatal("DropUnsynced")
	}
	if got := content(t, fsys.Crash(crashfs.TearAt(512)), "/f"); len(got) != 1024 || !bytes.Equal(got, c[:1024]) {
		t.Fatalf("TearAt(512) should keep the first 1024 bytes, got %d", len(got))
	}
	if got := content(t, fsys.Crash(crashfs.TearAt(4096)), "/f"); !bytes.Equal(got, d) {
		t.Fatal("TearAt(4096) inside one block should lose the whole write")
	}
	got := content(t, fsys.Crash(crashfs.ZeroExtend()), "/f")
	if len(got) != 1200 || !bytes.Equal(got[:100], d[:100]) || bytes.ContainsFunc(got[100:], func(r rune) bool { return r != 0 }) {
		t.Fatal("ZeroExtend")
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for range 100 {
		got := content(t, fsys.Crash(crashfs.KeepRandomPrefix(rng)), "/f")
		// Some prefix p of the dirty range made it: got = c[:p] + d[p:].
		p := 0
		for p < len(got) && p < len(c) && got[p] == c[p] {
			p++
		}
		want := crashfs.FileImage{Durable: d, Current: c}.MergeAt(p)
		if p < 100 || !bytes.Equal(got, want) {
			t.Fatalf("KeepRandomPrefix: not a prefix merge (p=%d)", p)
		}
	}

	flip := crashfs.FlipBitAt("/f", 5, 2)
	got = content(t, fsys.Crash(flip), "/f")
	want := bytes.Clone(d)
	want[5] ^= 4
	if !bytes.Equal(got, want) {
		t.Fatal("FlipBitAt")
	}
	rf := crashfs.FlipBit(rng)
	got = content(t, fsys.Crash(rf), "/f")
	diff := 0
	for i := range got {
		if got[i] != d[i] {
			diff++
			if i != int(rf.Offset) || got[i]^d[i] != 1<<rf.Bit {
				t.Fatalf("flip at %d, reported %s", i, rf.Name())
			}
		}
	}
	if diff != 1 || rf.Path != "/f" {
		t.Fatalf("FlipBit changed %d bytes (%s)", diff, rf.Name())
	}
	both := crashfs.Then(crashfs.KeepAll(), crashfs.FlipBitAt("/f", 1100, 0))
	got = content(t, fsys.Crash(both), "/f")
	if len(got) != 1200 || got[1100] != 'c'^1 {
		t.Fatal("Then")
	}
}

func TestFailuresAndPowerCut(t *testing.T) {
	fsys := crashfs.New()
	f := create(t, fsys, "/f")
	fsys.FailWriteAfter(2)
	if _, err := f.WriteAt([]byte("a"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("b"), 1); !errors.Is(err, crashfs.ErrInjected) {
		t.Fatalf("second write: %v", err)
	}
	if _, err := f.WriteAt([]byte("c"), 1); err != nil {
		t.Fatal("only the nth write fails")
	}
	fsys.FailSyncAfter(1)
	if err := f.Sync(); !errors.Is(err, crashfs.ErrInjected) {
		t.Fatalf("sync: %v", err)
	}
	fsys.SyncDir("/")
	if got := content(t, fsys.Crash(nil), "/f"); len(got) != 0 {
		t.Fatal("a failed sync made data durable")
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}

	// Cut the power at the 2nd mutating call from now.
	base := fsys.Ops()
	fsys.CutPowerAt(2, crashfs.DropUnsynced())
	write(t, f, []byte("zz"), 0) // call 1: fine, unsynced
	if err := f.Sync(); !errors.Is(err, crashfs.ErrPowerCut) {
		t.Fatalf("call 2: %v", err)
	}
	if _, err := f.WriteAt([]byte("x"), 0); !errors.Is(err, crashfs.ErrPowerCut) {
		t.Fatal("calls after the cut must fail")
	}
	op, n, ok := fsys.CutOp()
	if !ok || op.Kind != crashfs.OpSync || n != base+2 {
		t.Fatalf("cut at %v #%d %v", op, n, ok)
	}
	after := fsys.AfterCrash()
	if after == nil || string(content(t, after, "/f")) != "ac" {
		t.Fatalf("image %v", after)
	}
	// The image is a live FS.
	g, err := after.OpenFile("/f", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	write(t, g, []byte("new"), 0)
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
}
