package secretfile

import (
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
