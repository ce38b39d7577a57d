package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/saga-supervisor/saga-supervisor/internal/secretfile"
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

// readSecret reads a secret file (package secretfile: a regular file
// private to its owner, one line).
func readSecret(path string) (Secret, error) {
	s, err := secretfile.Read(path)
	return Secret(s), err
}

// checkSecretFile checks a secret file's type and mode without opening it.
func checkSecretFile(path string) error { return secretfile.Check(path) }

// missing reports whether nothing at all is at path (not even a dangling
// link): a generated secret that is yet to be created.
func missing(path string) bool {
	_, err := os.Lstat(path)
	return errors.Is(err, fs.ErrNotExist)
}
