// Package secretfile reads a file holding one secret — a password, a
// token — the way every part of saga-supervisor must: only a regular file,
// private to its owner (0600 or 0400, as a systemd service keeps them),
// never opened if it is anything else, of one line, small. The config, the
// broker's credentials and ctl all read secrets through it.
package secretfile

import (
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
)

// MaxSize bounds what a secret file may hold: a password or token is
// short, and a path naming a large file by mistake must not be read whole.
const MaxSize = 4096

// Read reads the secret in path. The trailing newline editors add is not
// part of it.
func Read(path string) (string, error) {
	// Stat before opening: opening some device nodes has effects (opening
	// /dev/watchdog arms it), so only a regular file is ever opened.
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if err := CheckMode(path, st); err != nil {
		return "", err
	}
	// O_NONBLOCK: if the path was swapped for a FIFO after the Stat, the
	// open must not hang waiting for a writer.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fst, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !os.SameFile(st, fst) {
		return "", fmt.Errorf("%s changed while being read", path)
	}
	if err := CheckMode(path, fst); err != nil {
		return "", err
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return "", err
	}
	if len(b) > MaxSize {
		return "", fmt.Errorf("%s is larger than %d bytes: not a password or token", path, MaxSize)
	}
	s := strings.TrimRight(string(b), "\r\n")
	switch {
	case s == "":
		return "", fmt.Errorf("%s is empty", path)
	case strings.ContainsAny(s, "\r\n\x00"):
		return "", fmt.Errorf("%s holds more than one line", path)
	}
	return s, nil
}

// Check checks a secret file's type and mode without opening it.
func Check(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	return CheckMode(path, st)
}

// CheckMode refuses anything but a regular file private to its owner.
func CheckMode(path string, st os.FileInfo) error {
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s has mode %04o: a secret must not be accessible to group or others (chmod 600 %s)",
			path, perm, path)
	}
	return nil
}
