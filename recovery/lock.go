package recovery

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrLocked is returned when another process owns the journal.
var ErrLocked = errors.New("recovery: journal is owned by another process")

// LockName is the lock file inside the journal directory.
const LockName = "LOCK"

// dirLock is an exclusive flock(2) on DIR/LOCK. The kernel drops it when the
// process dies, SIGKILL included, so a crash never leaves a stale lock.
type dirLock struct{ f *os.File }

func lockDir(dir string) (*dirLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("recovery: %w", err)
	}
	path := filepath.Join(dir, LockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("recovery: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			holder, _ := os.ReadFile(path)
			return nil, fmt.Errorf("%w (%s, pid %s)", ErrLocked, dir, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("recovery: lock %s: %w", path, err)
	}
	// The pid is for the operator's error message only; the flock decides.
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return &dirLock{f: f}, nil
}

func (l *dirLock) unlock() error {
	if l == nil {
		return nil
	}
	return l.f.Close() // closing the descriptor releases the flock
}
