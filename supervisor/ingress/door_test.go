package ingress

import (
	"sync"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
)

// gateHandler serves one request each time a token is put in gate, and
// every request once it is opened.
type gateHandler struct {
	handler
	gate chan struct{}
	once sync.Once
}

func (h *gateHandler) open() { h.once.Do(func() { close(h.gate) }) }

func (h *gateHandler) Handle(req api.Request, received time.Time) api.Reply {
	<-h.gate
	return h.handler.Handle(req, received)
}

// shut reports whether the door holds (a channel not yet closed).
func shut(room <-chan struct{}) bool {
	if room == nil {
		return false
	}
	select {
	case <-room:
		return false
	default:
		return true
	}
}

// The door lets an agent's requests through while its lane has room —
// counting those let through that have not arrived yet — holds the next
// one while it is full, and opens when the lane serves one. Requests from
// another agent, and halts, pass whatever the full lane. Without the door
// every request past the queue is read, decoded and refused BUSY.
func TestDoorHoldsAFullLaneUntilItServes(t *testing.T) {
	h := &gateHandler{handler: *newHandler(), gate: make(chan struct{})}
	clk := &fakeClock{t: time.Unix(1000, 0)}
	l := newLanes(t, Options{QueueLen: 2, Rate: 1e6, Burst: 1e6, Now: clk.now}, h)
	t.Cleanup(h.open) // before the lanes' Close, which waits for the handler
	var r replies
	r.got = map[string][]api.Reply{}

	if room := l.Enter("a", true); room != nil {
		t.Fatal("an agent without a lane was held")
	}
	l.Submit("a", req("a", "0", api.OpStatus), nil, clk.now(), r.to("a")) // being served, stuck in the handler
	waitFor(t, "the first request in the handler", func() bool { return l.Stats().InFlight == 1 && l.Stats().Served == 1 })
	for i := range 2 {
		if room := l.Enter("a", true); room != nil {
			t.Fatalf("request %d held with %d of 2 places taken", i+1, i)
		}
	}
	room := l.Enter("a", true)
	if !shut(room) {
		t.Fatal("a third request let through with two on their way to a queue of 2")
	}
	if l.Enter("b", true) != nil {
		t.Fatal("another agent was held by a's full lane")
	}
	l.Submit("a", req("a", "h", api.OpHalt), nil, clk.now(), r.to("a"))
	if h.halts.Load() != 1 || !shut(room) {
		t.Fatal("a halt was not latched at once, or counted as one of the requests on their way")
	}
	l.Submit("a", req("a", "1", api.OpStatus), nil, clk.now(), r.to("a"))
	l.Submit("a", req("a", "2", api.OpStatus), nil, clk.now(), r.to("a"))
	if !shut(room) {
		t.Fatal("the door opened with the two requests it let through now queued")
	}
	h.gate <- struct{}{} // "0" served; "1" taken from the queue
	waitFor(t, "the door to open", func() bool { return !shut(room) })
	if l.Enter("a", true) != nil {
		t.Fatal("held with a place free")
	}
	if shut(l.Enter("a", false)) {
		t.Fatal("held though told not to hold")
	}
	h.open()
	waitFor(t, "every request answered", func() bool { return len(r.of("a")) == 4 })
	if st := l.Stats(); st.Busy != 0 || st.Held != 1 {
		t.Errorf("busy %d, held %d: want 0 and 1 (%+v)", st.Busy, st.Held, st)
	}
}

// A request let through that never arrives (dropped on the way) is not
// counted for ever: after DoorTransit the door stops waiting for it. And
// a closed lanes' door holds nothing.
func TestDoorForgetsWhatNeverArrived(t *testing.T) {
	h := &gateHandler{handler: *newHandler(), gate: make(chan struct{})}
	clk := &fakeClock{t: time.Unix(1000, 0)}
	l, err := New(Options{QueueLen: 1, Now: clk.now, TallyEvery: time.Hour}, h)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	defer h.open()
	var r replies
	r.got = map[string][]api.Reply{}
	l.Submit("a", req("a", "0", api.OpStatus), nil, clk.now(), r.to("a"))
	waitFor(t, "the first request in the handler", func() bool { return l.Stats().Served == 1 })
	if l.Enter("a", true) != nil {
		t.Fatal("held with the queue empty")
	}
	room := l.Enter("a", true)
	if !shut(room) {
		t.Fatal("not held with one on its way to a queue of 1")
	}
	clk.add(DoorTransit + time.Millisecond)
	if l.Enter("a", true) != nil {
		t.Fatal("still held for a request lost on its way, after DoorTransit")
	}
	if !shut(l.Enter("a", true)) {
		t.Fatal("the request just let through is not counted")
	}
	h.open()
	l.Close()
	if l.Enter("a", true) != nil || shut(room) {
		t.Fatal("a closed door holds a request")
	}
}
