//go:build linux

package bench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The slow SD card of bench pi, without a line of code in the daemon: the
// daemon is the unmodified binary, started by a launcher (`saga-supervisor
// bench pi-exec`, hidden) that joins the daemon's cgroup, installs a
// seccomp filter that hands every fsync and fdatasync of the process to a
// listener (SECCOMP_RET_USER_NOTIF), passes the listener to the bench over
// a socket, and execs the daemon. The bench holds each such call for the
// delay it drew, then lets the kernel carry it out (
// SECCOMP_USER_NOTIF_FLAG_CONTINUE): the daemon's thread sits in the
// system call for the delay and then for the real fsync, as on a card that
// takes milliseconds to flush. No configuration key, environment variable
// or flag of the daemon enables it, so no daemon can slow its own journal
// by accident: only a process that installed the filter before exec'ing it
// can, and it must then answer every fsync or the daemon's journal stops.
// (Linux 5.5 or later: the filter's CONTINUE answer.)

const launchCmd = "pi-exec"

// launchArgs are the launcher's arguments: the cgroup to join ("" none),
// whether to install the filter (its listener then goes over fd 3), and
// the daemon's command line.
func launchArgs(procs string, filter bool, daemon []string) []string {
	return append([]string{"bench", launchCmd, procs, strconv.FormatBool(filter), "--"}, daemon...)
}

// runLaunch is the launcher: `bench pi-exec PROCS FILTER -- BIN ARGS...`.
// It never returns on success (it becomes the daemon).
func runLaunch(args []string, _ io.Writer) error {
	if len(args) < 4 || args[2] != "--" {
		return errors.New("bench pi-exec: internal to bench pi")
	}
	procs, filter, daemon := args[0], args[1] == "true", args[3:]
	// One thread from here on: the filter is installed on this thread,
	// and execve keeps only this thread and its filter.
	runtime.LockOSThread()
	if procs != "" {
		if err := os.WriteFile(procs, []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			return fmt.Errorf("bench pi-exec: joining the cgroup (%s): %w", procs, err)
		}
	}
	if filter {
		fd, err := installSyncFilter()
		if err != nil {
			return fmt.Errorf("bench pi-exec: %w", err)
		}
		sock := os.NewFile(3, "listener socket")
		if err := unix.Sendmsg(int(sock.Fd()), []byte{1}, unix.UnixRights(fd), nil, 0); err != nil {
			return fmt.Errorf("bench pi-exec: handing the seccomp listener over: %w", err)
		}
		unix.Close(fd)
		sock.Close()
	}
	bin, err := exec.LookPath(daemon[0])
	if err != nil {
		return fmt.Errorf("bench pi-exec: %w", err)
	}
	return fmt.Errorf("bench pi-exec: exec %s: %w", bin, syscall.Exec(bin, daemon, os.Environ()))
}

// auditArch is this architecture's AUDIT_ARCH, which the filter checks
// first (a system call of another ABI has other numbers).
func auditArch() (uint32, error) {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, nil
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, nil
	case "arm":
		return unix.AUDIT_ARCH_ARM, nil
	case "386":
		return unix.AUDIT_ARCH_I386, nil
	case "riscv64":
		return unix.AUDIT_ARCH_RISCV64, nil
	}
	return 0, fmt.Errorf("no seccomp architecture known for %s", runtime.GOARCH)
}

// installSyncFilter installs, on the calling thread, a filter that sends
// fsync and fdatasync to a listener and allows everything else, and
// returns the listener.
func installSyncFilter() (int, error) {
	arch, err := auditArch()
	if err != nil {
		return -1, err
	}
	const (
		ldAbsW = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeqK   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		retK   = unix.BPF_RET | unix.BPF_K
	)
	prog := []unix.SockFilter{
		{Code: ldAbsW, K: 4}, // seccomp_data.arch
		{Code: jeqK, Jt: 0, Jf: 3, K: arch},
		{Code: ldAbsW, K: 0}, // seccomp_data.nr
		{Code: jeqK, Jt: 2, Jf: 0, K: uint32(unix.SYS_FSYNC)},
		{Code: jeqK, Jt: 1, Jf: 0, K: uint32(unix.SYS_FDATASYNC)},
		{Code: retK, K: unix.SECCOMP_RET_ALLOW},
		{Code: retK, K: unix.SECCOMP_RET_USER_NOTIF},
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return -1, fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	// Killable once received: a signal to the daemon's thread (the Go
	// runtime's preemption) then neither restarts the call nor delays it twice.
	for _, flags := range []uintptr{unix.SECCOMP_FILTER_FLAG_NEW_LISTENER | unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER} {
		fd, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
		runtime.KeepAlive(prog)
		if errno == 0 {
			return int(fd), nil
		}
		// EINVAL: a kernel before 5.5 (or without the killable flag);
		// ENOSYS: no seccomp at all, as under qemu-user, which does not
		// pass seccomp through to the host kernel.
		if errno != unix.EINVAL && errno != unix.ENOSYS {
			return -1, fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER, NEW_LISTENER): %w", errno)
		}
		err = errno
	}
	return -1, fmt.Errorf("seccomp user notification is not available (Linux 5.5 or later; not in this container or under qemu-user?): %w", err)
}

// seccompNotif and seccompNotifResp are the kernel's struct seccomp_notif
// and struct seccomp_notif_resp.
type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Nr    int32
	Arch  uint32
	IP    uint64
	Args  [6]uint64
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// syncHolder answers a daemon's fsyncs after their delay.
type syncHolder struct {
	fd      int
	delay   fsyncDelay
	held    atomic.Int64 // fsyncs held
	heldNs  atomic.Int64 // delay added in all
	stop    chan struct{}
	wg      sync.WaitGroup
	failure atomic.Pointer[error]
}

// receiveListener takes the launcher's seccomp listener from sock.
func receiveListener(sock *os.File, timeout time.Duration) (int, error) {
	done := make(chan struct{})
	var fd int
	var err error
	go func() {
		defer close(done)
		buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(4))
		n, oobn, _, _, rerr := unix.Recvmsg(int(sock.Fd()), buf, oob, 0)
		if rerr != nil {
			err = rerr
			return
		}
		if n == 0 {
			err = errors.New("the launcher ended before handing over the seccomp listener")
			return
		}
		msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
		if perr != nil || len(msgs) != 1 {
			err = fmt.Errorf("no file descriptor came with the launcher's message (%v)", perr)
			return
		}
		fds, perr := unix.ParseUnixRights(&msgs[0])
		if perr != nil || len(fds) != 1 {
			err = fmt.Errorf("no file descriptor came with the launcher's message (%v)", perr)
			return
		}
		fd = fds[0]
	}()
	select {
	case <-done:
		return fd, err
	case <-time.After(timeout):
		sock.Close()
		<-done
		return -1, fmt.Errorf("no seccomp listener from the launcher within %v", timeout)
	}
}

// holdSyncs starts answering the listener fd's notifications: each after
// a delay drawn from delay, on a goroutine of its own, so fsyncs of
// several threads are held side by side.
func holdSyncs(fd int, delay fsyncDelay) *syncHolder {
	h := &syncHolder{fd: fd, delay: delay, stop: make(chan struct{})}
	h.wg.Add(1)
	go h.loop()
	return h
}

func (h *syncHolder) loop() {
	defer h.wg.Done()
	for {
		select {
		case <-h.stop:
			return
		default:
		}
		fds := []unix.PollFd{{Fd: int32(h.fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 100)
		if err == unix.EINTR || n == 0 {
			continue
		}
		if err != nil {
			h.fail(fmt.Errorf("poll on the seccomp listener: %w", err))
			return
		}
		if fds[0].Revents&unix.POLLHUP != 0 && fds[0].Revents&unix.POLLIN == 0 {
			return // the daemon is gone
		}
		var req seccompNotif
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(h.fd), uintptr(unix.SECCOMP_IOCTL_NOTIF_RECV), uintptr(unsafe.Pointer(&req))); errno != 0 {
			if errno == unix.ENOENT || errno == unix.EINTR {
				continue // the caller was interrupted or is gone
			}
			h.fail(fmt.Errorf("SECCOMP_IOCTL_NOTIF_RECV: %w", errno))
			return
		}
		d := h.delay.draw()
		h.held.Add(1)
		h.heldNs.Add(int64(d))
		h.wg.Add(1)
		time.AfterFunc(d, func() {
			defer h.wg.Done()
			resp := seccompNotifResp{ID: req.ID, Flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}
			if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(h.fd), uintptr(unix.SECCOMP_IOCTL_NOTIF_SEND), uintptr(unsafe.Pointer(&resp))); errno != 0 && errno != unix.ENOENT {
				h.fail(fmt.Errorf("SECCOMP_IOCTL_NOTIF_SEND: %w", errno))
			}
		})
	}
}

func (h *syncHolder) fail(err error) { h.failure.CompareAndSwap(nil, &err) }

// err is the first failure answering the daemon's fsyncs.
func (h *syncHolder) err() error {
	if p := h.failure.Load(); p != nil {
		return *p
	}
	return nil
}

// close stops answering (once the daemon is gone) and closes the listener.
func (h *syncHolder) close() {
	close(h.stop)
	h.wg.Wait()
	unix.Close(h.fd)
}
