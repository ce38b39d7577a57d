package ingress

import (
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
)

// fakeClock is a settable clock for the token buckets.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// handler records what it is asked; Handle for agents in block waits until
// release is closed.
type handler struct {
	mu       sync.Mutex
	handled  map[string][]string // agent -> ids, in the order handled
	halts    atomic.Int64
	tallies  []Tally
	block    map[string]bool
	release  chan struct{}
	inHandle chan string
}

func newHandler() *handler {
	return &handler{handled: map[string][]string{}, block: map[string]bool{}, release: make(chan struct{}), inHandle: make(chan string, 1024)}
}

func (h *handler) Handle(req api.Request, _ time.Time) api.Reply {
	h.mu.Lock()
	h.handled[req.Agent] = append(h.handled[req.Agent], req.ID)
	blocked := h.block[req.Agent]
	h.mu.Unlock()
	h.inHandle <- req.Agent
	if blocked {
		<-h.release
	}
	rep := api.Reply{ID: req.ID, OK: true}
	if req.Op == api.OpHello {
		rep.Lease = "L-" + req.ID
	}
	return rep
}

func (h *handler) Halt(api.Request) *api.Error { h.halts.Add(1); return nil }

func (h *handler) Refusals(ts []Tally) {
	h.mu.Lock()
	h.tallies = append(h.tallies, ts...)
	h.mu.Unlock()
}

func (h *handler) count(agent, code string) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var n uint64
	for _, t := range h.tallies {
		if t.Agent == agent && t.Code == code {
			n += t.Count
		}
	}
	return n
}

// replies collects replies per agent, in the order sent.
type replies struct {
	mu  sync.Mutex
	got map[string][]api.Reply
	n   atomic.Int64
}

func (r *replies) to(agent string) func(api.Reply) {
	return func(rep api.Reply) {
		r.mu.Lock()
		if r.got == nil {
			r.got = map[string][]api.Reply{}
		}
		r.got[agent] = append(r.got[agent], rep)
		r.mu.Unlock()
		r.n.Add(1)
	}
}

func (r *replies) of(agent string) []api.Reply {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]api.Reply(nil), r.got[agent]...)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); { // a liveness bound, not a speed check
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func newLanes(t *testing.T, opt Options, h Handler) *Lanes {
	t.Helper()
	opt.TallyEvery = time.Hour // tests flush by hand
	l, err := New(opt, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

func req(agent, id string, op api.Op) api.Request {
	return api.Request{ID: id, Agent: agent, Op: op}
}

// One agent floods while its requests are stuck in the handler: it is
// refused RATE_LIMITED and BUSY, and another agent's hello, heartbeat,
// steps and halt are all served, none dropped. It fails with one shared
// queue and worker, where a flood delays or drops the other agent's
// heartbeats and the halt.
func TestFloodingAgentStarvesNobody(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	h := newHandler()
	h.block["flood"] = true
	l := newLanes(t, Options{QueueLen: 8, Rate: 100, Burst: 20, Now: clk.now}, h)
	var r replies

	for i := range 5000 {
		l.Submit("flood", req("flood", fmt.Sprint("f", i), api.OpStep), nil, clk.now(), r.to("flood"))
		if i%100 == 0 {
			clk.add(100 * time.Millisecond) // 10 tokens per 100 ms
		}
	}
	<-h.inHandle // the flood's first request is stuck in Handle

	ids := []api.Op{api.OpHello, api.OpBegin, api.OpStep, api.OpStep, api.OpCommit}
	for i, op := range ids {
		l.Submit("calm", req("calm", fmt.Sprint("c", i), op), nil, clk.now(), r.to("calm"))
	}
	l.Submit("calm", req("calm", "hb", api.OpHeartbeat), nil, clk.now(), r.to("calm"))
	l.Submit("calm", req("calm", "stop", api.OpHalt), nil, clk.now(), r.to("calm"))
	if h.halts.Load() != 1 {
		t.Fatal("the halt was not latched by the time Submit returned")
	}
	waitFor(t, "every reply to calm", func() bool { return len(r.of("calm")) == len(ids)+2 })
	for _, rep := range r.of("calm") {
		if !rep.OK {
			t.Fatalf("calm agent refused: %+v", rep)
		}
	}
	close(h.release)
	l.Flush()
	rl, busy := h.count("flood", api.CodeRateLimited), h.count("flood", api.CodeBusy)
	if rl == 0 || busy == 0 {
		t.Fatalf("flood tallied RATE_LIMITED %d, BUSY %d; want both", rl, busy)
	}
	if h.count("calm", api.CodeRateLimited)+h.count("calm", api.CodeBusy) != 0 {
		t.Fatal("calm agent was refused for the flood's load")
	}
	waitFor(t, "the flood's lane to drain", func() bool { return l.Stats().Served >= uint64(len(ids))+2 })
	st := l.Stats()
	if st.RateLimited != rl || st.Busy != busy {
		t.Fatalf("stats %+v disagree with tallies %d/%d", st, rl, busy)
	}
	t.Logf("flood of 5000: served %d, RATE_LIMITED %d, BUSY %d, refusal replies dropped %d", st.Served, rl, busy, st.RepliesDropped)
}

// Replies to one agent leave in request order, refusals included.
func TestRepliesInRequestOrder(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	h := newHandler()
	l := newLanes(t, Options{QueueLen: 4, Rate: 1, Burst: 3, Now: clk.now}, h)
	var r replies
	const n = 40
	for i := range n {
		l.Submit("a", req("a", fmt.Sprint(i), api.OpStep), nil, clk.now(), r.to("a"))
	}
	// Refusal replies beyond the queue's bound are dropped (counted): the
	// agent is sending faster than its replies can leave. What is sent
	// leaves in request order.
	waitFor(t, "replies", func() bool { return uint64(len(r.of("a")))+l.Stats().RepliesDropped == n })
	last := -1
	for _, rep := range r.of("a") {
		var i int
		fmt.Sscan(rep.ID, &i)
		if i <= last {
			t.Fatalf("reply to %q after the reply to %d: out of order", rep.ID, last)
		}
		last = i
	}
	if len(r.of("a")) < 7 { // 3 served, then refusals up to the queue's bound
		t.Fatalf("only %d replies", len(r.of("a")))
	}
}

// A replayed request gets its first reply and is not served again; a
// reused id with other content is DUPLICATE_ID; a new lease forgets.
func TestReplayIsAnsweredNotServed(t *testing.T) {
	h := newHandler()
	l := newLanes(t, Options{}, h)
	var r replies
	hello := req("a", "h1", api.OpHello)
	step := api.Request{ID: "s1", Agent: "a", Op: api.OpStep, Lease: "L-h1", Actuator: "elbow", Value: 10}
	for _, q := range []api.Request{hello, step, step, hello} {
		l.Submit("a", q, nil, time.Now(), r.to("a"))
	}
	other := step
	other.Value = 99
	l.Submit("a", other, nil, time.Now(), r.to("a"))
	hb := req("a", "hb1", api.OpHeartbeat)
	hb.Lease = "L-h1"
	waitFor(t, "replies", func() bool { return len(r.of("a")) == 5 })
	l.Submit("a", hb, nil, time.Now(), r.to("a"))
	l.Submit("a", hb, nil, time.Now(), r.to("a"))
	got := r.of("a")
	h.mu.Lock()
	served := append([]string(nil), h.handled["a"]...)
	h.mu.Unlock()
	if fmt.Sprint(served) != "[h1 s1 hb1]" {
		t.Fatalf("handled %v, want each request once", served)
	}
	if !reflect.DeepEqual(got[2], got[1]) || !reflect.DeepEqual(got[3], got[0]) {
		t.Fatalf("replays not answered with the first reply: %+v", got)
	}
	if got[4].OK || got[4].Code != codeDuplicateID {
		t.Fatalf("reused id: %+v, want DUPLICATE_ID", got[4])
	}
	// A new lease (another hello) starts afresh: s1 is served again.
	l.Submit("a", req("a", "h2", api.OpHello), nil, time.Now(), r.to("a"))
	step.Lease = "L-h2"
	l.Submit("a", step, nil, time.Now(), r.to("a"))
	waitFor(t, "replies", func() bool { return len(r.of("a")) == 9 })
	h.mu.Lock()
	served = append([]string(nil), h.handled["a"]...)
	h.mu.Unlock()
	if fmt.Sprint(served) != "[h1 s1 hb1 h2 s1]" {
		t.Fatalf("handled %v after a new lease", served)
	}
}

// Past MaxAgents, a new agent is refused TOO_MANY_AGENTS — but its halt
// still halts; an idle lane gives way to a new agent.
func TestAgentCap(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	h := newHandler()
	l := newLanes(t, Options{MaxAgents: 2, IdleAfter: time.Minute, Now: clk.now}, h)
	var r replies
	for _, a := range []string{"a", "b", "c"} {
		l.Submit(a, req(a, "1", api.OpHello), nil, clk.now(), r.to(a))
	}
	waitFor(t, "replies", func() bool { return r.n.Load() == 3 })
	if got := r.of("c"); got[0].Code != api.CodeTooManyAgents {
		t.Fatalf("third agent: %+v, want TOO_MANY_AGENTS", got[0])
	}
	l.Submit("c", req("c", "2", api.OpHalt), nil, clk.now(), r.to("c"))
	if h.halts.Load() != 1 {
		t.Fatal("a halt from an agent without a lane was not latched")
	}
	clk.add(2 * time.Minute)
	l.Submit("c", req("c", "3", api.OpHello), nil, clk.now(), r.to("c"))
	waitFor(t, "replies", func() bool { return len(r.of("c")) == 3 })
	if got := r.of("c")[2]; !got.OK {
		t.Fatalf("after a lane went idle: %+v", got)
	}
}

// Requests a transport could not decode are answered in the agent's order
// and reported in aggregate, never handed to Handle.
func TestUndecodableTallied(t *testing.T) {
	h := newHandler()
	l := newLanes(t, Options{}, h)
	var r replies
	derr := &api.Error{Code: api.CodeBadRequest, Message: "not JSON"}
	for range 100 {
		l.Submit("junk", api.Request{}, derr, time.Now(), r.to("junk"))
	}
	waitFor(t, "replies", func() bool { return len(r.of("junk")) >= 32 })
	l.Flush()
	if got := h.count("junk", api.CodeBadRequest); got != 100 {
		t.Fatalf("tallied %d BAD_REQUEST, want 100", got)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.handled["junk"]) != 0 {
		t.Fatal("an undecodable request reached Handle")
	}
}

// BenchmarkHaltUnderFlood measures Submit of a halt while another agent
// floods Submit from another goroutine and its handler is slow: the halt
// must not wait on the flood.
func BenchmarkHaltUnderFlood(b *testing.B) {
	h := newHandler()
	h.block["flood"] = true
	l, err := New(Options{TallyEvery: time.Hour}, h)
	if err != nil {
		b.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			l.Submit("flood", req("flood", fmt.Sprint(i), api.OpStep), nil, time.Now(), func(api.Reply) {})
		}
	}()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l.Submit("op", req("op", fmt.Sprint(i), api.OpHalt), nil, time.Now(), func(api.Reply) {})
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	close(h.release)
	go func() {
		for range h.inHandle {
		}
	}()
	l.Close()
}

// Shed refuses unread only an agent with a lane, no token left, and a
// full backlog of refusals to send (so the reply would be dropped anyway);
// it counts what it refused.
func TestShed(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	h := newHandler()
	h.block["a"] = true // the agent's first request sticks: its replies queue up
	l := newLanes(t, Options{Rate: 10, Burst: 2, QueueLen: 2, Now: clk.now}, h)
	if l.Shed("nobody") {
		t.Fatal("an agent without a lane was shed")
	}
	var r replies
	submit := func(id string) { l.Submit("a", req("a", id, api.OpStep), nil, clk.now(), r.to("a")) }
	submit("0")
	<-h.inHandle
	submit("1") // the last token: queued
	if l.Shed("a") {
		t.Fatal("shed while its refusals can still be answered")
	}
	submit("2") // RATE_LIMITED, answered (queued behind 1)
	submit("3") // RATE_LIMITED, answered: the backlog of refusals is now full
	if !l.Shed("a") {
		t.Fatal("not shed with no token and a full backlog of refusals")
	}
	clk.add(100 * time.Millisecond) // one token back
	if l.Shed("a") {
		t.Fatal("shed after its bucket refilled")
	}
	close(h.release)
	go func() {
		for range h.inHandle {
		}
	}()
	l.Flush()
	if got := h.count("a", api.CodeRateLimited); got != 3 {
		t.Fatalf("tallied %d RATE_LIMITED, want 3 (two answered, one shed)", got)
	}
}

// Remembered replies are bounded: a status is not kept (a replay is served
// afresh), and a long report is kept summarised.
func TestReplyCacheBounded(t *testing.T) {
	c := newReplyCache(4)
	st := api.Request{ID: "s", Op: api.OpStatus}
	c.store(st, api.Reply{ID: "s", OK: true, Status: []byte(`{"ready":true,"halted":false}`)})
	if _, k := c.lookup(st); k != unseen {
		t.Fatal("a status reply was remembered")
	}
	ab := api.Request{ID: "a", Op: api.OpAbort, Lease: "L", Saga: 1}
	rep := api.Reply{ID: "a", OK: true, Saga: 1, Report: &api.ReportJSON{Saga: 1, Agent: "x", Order: "retrace"}}
	for i := range 2000 {
		rep.Report.Steps = append(rep.Report.Steps, api.StepReport{Step: uint32(2000 - i), Actuator: "elbow", Outcome: "applied", Bucket: "compensated", Attempts: 1})
	}
	c.store(ab, rep)
	got, k := c.lookup(ab)
	if k != replayed || got.Report == nil || !got.Report.Truncated || got.Report.StepsTotal != 2000 || got.Report.Verdict != "clean" {
		t.Fatalf("remembered abort: %v %+v", k, got.Report)
	}
	if b := api.EncodeReply(got); len(b) > cachedReplyBytes {
		t.Fatalf("remembered reply is %d bytes", len(b))
	}

	// It takes memory as replies come, up to its bound, and then forgets
	// the oldest first.
	c = newReplyCache(4)
	if cap(c.ring) != 0 {
		t.Fatalf("a new cache holds room for %d replies", cap(c.ring))
	}
	hb := func(i int) api.Request { return api.Request{ID: strconv.Itoa(i), Op: api.OpHeartbeat, Lease: "L"} }
	for i := range 10 {
		c.store(hb(i), api.Reply{ID: strconv.Itoa(i), OK: true})
	}
	if len(c.ring) != 4 || len(c.byID) != 4 {
		t.Fatalf("%d replies in the ring, %d by id, want 4", len(c.ring), len(c.byID))
	}
	if _, k := c.lookup(hb(9)); k != replayed {
		t.Error("the newest reply was forgotten")
	}
	if _, k := c.lookup(hb(5)); k != unseen {
		t.Error("a reply beyond the bound was remembered")
	}
}
