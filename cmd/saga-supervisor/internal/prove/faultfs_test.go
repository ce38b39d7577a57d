package prove

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestSeverableFS checks that every call that writes, syncs or changes a
// directory works until the crash and fails with errSevered after it, and
// that reading still works: the crashed process's disk is frozen, not gone.
func TestSeverableFS(t *testing.T) {
	dir := t.TempDir()
	fsys := &severableFS{}
	name := filepath.Join(dir, "f")
	f, err := fsys.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	calls := []struct {
		name string
		call func() error
	}{
		{"WriteAt", func() error { _, err := f.WriteAt([]byte("abc"), 0); return err }},
		{"Sync", f.Sync},
		{"Truncate", func() error { return f.Truncate(2) }},
		{"Allocate", func() error { return f.Allocate(8) }},
		{"OpenFile for writing", func() error {
			g, err := fsys.OpenFile(name, os.O_WRONLY, 0)
			if err == nil {
				g.Close()
			}
			return err
		}},
		{"MkdirAll", func() error { return fsys.MkdirAll(filepath.Join(dir, "d"), 0o700) }},
		{"Rename", func() error {
			if err := fsys.Rename(name, name+".2"); err != nil {
				return err
			}
			return os.Rename(name+".2", name) // put it back for the next round
		}},
		{"Remove", func() error {
			if err := os.WriteFile(name+".x", nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return fsys.Remove(name + ".x")
		}},
		{"SyncDir", func() error { return fsys.SyncDir(dir) }},
	}
	for _, c := range calls {
		if err := c.call(); err != nil {
			t.Errorf("before the crash, %s: %v", c.name, err)
		}
	}
	fsys.cut.Store(true)
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, errSevered) {
			t.Errorf("after the crash, %s: got %v, want errSevered", c.name, err)
		}
	}
	if _, err := f.ReadAt(make([]byte, 2), 0); err != nil {
		t.Errorf("after the crash, ReadAt: %v", err)
	}
	r, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		t.Fatalf("after the crash, OpenFile for reading: %v", err)
	}
	r.Close()
}
