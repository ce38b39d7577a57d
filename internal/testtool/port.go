package testtool

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"testing"
)

// FreePort returns a loopback TCP port for a process the test starts to
// listen on, below the kernel's ephemeral range.
//
// A port from net.Listen(":0") comes from that range, and so does the local
// port of every connection any process on the machine opens: between the
// pick and the child's bind, another test's HTTP poll or MQTT client may
// take it, and the child then cannot listen (the embedded broker waits for
// its port, and the test times out waiting for readiness). Below the range
// only another test's pick can collide; the pick is random over thousands
// of ports and checked free.
func FreePort(t testing.TB) int {
	t.Helper()
	lo := ephemeralLow()
	first := max(lo-16384, 10000)
	for range 200 {
		p := first + rand.IntN(lo-first)
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		ln.Close()
		return p
	}
	t.Fatalf("no free loopback port in %d..%d", first, lo-1)
	return 0
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default where it cannot be read).
func ephemeralLow() int {
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var l, h int
		if n, _ := fmt.Sscan(string(b), &l, &h); n == 2 && l > 11024 {
			lo = l
		}
	}
	return lo
}
