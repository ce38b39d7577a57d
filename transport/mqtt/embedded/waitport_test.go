package embedded

import (
	"net"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
)

// TestWaitForPort: with WaitForPort, an address another process listens
// on is no error: the broker starts not listening (Listening names the
// address "in use by another process", Up stays open), retries, and
// listens and serves once the port is free. Without it, the port in use
// is StartOptions' error, as before.
func TestWaitForPort(t *testing.T) {
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := other.Addr().String()
	if _, err := StartOptions(Options{Addr: addr}); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("without WaitForPort: %v, want the port in use", err)
	}
	b, err := StartOptions(Options{Addr: addr, WaitForPort: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	select {
	case <-b.Up():
		t.Fatal("Up closed while another process holds the port")
	default:
	}
	if err := b.Listening(); err == nil || !strings.Contains(err.Error(), addr+" in use by another process") {
		t.Fatalf("Listening: %v", err)
	}
	if b.Addr() != addr {
		t.Errorf("Addr %q before it listens, want %q", b.Addr(), addr)
	}
	other.Close()
	select {
	case <-b.Up():
	case <-time.After(testtool.Slow(10 * time.Second)):
		t.Fatalf("not listening 10 s after the port was freed: %v", b.Listening())
	}
	if err := b.Listening(); err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.NewClientOptions().AddBroker(b.URL()).SetClientID("t"))
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect once it listens: %v", tok.Error())
	}
	c.Disconnect(0)
}

// A broker still waiting for its port closes at once, its retries ended.
func TestWaitForPortClose(t *testing.T) {
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	b, err := StartOptions(Options{Addr: other.Addr().String(), WaitForPort: true})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	b.Close()
	select {
	case <-b.waitDone:
	default:
		t.Fatal("the listen's retries still run after Close")
	}
}
