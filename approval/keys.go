package approval

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
)

// The first word of a key file's line.
const (
	pubTag  = "ed25519"
	privTag = "ed25519-private"
)

// maxKeyFile bounds a key file read: a key line is under 100 bytes.
const maxKeyFile = 4096

// GenerateKey returns a new key pair.
func GenerateKey() (ed25519.PublicKey, ed25519.PrivateKey, error) {
	return ed25519.GenerateKey(rand.Reader)
}

// FormatPublicKey returns a public key file's line (with its newline);
// comment, if not empty, follows the key.
func FormatPublicKey(pub ed25519.PublicKey, comment string) []byte {
	line := pubTag + " " + base64.StdEncoding.EncodeToString(pub)
	if comment = strings.TrimSpace(strings.Map(noControl, comment)); comment != "" {
		line += " " + comment
	}
	return []byte(line + "\n")
}

func noControl(r rune) rune {
	if r < 0x20 || r == 0x7f {
		return ' '
	}
	return r
}

// FormatPrivateKey returns a private key file's line (with its newline).
func FormatPrivateKey(priv ed25519.PrivateKey) []byte {
	return []byte(privTag + " " + base64.StdEncoding.EncodeToString(priv.Seed()) + "\n")
}

// ParsePublicKey reads a public key file's contents.
func ParsePublicKey(data []byte) (ed25519.PublicKey, error) {
	b, err := parseKeyLine(data, pubTag, true)
	if err != nil {
		return nil, err
	}
	if len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("the key is %d bytes, want %d", len(b), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}

// ParsePrivateKey reads a private key file's contents.
func ParsePrivateKey(data []byte) (ed25519.PrivateKey, error) {
	b, err := parseKeyLine(data, privTag, false)
	if err != nil {
		return nil, err
	}
	if len(b) != ed25519.SeedSize {
		return nil, fmt.Errorf("the seed is %d bytes, want %d", len(b), ed25519.SeedSize)
	}
	return ed25519.NewKeyFromSeed(b), nil
}

func parseKeyLine(data []byte, tag string, comment bool) ([]byte, error) {
	line := strings.TrimRight(string(data), "\r\n")
	if strings.ContainsAny(line, "\r\n\x00") {
		return nil, errors.New("holds more than one line")
	}
	fields := strings.Fields(line)
	if len(fields) < 2 || fields[0] != tag || (!comment && len(fields) > 2) {
		want := "%q and the base64 key"
		if !comment {
			want = "%q and the base64 seed"
		}
		if len(fields) > 0 && (fields[0] == pubTag || fields[0] == privTag) && fields[0] != tag {
			return nil, fmt.Errorf("holds an %s key, want "+want, fields[0], tag)
		}
		return nil, fmt.Errorf("want one line: "+want, tag)
	}
	b, err := base64.StdEncoding.Strict().DecodeString(fields[1])
	if err != nil {
		return nil, fmt.Errorf("the key is not base64: %v", err)
	}
	return b, nil
}

// LoadPublicKey reads a public key file. Public keys are not secret: the
// file's mode is not checked.
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	return loadKey(path, false, ParsePublicKey)
}

// LoadPrivateKey reads a private key file, which must be a regular file
// that group and others cannot access (0600 or 0400).
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	return loadKey(path, true, ParsePrivateKey)
}

// loadKey reads the key file at path (see readRegular; secret: a private
// key's) and parses it, naming the file when it does not parse.
func loadKey[K ed25519.PublicKey | ed25519.PrivateKey](path string, secret bool, parse func([]byte) (K, error)) (K, error) {
	data, err := readRegular(path, secret)
	if err != nil {
		return nil, err
	}
	k, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// readRegular reads a small regular file (never a device or FIFO: opening
// some has effects, or blocks), checking a secret's mode.
func readRegular(path string, secret bool) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	check := func(st os.FileInfo) error {
		if !st.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file", path)
		}
		if perm := st.Mode().Perm(); secret && perm&0o077 != 0 {
			return fmt.Errorf("%s has mode %04o: a private key must not be accessible to group or others (chmod 600 %s)", path, perm, path)
		}
		return nil
	}
	if err := check(st); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fst, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !os.SameFile(st, fst) {
		return nil, fmt.Errorf("%s changed while being read", path)
	}
	if err := check(fst); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxKeyFile {
		return nil, fmt.Errorf("%s is larger than %d bytes: not a key file", path, maxKeyFile)
	}
	return b, nil
}

// WriteKeyPair writes a new key pair: the private key to path (mode 0600)
// and the public key to path+".pub" (mode 0644). It refuses to overwrite
// either file, and leaves neither behind when it fails.
func WriteKeyPair(path string, pub ed25519.PublicKey, priv ed25519.PrivateKey, comment string) error {
	pubPath := path + ".pub"
	if _, err := os.Lstat(pubPath); err == nil {
		return fmt.Errorf("%s exists: not overwritten", pubPath)
	}
	if err := writeNew(path, FormatPrivateKey(priv), 0o600); err != nil {
		return err
	}
	if err := writeNew(pubPath, FormatPublicKey(pub, comment), 0o644); err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s exists: not overwritten", path)
		}
		return err
	}
	err = f.Chmod(mode) // exactly mode, whatever the umask
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}
