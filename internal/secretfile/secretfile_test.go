package secretfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	if s, err := Read(write("ok", "s3cret\n", 0o600)); err != nil || s != "s3cret" {
		t.Fatalf("a good file: %q %v", s, err)
	}
	if s, err := Read(write("ro", "s3cret", 0o400)); err != nil || s != "s3cret" {
		t.Fatalf("a read-only file: %q %v", s, err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, want string
	}{
		{write("loose", "s3cret\n", 0o644), "mode 0644"},
		{write("empty", "\n", 0o600), "is empty"},
		{write("two", "a\nb\n", 0o600), "more than one line"},
		{write("nul", "a\x00b", 0o600), "more than one line"},
		{write("big", strings.Repeat("x", MaxSize+1), 0o600), "larger than"},
		{dir, "not a regular file"},
		{fifo, "not a regular file"}, // never opened: it would block
		{filepath.Join(dir, "missing"), "no such file"},
	} {
		if _, err := Read(c.path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", filepath.Base(c.path), err, c.want)
		}
	}
}

// TestCreate: a new secret file is private, whole and readable by Read; an
// existing one is never replaced.
func TestCreate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "token")
	if err := Create(path, "first-secret"); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %04o, want 0600", st.Mode().Perm())
	}
	if st, err := os.Stat(filepath.Dir(path)); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("directory: %v %v, want mode 0700", st.Mode(), err)
	}
	if s, err := Read(path); err != nil || s != "first-secret" {
		t.Errorf("read back %q %v", s, err)
	}
	err = Create(path, "second-secret")
	if !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), path) {
		t.Errorf("creating over an existing file: %v, want fs.ErrExist naming %s", err, path)
	}
	if s, _ := Read(path); s != "first-secret" {
		t.Errorf("the existing secret was replaced: %q", s)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*")); len(left) != 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
}
