package embedded

import (
	"testing"
	"time"
)

// Close never hangs on clients leaving at the same moment. mochi v2.7.9's
// Close reads its clients under their read lock and takes the same read
// lock again inside (Clients.GetByListener calls Len: mochi-mqtt/server#488);
// a client's clean-up asking for the write lock between the two leaves
// Close, and every client after it, blocked for ever; so Broker.Close
// takes the clients' list from one copy, under one read lock, and
// disconnects them itself. The test lines the writers up so that one asks
// just then: a reader holds the lock, two clean-ups queue behind it, Close
// queues behind them; when the reader lets go, the first clean-up runs and
// the second asks for the lock while Close holds its read lock.
func TestCloseWhileClientsLeave(t *testing.T) {
	for round := range 20 {
		b, err := StartOptions(Options{Addr: "127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		c, err := dialAs(b, "", "", "stays", "")
		if err != nil {
			t.Fatal(err)
		}
		clients := b.srv.Clients
		clients.RLock()
		for _, id := range []string{"gone-1", "gone-2"} {
			go clients.Delete(id) // a client's clean-up
		}
		time.Sleep(20 * time.Millisecond) // both queued behind the reader
		closed := make(chan struct{})
		go func() { b.Close(); close(closed) }()
		time.Sleep(20 * time.Millisecond) // Close queued behind them
		clients.RUnlock()
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: Close hung behind a client's clean-up", round)
		}
		c.Disconnect(0)
	}
}
