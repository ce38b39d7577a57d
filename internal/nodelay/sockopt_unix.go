//go:build unix

package nodelay

import "golang.org/x/sys/unix"

func setNoDelay(fd uintptr) error {
	return unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
}
