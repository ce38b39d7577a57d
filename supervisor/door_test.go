package supervisor

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// The broker's door holds an agent whose lane is full, but never one in
// the second half of its lease: its packets are read in order, and a
// heartbeat behind its backlog must reach the lease before it ends.
func TestDoorNeverHoldsAnAgentWhoseLeaseIsEnding(t *testing.T) {
	var skew atomic.Int64
	s, _ := newTestSupervisorWith(t, func(c *config.Config) { c.Agents.Queue = 1 },
		func(o *Options) {
			o.Leases.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
		})
	got := make(chan api.Reply, 1)
	s.Submit("planner", api.Request{ID: "h", Agent: "planner", Op: api.OpHello, TTLMS: 60000}, nil, time.Now(), func(r api.Reply) { got <- r })
	select {
	case r := <-got:
		if !r.OK {
			t.Fatalf("hello: %s %s", r.Code, r.Message)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reply to hello")
	}
	if s.Enter("planner") != nil {
		t.Fatal("held with its lane empty")
	}
	if s.Enter("planner") == nil {
		t.Fatal("not held with one request on its way to a queue of 1, its lease fresh")
	}
	skew.Store(int64(31 * time.Second)) // 29 s of 60 left
	if s.Enter("planner") != nil {
		t.Fatal("held with less than half its lease left")
	}
}
