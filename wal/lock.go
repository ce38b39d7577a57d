package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrLocked is matched (errors.Is) by the error of an Open or TruncateAt
// on a journal that another Log — in this process or another — holds. It
// names the directory and, when known, the holder's pid.
var ErrLocked = errors.New("wal: journal is owned by another process (or another Log of this one)")

// LockName is the lock file inside the journal directory (OSFS).
const LockName = "LOCK"

// Locker is implemented by an FS that can lock a journal directory against
// a second owner. Open takes the lock before it reads, repairs or creates
// anything, and the Log holds it until Close; TruncateAt holds it while it
// cuts. Verify and Scan never take it: they only read, and must work
// beside the daemon that holds it. An FS without Locker is not locked.
type Locker interface {
	// Lock takes dir exclusively without waiting: if it is held, Lock
	// returns an error matching ErrLocked at once and changes nothing.
	// The returned func releases the lock.
	Lock(dir string) (unlock func() error, err error)
}

// lockDir takes dir's lock if fsys can lock; unlock is never nil.
func lockDir(fsys FS, dir string) (unlock func() error, err error) {
	lk, ok := fsys.(Locker)
	if !ok {
		return func() error { return nil }, nil
	}
	return lk.Lock(dir)
}

// Lock takes an exclusive flock(2) on DIR/LOCK. The kernel drops it when
// the process dies, SIGKILL included, so a crash never leaves a stale lock;
// a flock is per open file description, so a second Open in the same
// process is refused too. The holder's pid is written into the file for
// the operator's error message only: the flock decides.
func (OSFS) Lock(dir string) (func() error, error) {
	path := filepath.Join(dir, LockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, filePerm)
	if err != nil {
		return nil, fmt.Errorf("wal: lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			holder, _ := os.ReadFile(path)
			pid := strings.TrimSpace(string(holder))
			if pid == "" {
				pid = "unknown"
			}
			return nil, fmt.Errorf("%w (%s, pid %s)", ErrLocked, dir, pid)
		}
		return nil, fmt.Errorf("wal: lock %s: %w", path, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return f.Close, nil // closing the descriptor releases the flock
}
