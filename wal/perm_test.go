package wal_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/wal"
	"github.com/saga-supervisor/saga-supervisor/wal/crashfs"
)

// modes lists the permission bits of dir and of every entry in it.
func modes(t *testing.T, dir string) map[string]fs.FileMode {
	t.Helper()
	m := map[string]fs.FileMode{}
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	m["."] = st.Mode().Perm()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = info.Mode().Perm()
	}
	return m
}

// A new journal is private: its directory (and the parents Open creates)
// 0700, every segment 0600 — whatever the umask lets through.
func TestNewJournalIsPrivate(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no POSIX modes")
	}
	root := filepath.Join(t.TempDir(), "saga-data")
	dir := filepath.Join(root, "journal")
	l := mustOpen(t, dir, wal.Options{SegmentSize: 4096})
	for range 40 { // past a rollover: prepared segments too
		if _, err := l.Append(1, make([]byte, 200)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(root)
	if err != nil || st.Mode().Perm()&0o077 != 0 {
		t.Errorf("parent created with %v (%v), want 0700", st.Mode().Perm(), err)
	}
	m := modes(t, dir)
	if len(m) < 3 {
		t.Fatalf("no rollover: %v", m)
	}
	for name, perm := range m {
		want := fs.FileMode(0o600)
		if name == "." {
			want = 0o700
		}
		if perm != want {
			t.Errorf("%s has mode %04o, want %04o", name, perm, want)
		}
	}
}

// An existing journal more open than that (an older version made it
// 0755/0644) is tightened when opened, not refused: its records are kept
// and read. Bits already within the limits stay as they were, and a
// subdirectory keeps its owner's search bit.
func TestOpenTightensJournalPermissions(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no POSIX modes")
	}
	dir := filepath.Join(t.TempDir(), "journal")
	l := mustOpen(t, dir, wal.Options{SegmentSize: 4096})
	if _, err := l.Append(1, []byte("kept")); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(dir, "0000000000000001.wal")
	for p, mode := range map[string]fs.FileMode{dir: 0o755, seg: 0o644} {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	ro := filepath.Join(dir, "notes.broken")
	if err := os.WriteFile(ro, []byte("x"), 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ro, 0o444); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, wal.Options{SegmentSize: 4096})
	if rep := l.OpenReport(); rep.LastSeq != 1 {
		t.Errorf("records lost: %+v", rep)
	}
	l.Close()
	m := modes(t, dir)
	for name, want := range map[string]fs.FileMode{".": 0o700, "0000000000000001.wal": 0o600, "notes.broken": 0o400, "sub": 0o700} {
		if m[name] != want {
			t.Errorf("%s has mode %04o after Open, want %04o", name, m[name], want)
		}
	}
}

// failingPermFS is an in-memory FS whose chmod fails.
type failingPermFS struct{ *crashfs.FS }

func (failingPermFS) Restrict(string, fs.FileMode, fs.FileMode) error {
	return errors.New("chmod: operation not permitted")
}

// A journal whose permissions cannot be tightened is not opened.
func TestOpenFailsWhenChmodFails(t *testing.T) {
	_, err := wal.Open("/j", wal.Options{SegmentSize: 1024, FS: failingPermFS{crashfs.New()}})
	if err == nil || !strings.Contains(err.Error(), "restricting the permissions of /j: chmod: operation not permitted") {
		t.Fatalf("Open: %v", err)
	}
}
