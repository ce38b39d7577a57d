package supervisor

import (
	"fmt"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
)

// recordingPublisher records what the supervisor publishes.
type recordingPublisher struct {
	mu     sync.Mutex
	states []api.State
}

func (p *recordingPublisher) PublishEvent(api.Event) {}
func (p *recordingPublisher) SetStatus(api.Status)   {}
func (p *recordingPublisher) PublishState(st api.State) {
	p.mu.Lock()
	p.states = append(p.states, st)
	p.mu.Unlock()
}

func (p *recordingPublisher) take() []api.State {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.states
	p.states = nil
	return out
}

// Retained states go out in the order the values changed, so a reader
// watching an unwind sees it in unwind order (they went out in the
// registry's order before).
func TestStatesPublishedInUnwindOrder(t *testing.T) {
	pub := &recordingPublisher{}
	s, _ := newTestSupervisorWith(t, func(c *config.Config) { c.Agents.Allow = nil }, func(o *Options) { o.Publisher = pub })
	must := func(req api.Request) api.Reply {
		t.Helper()
		req.Agent = "planner"
		r := s.Handle(req, time.Now())
		if !r.OK {
			t.Fatalf("%+v: %s %s", req, r.Code, r.Message)
		}
		return r
	}
	h := must(api.Request{ID: "h", Op: api.OpHello, TTLMS: 60000})
	saga := must(api.Request{ID: "b", Op: api.OpBegin, Lease: h.Lease, Epoch: h.Epoch}).Saga
	// Moved in the registry's order, so the unwind runs in its reverse:
	// the two orders differ.
	moved := s.reg.Names()
	if len(moved) < 2 {
		t.Fatal("need two actuators")
	}
	for i, name := range moved {
		c, _ := s.engine.Commanded(name)
		must(api.Request{ID: fmt.Sprint("s", i), Op: api.OpStep, Lease: h.Lease, Epoch: h.Epoch, Saga: saga, Actuator: name, Value: c + 1})
	}
	s.publishStates()
	pub.take()
	must(api.Request{ID: "a", Op: api.OpAbort, Lease: h.Lease, Epoch: h.Epoch, Saga: saga})
	s.publishStates()
	var got []string
	for _, st := range pub.take() {
		got = append(got, st.Actuator)
	}
	want := slices.Clone(moved)
	slices.Reverse(want) // unwound last-moved first
	if !slices.Equal(got, want) {
		t.Fatalf("states after the unwind published as %v, want unwind order %v", got, want)
	}
}

// A refresh that read the state before a reset must not store it after
// the reset's own refresh, or readiness says "halted" for up to a poll
// interval after a confirmed reset. Refreshes run continuously beside
// halts and resets; after each reset returns, the cached readiness must
// not be halted.
func TestNoStaleHaltAfterReset(t *testing.T) {
	s, _ := newTestSupervisor(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					s.refresh()
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	for i := range 100 {
		s.Halt("test", fmt.Sprint("round ", i))
		s.engine.WaitHalts()
		if err := s.Reset("operator-token-0123456789abcdef-test", "test"); err != nil {
			t.Fatalf("round %d: reset: %v", i, err)
		}
		s.mu.Lock()
		ready, reasons := s.ready, s.reasons
		s.mu.Unlock()
		if !ready {
			t.Fatalf("round %d: after a confirmed reset the cached readiness is %v %q", i, ready, reasons)
		}
	}
}
