//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sim

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive, non-blocking flock on f. flock rather than
// fcntl locks because an fcntl lock belongs to the process and would let a
// second World in the same process open the file; a flock belongs to the open
// file, and the kernel releases it when the holder dies, even by SIGKILL.
func lockFile(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var lerr error
	if err := rc.Control(func(fd uintptr) {
		lerr = syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB)
	}); err != nil {
		return err
	}
	return lerr
}
