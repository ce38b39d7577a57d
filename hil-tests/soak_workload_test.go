//go:build !saga_lean

package hil

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
)

// The soak's workload: one worker per actuator under test, each a
// controller speaking raw MQTT API v1 (agent), running sagas on its own
// actuator for as long as the soak lasts — a lease with heartbeats, begin,
// a few steps, then commit or abort — through whatever the faults do to it.
// A refusal or a lost reply is what a controller meets in a fault: the
// worker gives up its saga (abort, or bye when it cannot tell what became
// of it) and starts again. It never fails the test; the soak judges the
// supervisor by the invariants.
//
// The workers own disjoint actuators, so their sagas never wait on each
// other, and what each commits stays until its own next saga moves it —
// unless a halt, or a board that moved on its own, moved it first.

// workerTTL is the workers' lease: short, so that a stop of the
// supervisor or the broker ends it, and heartbeated at a quarter of it.
const workerTTL = 2 * time.Second

// workerReplyTimeout bounds each wait for a reply: a worker that hears
// nothing gives up its saga and carries on.
const workerReplyTimeout = 5 * time.Second

// ackedCommit is a commit the supervisor acknowledged: it must be in the
// journal, and never undone.
type ackedCommit struct {
	agent string
	saga  uint64
	act   string
	value float64 // the last value stepped to in the saga
}

// worker runs sagas on one actuator.
type worker struct {
	w   *workload
	act PlannedActuator
	a   *agent
	rng *rand.Rand

	// Guarded by w.mu.
	hold bool // asked to stop at the next saga boundary
	idle bool // stopped there

	leased bool // the worker's own: it holds a lease
}

// workload is the workers and what they were told.
type workload struct {
	r       *rig
	workers []*worker

	mu      sync.Mutex
	changed *sync.Cond
	stop    bool
	commits []ackedCommit
	counts  map[string]int // outcomes: commit, abort, and refusals by code
	wg      sync.WaitGroup
}

func newWorkload(r *rig, seed uint64) *workload {
	w := &workload{r: r, counts: map[string]int{}}
	w.changed = sync.NewCond(&w.mu)
	for i, act := range r.plan.Actuators {
		a := r.newAgent(fmt.Sprintf("soak-%s", act.Name))
		a.timeout = workerReplyTimeout
		w.workers = append(w.workers, &worker{w: w, act: act, a: a, rng: rand.New(rand.NewPCG(seed, uint64(i)+1))})
	}
	return w
}

// start runs the workers until close.
func (w *workload) start() {
	for _, wk := range w.workers {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			wk.run()
		}()
	}
}

// close stops the workers and waits for them.
func (w *workload) close() {
	w.mu.Lock()
	w.stop = true
	w.changed.Broadcast()
	w.mu.Unlock()
	w.wg.Wait()
}

// pause stops the given workers (all of them if none is named) at their
// next saga boundary and waits until they are there. Their leases stay
// alive (heartbeats). It gives up after d, naming who did not stop.
func (w *workload) pause(d time.Duration, only ...*worker) error {
	ws := only
	if len(ws) == 0 {
		ws = w.workers
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, wk := range ws {
		wk.hold = true
	}
	w.changed.Broadcast()
	deadline := time.Now().Add(d)
	timer := time.AfterFunc(d, func() {
		w.mu.Lock()
		w.changed.Broadcast()
		w.mu.Unlock()
	})
	defer timer.Stop()
	for {
		var busy []string
		for _, wk := range ws {
			if !wk.idle {
				busy = append(busy, wk.a.name)
			}
		}
		if len(busy) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("workers %v did not reach a saga boundary within %v", busy, d)
		}
		w.changed.Wait()
	}
}

// resume lets every worker run again.
func (w *workload) resume() {
	w.mu.Lock()
	for _, wk := range w.workers {
		wk.hold = false
	}
	w.changed.Broadcast()
	w.mu.Unlock()
}

// acked returns the commits acknowledged so far.
func (w *workload) acked() []ackedCommit {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]ackedCommit(nil), w.commits...)
}

// outcomes returns how the workers' requests ended, by outcome.
func (w *workload) outcomes() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := make(map[string]int, len(w.counts))
	for k, v := range w.counts {
		m[k] = v
	}
	return m
}

func (w *workload) count(what string) {
	w.mu.Lock()
	w.counts[what]++
	w.mu.Unlock()
}

// boundary is a saga boundary: the worker waits here while held, and
// reports whether to stop for good.
func (wk *worker) boundary() (stop bool) {
	w := wk.w
	w.mu.Lock()
	defer w.mu.Unlock()
	for wk.hold && !w.stop {
		if !wk.idle {
			wk.idle = true
			w.changed.Broadcast()
		}
		w.changed.Wait()
	}
	wk.idle = false
	return w.stop
}

func (wk *worker) run() {
	for !wk.boundary() {
		if err := wk.saga(); err != nil {
			wk.w.count(outcomeOf(err))
			// Not hammering a supervisor that is down or halted.
			time.Sleep(time.Duration(50+wk.rng.IntN(150)) * time.Millisecond)
		}
		time.Sleep(time.Duration(wk.rng.IntN(30)) * time.Millisecond)
	}
	wk.bye()
}

// refusal is a reply that was not ok.
type refusal struct {
	op  string
	rep api.Reply
}

func (e *refusal) Error() string {
	return fmt.Sprintf("%s refused: %s %s", e.op, e.rep.Code, e.rep.Message)
}

func outcomeOf(err error) string {
	var rf *refusal
	switch {
	case errors.As(err, &rf):
		return rf.rep.Code
	case errors.Is(err, errNoReply):
		return "no reply"
	}
	return "error"
}

// call sends req and returns its reply, or an error for a refusal or no
// reply.
func (wk *worker) call(req map[string]any) (api.Reply, error) {
	op, _ := req["op"].(string)
	rep, err := wk.a.send(req)
	if err != nil {
		return rep, err
	}
	if !rep.OK {
		return rep, &refusal{op: op, rep: rep}
	}
	return rep, nil
}

// lease takes a lease if the worker holds none.
func (wk *worker) lease() error {
	if wk.leased {
		return nil
	}
	rep, err := wk.call(map[string]any{"op": "hello", "ttl_ms": workerTTL.Milliseconds()})
	if err != nil {
		return err
	}
	wk.a.holdLease(rep)
	wk.a.heartbeat()
	wk.leased = true
	return nil
}

// drop forgets the lease after telling the supervisor (bye ends it and
// unwinds whatever saga of it is still open), whether or not it heard.
func (wk *worker) drop() {
	wk.bye()
	a := wk.a
	a.mu.Lock()
	a.lease, a.epoch = "", 0
	a.mu.Unlock()
	wk.leased = false
}

func (wk *worker) bye() {
	if wk.leased {
		wk.a.send(map[string]any{"op": "bye"})
	}
}

// saga runs one saga: begin, one to four steps, then commit (two in
// three) or abort.
func (wk *worker) saga() error {
	if err := wk.lease(); err != nil {
		wk.drop()
		return err
	}
	rep, err := wk.call(map[string]any{"op": "begin"})
	if err != nil {
		wk.giveUp(0, err)
		return err
	}
	saga := rep.Saga
	var last float64
	for range 1 + wk.rng.IntN(4) {
		// Whole units: every view of the position holds them exactly.
		v := math.Round(wk.act.Min + wk.rng.Float64()*(wk.act.Max-wk.act.Min))
		if _, err := wk.call(map[string]any{"op": "step", "saga": saga, "actuator": wk.act.Name, "value": v}); err != nil {
			wk.giveUp(saga, err)
			return err
		}
		last = v
		time.Sleep(time.Duration(wk.rng.IntN(40)) * time.Millisecond)
	}
	if wk.rng.IntN(3) == 0 {
		if _, err := wk.call(map[string]any{"op": "abort", "saga": saga, "reason": "soak: changed its mind"}); err != nil {
			wk.giveUp(saga, err)
			return err
		}
		wk.w.count("abort")
		return nil
	}
	if _, err := wk.call(map[string]any{"op": "commit", "saga": saga}); err != nil {
		wk.giveUp(saga, err)
		return err
	}
	wk.w.mu.Lock()
	wk.w.commits = append(wk.w.commits, ackedCommit{agent: wk.a.name, saga: saga, act: wk.act.Name, value: last})
	wk.w.counts["commit"]++
	wk.w.mu.Unlock()
	return nil
}

// giveUp ends a saga that went wrong. Refused, the lease may still be good
// and the saga still open: an abort ends it (a saga the supervisor already
// ended answers SAGA_UNKNOWN). Unanswered, nobody knows: bye ends the lease
// and every saga of it.
func (wk *worker) giveUp(saga uint64, err error) {
	var rf *refusal
	if !errors.As(err, &rf) {
		wk.drop()
		return
	}
	switch rf.rep.Code {
	case "LEASE_EXPIRED", "LEASE_UNKNOWN", "LEASE_NOT_HOLDER", "SHUTTING_DOWN":
		wk.drop()
		return
	}
	if saga != 0 {
		if _, err := wk.call(map[string]any{"op": "abort", "saga": saga, "reason": "soak: giving up"}); err != nil && !errors.As(err, &rf) {
			wk.drop()
		}
	}
}
