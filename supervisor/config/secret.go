package config

import (
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
)

// Secret is a password or token. It prints as "[redacted]" (with %v, %s, %q
// and %#v, and when marshalled as text), so a config that is logged or
// served as JSON never shows it; Reveal returns the value.
type Secret string

const redacted = "[redacted]"

// Reveal returns the secret's value.
func (s Secret) Reveal() string { return string(s) }

// String hides the value; an empty secret prints as "" so its absence shows.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString hides the value from %#v as well.
func (s Secret) GoString() string { return fmt.Sprintf("config.Secret(%q)", s.String()) }

// MarshalText hides the value from encoders.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// maxSecretSize bounds what a secret file may hold: a password or token is
// short, and a path naming a large file by mistake must not be read whole.
const maxSecretSize = 4096

// readSecret reads a secret file: a regular file readable by its owner only
// (a systemd service keeps its secrets 0600 or 0400), holding one line. The
// trailing newline editors add is trimmed.
func readSecret(path string) (Secret, error) {
	// Stat before opening: opening some device nodes has effects (opening
	// /dev/watchdog arms it), so only a regular file is ever opened.
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if err := checkSecretMode(path, st); err != nil {
		return "", err
	}
	// O_NONBLOCK: if the path was swapped for a FIFO after the Stat, the
	// open must not hang start-up waiting for a writer.
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
	if err := checkSecretMode(path, fst); err != nil {
		return "", err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretSize+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxSecretSize {
		return "", fmt.Errorf("%s is larger than %d bytes: not a password or token", path, maxSecretSize)
	}
	s := strings.TrimRight(string(b), "\r\n")
	switch {
	case s == "":
		return "", fmt.Errorf("%s is empty", path)
	case strings.ContainsAny(s, "\r\n\x00"):
		return "", fmt.Errorf("%s holds more than one line", path)
	}
	return Secret(s), nil
}

// checkSecretFile checks a secret file's type and mode without opening it.
func checkSecretFile(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	return checkSecretMode(path, st)
}

// checkSecretMode refuses anything but a regular file private to its owner.
func checkSecretMode(path string, st os.FileInfo) error {
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s has mode %04o: a secret must not be accessible to group or others (chmod 600 %s)",
			path, perm, path)
	}
	return nil
}
