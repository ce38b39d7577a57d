package nodelay

import (
	"net"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The option is set by the dialer before connect: read it back from the
// socket of a dialled connection.
func TestDialerSetsNoDelay(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	seen := false
	d := Dialer(0)
	inner := d.Control
	d.Control = func(network, address string, c syscall.RawConn) error {
		if err := inner(network, address, c); err != nil {
			return err
		}
		return c.Control(func(fd uintptr) {
			v, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY)
			seen = err == nil && v != 0
		})
	}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if !seen {
		t.Fatal("TCP_NODELAY was not set before connect")
	}
}
