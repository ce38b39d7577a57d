package access

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/saga-supervisor/saga-supervisor/internal/secretfile"
)

// Login is one identity that needs a password: the credential Name (the
// file CredentialsDir/<Name> holds its password in clear) and the
// usernames that log in with it. The supervisor is one Login with three
// usernames (S, S+EstopSuffix, S+DevicesSuffix); an agent or a device user
// is one with one.
type Login struct {
	Name  string
	Users []string
}

// EnsureLogins makes sure every username of logins is in the password file
// at passwdPath, creating the file (and its directory, mode 0700) if
// needed. A login none of whose usernames is in the file gets a fresh
// password (GeneratePassword), written in clear to credsDir/<Name> (mode
// 0600, the directory 0700) for the local tools to read, unless that file
// already holds one, which is then used. Existing entries are never
// changed: to rotate a password, delete the user's line (and its
// credentials file) and start again. It returns the usernames it added.
//
// The clear-text files are what let `run` and the demo work with no set-up:
// anyone who can read the data directory can act as those users, so the
// directory must be as private as the journal (docs/SECURITY.md).
func EnsureLogins(passwdPath, credsDir string, logins []Login) (added []string, err error) {
	var (
		existing []byte
		have     = map[string]bool{}
	)
	switch p, err := LoadPasswords(passwdPath); {
	case err == nil:
		for _, u := range p.Users() {
			have[u] = true
		}
		if existing, err = os.ReadFile(passwdPath); err != nil {
			return nil, fmt.Errorf("password file: %w", err)
		}
	case errors.Is(err, fs.ErrNotExist):
	default:
		return nil, err
	}
	var lines bytes.Buffer
	for _, l := range logins {
		var missing []string
		for _, u := range l.Users {
			if err := ValidUser(u); err != nil {
				return nil, fmt.Errorf("login %s: %w", l.Name, err)
			}
			if !have[u] {
				missing = append(missing, u)
				have[u] = true // a user listed twice is added once
			}
		}
		if len(missing) == 0 {
			continue
		}
		pw, err := credential(credsDir, l.Name)
		if err != nil {
			return nil, err
		}
		for _, u := range missing {
			h, err := HashPassword(pw)
			if err != nil {
				return nil, err
			}
			lines.WriteString(u + ":" + h + "\n")
			added = append(added, u)
		}
	}
	if len(added) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(filepath.Dir(passwdPath), 0o700); err != nil {
		return nil, fmt.Errorf("password file: %w", err)
	}
	if len(existing) > 0 && existing[len(existing)-1] != '\n' {
		existing = append(existing, '\n')
	}
	if err := writeAtomic(passwdPath, append(existing, lines.Bytes()...), 0o600); err != nil {
		return nil, err
	}
	return added, nil
}

// credential returns the clear-text password of name in dir, creating it
// if there is none.
func credential(dir, name string) (string, error) {
	if err := ValidUser(name); err != nil {
		return "", fmt.Errorf("credentials: %w", err)
	}
	path := filepath.Join(dir, name)
	if b, err := ReadSecret(path); err == nil {
		return b, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	pw, err := GeneratePassword()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("credentials: %w", err)
	}
	if err := writeAtomic(path, []byte(pw+"\n"), 0o600); err != nil {
		return "", err
	}
	return pw, nil
}

// ReadSecret reads a file holding one password (or token) and nothing
// else, refusing one that group or others may read (package secretfile).
func ReadSecret(path string) (string, error) { return secretfile.Read(path) }
