package rollback

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

// TestConcurrentAgents runs agents on the same actuators at once, with
// aborts, faulting steps, lease-expiry aborts and a halt/reset in the middle,
// under -race. Afterwards no saga is open, the engine's commanded values
// match the world, and the journal tells a consistent story: every saga
// ended, and each actuator was held by one open saga at a time.
func TestConcurrentAgents(t *testing.T) {
	r := newRig(t, nil)
	for _, name := range []string{"base", "shoulder", "elbow", "gripper"} {
		d := r.drivers[name]
		var mu sync.Mutex
		rng := rand.New(rand.NewPCG(uint64(len(name)), 9))
		d.fail = func(v float64, n int) error {
			mu.Lock()
			defer mu.Unlock()
			switch rng.IntN(20) {
			case 0:
				return fmt.Errorf("random refusal: %w", actuators.ErrNotApplied)
			case 1:
				return errors.New("random fault") // in doubt
			}
			return nil
		}
	}
	acts := []string{"base", "shoulder", "elbow", "gripper"}
	var wg sync.WaitGroup
	for a := 0; a < 6; a++ {
		wg.Add(1)
		go func(a int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(a), 1))
			o := Owner{Agent: fmt.Sprintf("agent%d", a), Lease: "l", Epoch: 1}
			for i := 0; i < 60; i++ {
				s, err := r.e.Begin(o)
				if err != nil {
					continue // halted
				}
				for k := 0; k < 1+rng.IntN(4); k++ {
					act := acts[rng.IntN(len(acts))]
					v := float64(rng.IntN(2)) * 0.5
					if _, err := r.e.Step(s, o, Command{ID: fmt.Sprint(k), Actuator: act, Value: v}); err != nil {
						if c := CodeOf(err); c == CodeStepFailed || c == CodeStepInDoubt || c == CodeSagaUnknown || c == CodeHalted {
							break
						}
					}
				}
				switch rng.IntN(3) {
				case 0:
					r.e.Commit(s, o)
				case 1:
					r.e.Abort(s, o, "")
				default:
					r.e.AbortAgent(o.Agent, "lease expired")
				}
			}
		}(a)
	}
	// An operator halts now and then, and resets whatever halted (a failed
	// compensation halts by default) until the agents are done.
	done := make(chan struct{})
	operator := make(chan struct{})
	go func() {
		defer close(operator)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			if i%50 == 0 {
				r.e.Halt("test halt")
			}
			if h, _ := r.e.Halted(); h {
				r.e.Reset("operator", r.e.HaltGen())
			}
			runtime.Gosched()
		}
	}()
	wg.Wait()
	close(done)
	<-operator
	// A saga whose abort raced with a busy step may still be open: end it.
	for _, id := range r.e.OpenSagas() {
		r.e.mu.Lock()
		s := r.e.sagas[id]
		r.e.mu.Unlock()
		if _, err := r.e.Abort(id, s.owner, "cleanup"); err != nil {
			t.Fatalf("cleanup abort of saga %d: %v", id, err)
		}
	}
	if open := r.e.OpenSagas(); len(open) != 0 {
		t.Fatalf("sagas still open: %v", open)
	}
	// Actuators touched by partial unwinds may differ; every other one must
	// match the engine's knowledge.
	h := NewHistory()
	for _, rec := range r.j.all() {
		h.Add(rec)
	}
	dirty := map[string]bool{}
	for _, s := range h.Sagas {
		if s.State != SagaCommitted && s.State != SagaUnwound {
			t.Errorf("saga %d ended %s in the journal", s.ID, s.State)
		}
		if s.State == SagaUnwound && !s.Clean() {
			for _, st := range s.Steps {
				dirty[st.Actuator] = true
			}
		}
	}
	world := r.w.snapshot()
	for _, name := range acts {
		got, _ := r.e.Commanded(name)
		if !dirty[name] && world[name] != got {
			t.Errorf("%s: world %g, engine says %g", name, world[name], got)
		}
	}
	// One open saga per actuator, at every point of the journal.
	holder := map[string]uint64{}
	for _, rec := range r.j.all() {
		switch rec.Type {
		case RecIntent:
			if h, ok := holder[rec.Actuator]; ok && h != rec.Saga {
				t.Fatalf("saga %d stepped on %s held by saga %d", rec.Saga, rec.Actuator, h)
			}
			holder[rec.Actuator] = rec.Saga
		case RecCommit, RecEnd:
			for a, h := range holder {
				if h == rec.Saga {
					delete(holder, a)
				}
			}
		}
	}
	t.Logf("%d sagas, %d records", len(h.Sagas), len(r.j.all()))
}
