// Package nodelay makes the TCP dialers of MQTT clients turn off Nagle's
// algorithm explicitly.
//
// A controller's request and the supervisor's reply are small packets sent
// one at a time, each waiting for the other: exactly the pattern where
// Nagle's algorithm holds a packet back until the previous one is
// acknowledged, and delayed acknowledgements hold that back in turn —
// about 40 ms per round trip on Linux. Go's net package already sets
// TCP_NODELAY on every TCP connection; the dialers here set it themselves
// too, so the property does not rest on a default, and docs/API.md tells
// authors of clients in other languages (whose MQTT libraries mostly leave
// Nagle on) to do the same.
package nodelay

import (
	"net"
	"syscall"
	"time"
)

// Dialer returns a dialer whose TCP connections have TCP_NODELAY set
// before they connect. timeout 0 means none beyond the operating system's.
func Dialer(timeout time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: timeout, Control: control}
}

// control sets TCP_NODELAY on a TCP socket; other networks are left alone.
func control(network, _ string, c syscall.RawConn) error {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil
	}
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = setNoDelay(fd)
	})
	if err != nil {
		return err
	}
	return serr
}
