package access

import (
	"bufio"
	"bytes"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/saga-supervisor/saga-supervisor/api"
)

// The password hash mosquitto 2.0's mosquitto_passwd writes by default:
//
//	user:$7$<iterations>$<base64 salt>$<base64 hash>
//
// hash = PBKDF2-HMAC-SHA512(password, salt, iterations, 64 bytes), with a
// 12-byte random salt and 101 iterations; base64 is the standard alphabet
// with padding. Mosquitto 1.x wrote (and mosquitto_passwd -H sha512 still
// writes) user:$6$<base64 salt>$<base64 SHA-512(password || salt)>.
const (
	hashIterations = 101 // mosquitto_passwd's default
	saltBytes      = 12  // mosquitto_passwd's salt
	keyBytes       = sha512.Size

	// maxIterations bounds the PBKDF2 work one Check may cost, so a file
	// cannot make every connect attempt take seconds.
	maxIterations = 1_000_000
	// maxSaltBytes bounds a salt read from a file.
	maxSaltBytes = 64
	// maxLineBytes bounds a line of the file (a mosquitto_passwd line is
	// about 140 bytes plus the username).
	maxLineBytes = 4096
)

type hashKind uint8

const (
	kindPBKDF2 hashKind = iota // $7$
	kindSHA512                 // $6$
)

// entry is one user's parsed hash.
type entry struct {
	kind       hashKind
	iterations int
	salt, hash []byte
}

func (e *entry) sum(password string) []byte {
	switch e.kind {
	case kindSHA512:
		h := sha512.New()
		h.Write([]byte(password))
		h.Write(e.salt)
		return h.Sum(nil)
	default:
		k, err := pbkdf2.Key(sha512.New, password, e.salt, e.iterations, keyBytes)
		if err != nil { // only for parameters parse refuses
			return nil
		}
		return k
	}
}

// Passwords is a parsed password file: usernames and their salted hashes.
// It never holds a plaintext password. The zero value holds no user.
type Passwords struct {
	users map[string]*entry
}

// dummy is what Check hashes an unknown user's attempt against, so that an
// unknown user costs the same time as a known one with default parameters.
var dummy = &entry{kind: kindPBKDF2, iterations: hashIterations, salt: make([]byte, saltBytes), hash: make([]byte, keyBytes)}

// Check reports whether password is user's password. It takes the same time
// for an unknown user as for a known one hashed with mosquitto_passwd's
// defaults (the work is done against a dummy entry), and compares hashes in
// constant time. A user whose entry uses other parameters ($6$, another
// iteration count) takes a different time: that reveals only how that
// user's entry was hashed.
func (p *Passwords) Check(user, password string) bool {
	e, known := (*entry)(nil), false
	if p != nil {
		e, known = p.users[user]
	}
	if !known {
		e = dummy
	}
	sum := e.sum(password)
	ok := len(sum) == len(e.hash) && subtle.ConstantTimeCompare(sum, e.hash) == 1
	return ok && known
}

// Users returns the usernames in the file, sorted.
func (p *Passwords) Users() []string {
	if p == nil {
		return nil
	}
	out := make([]string, 0, len(p.users))
	for u := range p.users {
		out = append(out, u)
	}
	slices.Sort(out)
	return out
}

// Has reports whether user is in the file.
func (p *Passwords) Has(user string) bool {
	if p == nil {
		return false
	}
	_, ok := p.users[user]
	return ok
}

// ValidUser reports why user cannot be a username here, or nil. A username
// is also a client id and (for an agent) a topic level, so it must be a
// valid API name (api.ValidName: no '/', '+', '#', printable UTF-8), and it
// must hold neither ':' (the password file's separator) nor white space.
func ValidUser(user string) error {
	if err := api.ValidName(user); err != nil {
		return fmt.Errorf("username: %w", err)
	}
	if i := strings.IndexFunc(user, func(r rune) bool { return r == ':' || unicode.IsSpace(r) }); i >= 0 {
		return fmt.Errorf("username %q holds %q, which a password file cannot hold", user, user[i:i+1])
	}
	return nil
}

// ParsePasswords reads a password file in mosquitto's format: one
// "user:hash" a line, hash a $7$ (PBKDF2-SHA512) or $6$ (salted SHA-512)
// entry. Blank lines and lines starting with '#' are skipped. It refuses,
// naming the line, a malformed line, a plaintext or unknown hash, an
// invalid username (see ValidUser) and a user listed twice.
func ParsePasswords(r io.Reader) (*Passwords, error) {
	p := &Passwords{users: map[string]*entry{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 512), maxLineBytes)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		user, hash, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("password file: line %d: no ':' between username and hash", n)
		}
		if err := ValidUser(user); err != nil {
			return nil, fmt.Errorf("password file: line %d: %w", n, err)
		}
		if _, dup := p.users[user]; dup {
			return nil, fmt.Errorf("password file: line %d: user %q listed twice", n, user)
		}
		e, err := parseHash(hash)
		if err != nil {
			return nil, fmt.Errorf("password file: line %d (user %q): %w", n, user, err)
		}
		p.users[user] = e
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("password file: line %d: longer than %d bytes", n+1, maxLineBytes)
		}
		return nil, fmt.Errorf("password file: %w", err)
	}
	return p, nil
}

func parseHash(h string) (*entry, error) {
	f := strings.Split(h, "$")
	// "$7$101$salt$hash" splits into "", "7", "101", salt, hash.
	if len(f) < 2 || f[0] != "" {
		return nil, errors.New("hash is not a $7$ or $6$ entry (a plaintext password? run mosquitto_passwd -U on the file)")
	}
	e := &entry{}
	var salt, sum string
	switch {
	case f[1] == "7" && len(f) == 5:
		it, err := strconv.Atoi(f[2])
		if err != nil || it < 1 || it > maxIterations || f[2] != strconv.Itoa(it) {
			return nil, fmt.Errorf("$7$ entry: iteration count %q is not an integer from 1 to %d", f[2], maxIterations)
		}
		e.kind, e.iterations, salt, sum = kindPBKDF2, it, f[3], f[4]
	case f[1] == "6" && len(f) == 4:
		e.kind, salt, sum = kindSHA512, f[2], f[3]
	case f[1] == "7" || f[1] == "6":
		return nil, fmt.Errorf("$%s$ entry has %d '$'-separated fields, want %d", f[1], len(f)-1, map[string]int{"7": 4, "6": 3}[f[1]])
	default:
		return nil, fmt.Errorf("hash type $%.8s$ is not $7$ (PBKDF2-SHA512) or $6$ (SHA-512)", f[1])
	}
	var err error
	if e.salt, err = base64.StdEncoding.DecodeString(salt); err != nil || len(e.salt) == 0 || len(e.salt) > maxSaltBytes {
		return nil, fmt.Errorf("salt is not 1 to %d bytes of base64", maxSaltBytes)
	}
	if e.hash, err = base64.StdEncoding.DecodeString(sum); err != nil || len(e.hash) != keyBytes {
		return nil, fmt.Errorf("hash is not %d bytes of base64", keyBytes)
	}
	return e, nil
}

// LoadPasswords reads the password file at path (see ParsePasswords). It
// refuses a file that group or others may read or write (mode&0o077 != 0),
// as ssh does a private key: the hashes are cheap to attack offline
// (mosquitto_passwd uses 101 PBKDF2 iterations). It refuses a symbolic link
// too (it names the link), so the mode checked is the file's own and a link
// cannot swap the file from under a reader; give the real path.
func LoadPasswords(path string) (*Passwords, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("password file: %w", err)
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		return nil, fmt.Errorf("password file %s is a symbolic link: give the file's own path", path)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("password file %s is not a regular file (%v)", path, fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("password file %s has mode %#o: group and others must have no access (chmod 600 %s)", path, perm, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("password file: %w", err)
	}
	defer f.Close()
	p, err := ParsePasswords(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// HashPassword hashes password as mosquitto_passwd 2.0 does by default:
// "$7$101$<base64 12-byte salt>$<base64 64-byte PBKDF2-HMAC-SHA512 key>".
func HashPassword(password string) (string, error) {
	salt := make([]byte, saltBytes)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("hash password: %w", err)
	}
	k, err := pbkdf2.Key(sha512.New, password, salt, hashIterations, keyBytes)
	if err != nil {
		return "", fmt.Errorf("hash password: %w", err)
	}
	return "$7$" + strconv.Itoa(hashIterations) + "$" + base64.StdEncoding.EncodeToString(salt) + "$" + base64.StdEncoding.EncodeToString(k), nil
}

// WritePasswords writes a password file holding users (username →
// plaintext password), each hashed with HashPassword, sorted by username,
// mode 0600. The write is atomic: a temporary file in the same directory
// is written, synced and renamed over path, and the directory synced, so a
// crash leaves the old file or the new one, never a torn one. It refuses
// an invalid username (ValidUser) and an empty password.
func WritePasswords(path string, users map[string]string) error {
	names := make([]string, 0, len(users))
	for u := range users {
		if err := ValidUser(u); err != nil {
			return fmt.Errorf("password file %s: %w", path, err)
		}
		if users[u] == "" {
			return fmt.Errorf("password file %s: user %q has an empty password", path, u)
		}
		names = append(names, u)
	}
	slices.Sort(names)
	var buf bytes.Buffer
	for _, u := range names {
		h, err := HashPassword(users[u])
		if err != nil {
			return err
		}
		buf.WriteString(u + ":" + h + "\n")
	}
	return writeAtomic(path, buf.Bytes(), 0o600)
}

func writeAtomic(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("password file %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
			err = fmt.Errorf("password file %s: %w", path, err)
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// GeneratePassword returns a random password: 32 bytes from crypto/rand
// (256 bits) in unpadded URL-safe base64, 43 characters that need no
// quoting in a shell, a URL or YAML.
func GeneratePassword() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate password: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
