package rollback

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// blockingJournal holds every Sync until released, so a test can act while
// an intent is being made durable.
type blockingJournal struct {
	*memJournal
	armed   atomic.Bool   // Syncs block only once armed
	entered chan struct{} // one value per blocked Sync entered
	release chan struct{}
}

func (j *blockingJournal) Sync() error {
	if j.armed.Load() {
		j.entered <- struct{}{}
		<-j.release
	}
	return j.memJournal.Sync()
}

func halts(recs []Record) []string {
	var out []string
	for _, r := range recs {
		if r.Type == RecHalt {
			out = append(out, r.Message)
		}
	}
	return out
}

// A halt latched while a step's intent is being fsynced wins: the effect
// never fires and the intent is closed as not applied (the race a latch
// checked only before the intent would lose).
func TestHaltDuringIntentFsyncWins(t *testing.T) {
	bj := &blockingJournal{memJournal: &memJournal{}, entered: make(chan struct{}, 16), release: make(chan struct{})}
	r := newRig(t, func(c *Config) { c.Journal = bj })
	r.j = bj.memJournal
	saga, err := r.e.Begin(r.owner)
	if err != nil {
		t.Fatal(err)
	}
	bj.armed.Store(true)
	type result struct {
		err error
	}
	done := make(chan result, 1)
	go func() {
		_, err := r.e.Step(saga, r.owner, Command{ID: "1", Actuator: "elbow", Value: 60})
		done <- result{err}
	}()
	<-bj.entered // the intent's fsync is in progress
	gen := r.e.Latch("e-stop during the fsync")
	if gen == 0 {
		t.Fatal("Latch returned generation 0")
	}
	close(bj.release) // every later Sync passes at once
	go func() {
		for range bj.entered {
		}
	}()
	res := <-done
	if CodeOf(res.err) != CodeHalted {
		t.Fatalf("step during a halt: %v, want HALTED", res.err)
	}
	for _, c := range r.w.setCalls() {
		if c.Actuator == "elbow" && c.Value == 60 {
			t.Fatalf("the effect fired after the halt latched: %+v", r.w.setCalls())
		}
	}
	r.e.WaitHalts()
	var notApplied, haltRec bool
	for _, rec := range r.j.all() {
		if rec.Type == RecFailed && rec.Saga == saga && rec.Step == 1 && rec.Code == "NOT_APPLIED" {
			notApplied = true
		}
		if rec.Type == RecHalt {
			haltRec = true
		}
	}
	if !notApplied || !haltRec {
		t.Fatalf("journal lacks FAILED NOT_APPLIED (%v) or HALT (%v): %+v", notApplied, haltRec, r.j.all())
	}
	// The halt sent elbow to its safe value 0; the step's 60 never happened.
	if v, _ := r.e.Commanded("elbow"); v != 0 || r.w.value["elbow"] != 0 {
		t.Fatalf("elbow commanded %v, world %v; want the safe value 0", v, r.w.value["elbow"])
	}
	// Rebuilt from the journal, the same.
	next := newRig(t, nil)
	r.j.Sync()
	r.j.rebuildInto(t, next.e, len(r.j.all()))
	if v, _ := next.e.Commanded("elbow"); v != 0 {
		t.Fatalf("rebuilt elbow commanded %v, want the safe value 0", v)
	}
	if h, _ := next.e.Halted(); !h {
		t.Fatal("the rebuild lost the halt")
	}
}

// Latch never waits on the engine's lock, which an unwind or a journal
// wait may hold: it must return while the lock is held, and the gate
// refuses from that instant.
func TestLatchDoesNotWaitOnTheEngine(t *testing.T) {
	r := newRig(t, nil)
	saga := r.begin(t)
	r.e.mu.Lock()
	latched := make(chan struct{})
	go func() {
		r.e.Latch("operator")
		close(latched)
	}()
	select {
	case <-latched:
	case <-time.After(10 * time.Second): // a deadlock check, not a speed check
		r.e.mu.Unlock()
		t.Fatal("Latch waited on the engine's lock")
	}
	if h, why := r.e.Halted(); !h || why != "operator" {
		t.Fatalf("Halted() = %v %q with the engine locked", h, why)
	}
	r.e.mu.Unlock()
	if _, err := r.e.Step(saga, r.owner, Command{ID: "1", Actuator: "elbow", Value: 30}); CodeOf(err) != CodeHalted {
		t.Fatalf("step after the latch: %v", err)
	}
	r.e.WaitHalts()
}

// Reset clears only the halts it saw: one latched while the reset was
// being decided stays latched.
func TestResetKeepsAHaltThatArrivedMidReset(t *testing.T) {
	r := newRig(t, nil)
	r.e.Halt("first")
	gen := r.e.HaltGen() // the operator's side checked readiness at this generation
	r.e.Latch("second, mid-reset")
	if err := r.e.Reset("operator", gen); CodeOf(err) != CodeHalted {
		t.Fatalf("reset with a newer halt latched: %v, want HALTED", err)
	}
	if h, _ := r.e.Halted(); !h {
		t.Fatal("the halt that arrived mid-reset was cleared")
	}
	if err := r.e.Reset("operator", r.e.HaltGen()); err != nil {
		t.Fatalf("second reset: %v", err)
	}
	if h, _ := r.e.Halted(); h {
		t.Fatal("still halted after a reset that saw every halt")
	}
	// The rebuild agrees: the journal orders HALT, HALT, RESET(s) so the
	// rebuilt engine is not halted.
	r.e.WaitHalts()
	r.j.Sync()
	next := newRig(t, nil)
	r.j.rebuildInto(t, next.e, len(r.j.all()))
	if h, _ := next.e.Halted(); h {
		t.Fatal("the rebuilt engine is halted after the final reset")
	}
}

// Every halt is journaled, a second one while halted included; a flood of
// halts is journaled with bounded memory, as a count.
func TestEveryHaltIsJournaled(t *testing.T) {
	r := newRig(t, nil)
	r.e.Halt("one")
	r.e.Halt("two, while halted")
	r.e.WaitHalts()
	if got := halts(r.j.all()); len(got) != 2 || got[0] != "one" || got[1] != "two, while halted" {
		t.Fatalf("HALT records %q, want both", got)
	}

	f := newRig(t, nil)
	var wg sync.WaitGroup
	const n = 2000
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < n/4; j++ {
				f.e.Latch("flood")
			}
		}()
	}
	wg.Wait()
	f.e.WaitHalts()
	total := 0
	for _, m := range halts(f.j.all()) {
		if m == "flood" {
			total++
			continue
		}
		var k int
		if _, err := fmtSscanf(m, &k); err != nil {
			t.Fatalf("unexpected HALT record %q", m)
		}
		total += k
	}
	if total != n || f.e.HaltGen() != n {
		t.Fatalf("journal accounts for %d halts, generation %d; want %d", total, f.e.HaltGen(), n)
	}
	if recs := len(halts(f.j.all())); recs > n/2 {
		t.Fatalf("%d HALT records for %d halts: the flood was not aggregated", recs, n)
	}
}

func fmtSscanf(m string, k *int) (int, error) {
	i := strings.Index(m, " further halts")
	if i < 0 {
		return 0, errNotCount
	}
	var n int
	for _, c := range m[:i] {
		if c < '0' || c > '9' {
			return 0, errNotCount
		}
		n = n*10 + int(c-'0')
	}
	*k = n
	return 1, nil
}

var errNotCount = &Error{Code: CodeBadRequest, Message: "not a count record"}

// A second halt while halted moves nothing again — unless a safe policy
// failed the first time: then it tries again (an operator pressing halt a
// second time because something did not go safe must get that).
func TestSecondHaltRetriesAFailedSafePolicy(t *testing.T) {
	r := newRig(t, nil)
	r.step(t, r.begin(t), "1", "shoulder", 40) // the saga is ended by the halt; shoulder at 40
	r.drivers["shoulder"].fail = func(v float64, n int) error {
		if n == 2 { // the first halt's safe move
			return errors.New("servo jammed")
		}
		return nil
	}
	if _, err := r.e.Halt("first"); err == nil {
		t.Fatal("the failed safe policy was not reported")
	}
	if r.w.value["shoulder"] != 40 {
		t.Fatalf("shoulder at %v after a failed safe move", r.w.value["shoulder"])
	}
	if _, err := r.e.Halt("again"); err != nil {
		t.Fatalf("second halt: %v", err)
	}
	if r.w.value["shoulder"] != 0 {
		t.Fatalf("the second halt did not retry the safe policy: shoulder at %v", r.w.value["shoulder"])
	}
	calls := len(r.w.setCalls())
	if _, err := r.e.Halt("third"); err != nil {
		t.Fatal(err)
	}
	if n := len(r.w.setCalls()); n != calls {
		t.Fatalf("a third halt, with every policy applied, moved actuators again (%d sets, was %d)", n, calls)
	}
}

// The reports of sagas a compensation failure's halt ends reach OnHalt:
// they were returned to a caller that dropped them, so no event told of
// them.
func TestCompensationFailureHaltReportsReachOnHalt(t *testing.T) {
	var mu sync.Mutex
	var got []*Report
	r := newRig(t, func(c *Config) {
		c.OnHalt = func(reps []*Report, _ error) { mu.Lock(); got = append(got, reps...); mu.Unlock() }
	})
	other := r.begin(t)
	r.step(t, other, "o1", "base", 10) // a second saga, ended unresolved by the halt
	failing := r.begin(t)
	r.step(t, failing, "f1", "elbow", 30)
	r.drivers["elbow"].fail = func(v float64, n int) error {
		if v == 20 { // every attempt to restore the prior
			return errors.New("elbow jammed")
		}
		return nil
	}
	if _, err := r.e.Abort(failing, r.owner, "test"); err != nil {
		t.Fatal(err)
	}
	if h, _ := r.e.Halted(); !h {
		t.Fatal("a failed compensation did not halt")
	}
	r.e.WaitHalts()
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].Saga != other || got[0].Clean() {
		t.Fatalf("OnHalt got %d reports (%+v), want the other saga's, partial", len(got), got)
	}
}

// firstRecord is the index of the first record that matches, or -1.
func firstRecord(recs []Record, match func(Record) bool) int {
	for i, rec := range recs {
		if match(rec) {
			return i
		}
	}
	return -1
}

// haltOverAnEffectInFlight holds the shoulder's Set of value held until a
// halt has latched, then lets it return. Where the effect stops counting
// as in flight, the halt is let run to its end first whenever it may: if
// the effect's outcome (matched by outcome) is not journaled by then, the
// hook waits for the halt to be applied — the interleaving a loaded
// machine makes by descheduling the effect's goroutine there. start runs
// the step or unwind that sets held. It returns once both are done, and
// checks that the shoulder ends at its safe value 0 in the engine, the
// world and a rebuild of the journal, with the outcome journaled before
// the shoulder's SAFE record.
func haltOverAnEffectInFlight(t *testing.T, r *rig, held float64, outcome func(Record) bool, start func()) {
	t.Helper()
	r.reg.Get("shoulder").Timeout = time.Minute // held as long as the test needs
	entered, release, halted := make(chan struct{}), make(chan struct{}), make(chan struct{})
	r.drivers["shoulder"].fail = func(v float64, _ int) error {
		if v == held {
			close(entered)
			<-release
		}
		return nil
	}
	r.e.effectDoneHook = func() {
		if firstRecord(r.j.all(), outcome) < 0 {
			<-halted
		}
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		start()
	}()
	<-entered
	r.e.Latch("operator pressed stop")
	go func() {
		r.e.WaitHalts()
		close(halted)
	}()
	close(release)
	<-finished
	<-halted

	recs := r.j.all()
	out := firstRecord(recs, outcome)
	safe := firstRecord(recs, func(rec Record) bool { return rec.Type == RecSafe && rec.Actuator == "shoulder" })
	if out < 0 || safe < 0 || out > safe {
		t.Errorf("the outcome of the effect in flight at seq %d, the shoulder's SAFE at seq %d: want the outcome first", out+1, safe+1)
	}
	v, _ := r.e.Commanded("shoulder")
	next := newRig(t, nil)
	r.j.Sync()
	r.j.rebuildInto(t, next.e, len(recs))
	rebuilt, _ := next.e.Commanded("shoulder")
	if world := r.w.snapshot()["shoulder"]; v != 0 || world != 0 || rebuilt != 0 {
		t.Fatalf("after the halt the shoulder is commanded %v, in the world at %v, rebuilt at %v; want its safe value 0 in all three", v, world, rebuilt)
	}
}

// A step whose effect is in flight at a halt and returns after it: its
// outcome and commanded value are recorded before the halt applies the
// safe policies, so the safe value has the last word — in the engine, the
// world and the journal alike (the engine used to believe the step's
// target, journaled APPLIED after the SAFE records, while the servo sat
// at its safe value).
func TestHaltAppliesSafePoliciesAfterAStepInFlight(t *testing.T) {
	r := newRig(t, nil)
	saga := r.begin(t)
	var err error
	haltOverAnEffectInFlight(t, r, 70, func(rec Record) bool {
		return (rec.Type == RecApplied || rec.Type == RecFailed) && rec.Saga == saga && rec.Step == 1
	}, func() {
		_, err = r.e.Step(saga, r.owner, Command{ID: "1", Actuator: "shoulder", Value: 70})
	})
	if CodeOf(err) != CodeHalted {
		t.Fatalf("the step in flight at the halt: %v, want HALTED", err)
	}
}

// The same for a compensation in flight at a halt: its outcome is
// journaled before the SAFE records, so neither the engine nor the
// rebuild takes the compensation's target for where the actuator is.
func TestHaltAppliesSafePoliciesAfterACompensationInFlight(t *testing.T) {
	r := newRig(t, nil)
	saga := r.begin(t)
	r.step(t, saga, "1", "shoulder", 70)
	var rep *Report
	var err error
	haltOverAnEffectInFlight(t, r, 10, func(rec Record) bool {
		return rec.Type == RecCompDone && rec.Saga == saga && rec.Step == 1
	}, func() {
		rep, err = r.e.Abort(saga, r.owner, "the agent gave up")
	})
	if err != nil || rep == nil {
		t.Fatalf("abort: %v %v", rep, err)
	}
}
