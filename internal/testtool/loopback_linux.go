package testtool

import (
	"syscall"
	"unsafe"
)

// LoopbackUp brings up lo in the calling process's network namespace: a new
// one has it down, without 127.0.0.1. Tests that run in a namespace of
// their own (so that the documented fixed ports are free however busy the
// machine) call it first.
func LoopbackUp() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var ifr [40]byte // struct ifreq: the name, then the flags (a short)
	copy(ifr[:syscall.IFNAMSIZ-1], "lo")
	flags := (*uint16)(unsafe.Pointer(&ifr[syscall.IFNAMSIZ]))
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCGIFFLAGS, uintptr(unsafe.Pointer(&ifr[0]))); e != 0 {
		return e
	}
	*flags |= syscall.IFF_UP
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCSIFFLAGS, uintptr(unsafe.Pointer(&ifr[0]))); e != 0 {
		return e
	}
	return nil
}
