package secretfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Create writes secret, and a newline, to a new file at path, mode 0600
// (its directory created 0700 if missing), and never replaces a file that
// is there: one that exists, even one written at the same moment by
// another process, makes it fail with an error wrapping fs.ErrExist. The
// file appears whole or not at all: it is written and synced under a
// temporary name, then linked to path, which fails rather than overwrite,
// and the directory is synced.
func Create(path, secret string) (err error) {
	return CreateBytes(path, []byte(secret+"\n"))
}

// CreateBytes is Create for content of any shape, written as it is: a
// PEM certificate or key, whose lines Read would refuse.
func CreateBytes(path string, content []byte) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("secret file %s: %w", path, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("secret file %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // on failure; once linked, the file lives on as path
	write := func() error {
		if err := f.Chmod(0o600); err != nil {
			return err
		}
		if _, err := f.Write(content); err != nil {
			return err
		}
		return f.Sync()
	}
	if err := errors.Join(write(), f.Close()); err != nil {
		return fmt.Errorf("secret file %s: %w", path, err)
	}
	if err := os.Link(tmp, path); err != nil {
		return fmt.Errorf("secret file %s: %w", path, err)
	}
	os.Remove(tmp)
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("secret file %s: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("secret file %s: syncing its directory: %w", path, err)
	}
	return nil
}
