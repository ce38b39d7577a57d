package lease_test

import (
	"fmt"

	"github.com/saga-supervisor/saga-supervisor/supervisor/lease"
)

// An agent takes a lease, acts under it, reconnects (its old lease ends and
// stays refused) and says bye. OnEnd is where the supervisor would unwind
// the agent's open sagas, newest first.
func Example() {
	m, err := lease.New(lease.Options{
		FirstEpoch: 41, // the highest epoch in the journal
		OnEnd: func(l lease.Lease, reason string) {
			fmt.Printf("lease of %s, epoch %d, ended: %s\n", l.Agent, l.Epoch, reason)
		},
	})
	if err != nil {
		panic(err)
	}
	defer m.Close()

	l, _ := m.Hello("planner", 0)
	fmt.Println("granted epoch", l.Epoch, "ttl", l.TTL)
	fmt.Println("check:", m.Check("planner", l.ID, l.Epoch))
	fmt.Println("replay of cmd-1:", m.Seen(l.ID, "cmd-1"), m.Seen(l.ID, "cmd-1"))
	fmt.Println("another agent:", lease.CodeOf(m.Check("camera", l.ID, l.Epoch)))

	// The agent reconnects: a new hello ends the old lease first.
	l2, _ := m.Hello("planner", 0)
	fmt.Println("granted epoch", l2.Epoch)
	fmt.Println("old lease:", lease.CodeOf(m.Check("planner", l.ID, l.Epoch)))

	m.End("planner", l2.ID, "")
	fmt.Println("live:", m.Count())
	// Output:
	// granted epoch 42 ttl 1s
	// check: <nil>
	// replay of cmd-1: false true
	// another agent: LEASE_NOT_HOLDER
	// lease of planner, epoch 42, ended: superseded
	// granted epoch 43
	// old lease: LEASE_EXPIRED
	// lease of planner, epoch 43, ended: bye
	// live: 0
}
