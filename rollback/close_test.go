package rollback

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/internal/leaktest"
)

// Close waits for the halt goroutine Latch started — which journals the
// halt first — leaves no goroutine behind, refuses all work after, and is
// idempotent.
func TestCloseWaitsForTheHaltGoroutine(t *testing.T) {
	check := leaktest.Check(t)
	bj := &blockingJournal{memJournal: &memJournal{}, entered: make(chan struct{}, 16), release: make(chan struct{})}
	r := newRig(t, func(c *Config) { c.Journal = bj })
	r.j = bj.memJournal
	saga := r.begin(t)
	r.step(t, saga, "1", "elbow", 40)
	r.step(t, saga, "2", "shoulder", 30)

	bj.armed.Store(true)
	r.e.Latch("operator") // the halt goroutine blocks in the HALT's sync
	<-bj.entered
	closed := make(chan error, 1)
	go func() { closed <- r.e.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while the halt goroutine was still applying the halt", err)
	case <-time.After(50 * time.Millisecond):
	}
	// Latch never waits on Close: it returns while Close is waiting.
	latched := make(chan struct{})
	go func() { r.e.Latch("second, during Close"); close(latched) }()
	select {
	case <-latched:
	case <-time.After(10 * time.Second): // a deadlock check, not a speed check
		t.Fatal("Latch waited on Close")
	}
	bj.armed.Store(false)
	close(bj.release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	// Both halts were applied before Close returned: journaled, and the
	// saga ended unresolved.
	if got := halts(bj.all()); len(got) != 2 {
		t.Fatalf("HALT records %q, want both halts journaled before Close returned", got)
	}
	if len(r.e.OpenSagas()) != 0 {
		t.Fatal("the halt's saga is still open after Close")
	}
	check()

	// After Close: everything that would work or move is refused...
	n := len(bj.all())
	if _, err := r.e.Begin(r.owner); !errors.Is(err, ErrClosed) || CodeOf(err) != CodeHalted {
		t.Fatalf("Begin after Close: %v", err)
	}
	if _, err := r.e.Step(saga, r.owner, Command{ID: "3", Actuator: "elbow", Value: 1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Step after Close: %v", err)
	}
	if err := r.e.Commit(saga, r.owner); !errors.Is(err, ErrClosed) {
		t.Fatalf("Commit after Close: %v", err)
	}
	if _, err := r.e.Abort(saga, r.owner, ""); !errors.Is(err, ErrClosed) {
		t.Fatalf("Abort after Close: %v", err)
	}
	if err := r.e.RecordLease("a", "L", 9); !errors.Is(err, ErrClosed) {
		t.Fatalf("RecordLease after Close: %v", err)
	}
	if err := r.e.Reset("op", r.e.HaltGen()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Reset after Close: %v", err)
	}
	if _, err := r.e.Park("again"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Park after Close: %v", err)
	}
	if _, err := r.e.Recover(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Recover after Close: %v", err)
	}
	if _, err := r.e.Adopt("elbow", func(float64) (float64, bool) { return 5, true }, "x"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Adopt after Close: %v", err)
	}
	r.e.RecordRefusal(saga, r.owner, Command{ID: "4"}, CodeBadRequest, "x")
	if reps := r.e.AbortAll("x"); reps != nil {
		t.Fatalf("AbortAll after Close unwound %d sagas", len(reps))
	}
	// ... a halt still latches at once, starts nothing, and Halt and
	// WaitHalts return instead of waiting for a goroutine that never comes.
	gen := r.e.Latch("after Close")
	if h, _ := r.e.Halted(); !h || gen == 0 {
		t.Fatal("Latch after Close did not latch")
	}
	if _, err := r.e.Halt("after Close, sync"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Halt after Close: %v", err)
	}
	r.e.WaitHalts()
	if got := len(bj.all()); got != n {
		t.Fatalf("%d records journaled after Close", got-n)
	}
	if err := r.e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	check()
}

// An engine that started, stepped, unwound and halted leaves nothing
// running after Close. The halt goroutine is held in the HALT's sync for
// longer than the leak check waits, so a Close that did not wait for it
// would leave it running and fail the check.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	before := leaktest.Take()
	applied := make(chan struct{}, 4)
	bj := &blockingJournal{memJournal: &memJournal{}, entered: make(chan struct{}, 16), release: make(chan struct{})}
	r := newRig(t, func(c *Config) {
		c.Journal = bj
		c.OnHalt = func([]*Report, error) { applied <- struct{}{} }
	})
	r.j = bj.memJournal
	saga := r.begin(t)
	r.step(t, saga, "1", "elbow", 40)
	if _, err := r.e.Abort(saga, r.owner, "done"); err != nil {
		t.Fatal(err)
	}
	saga = r.begin(t)
	r.step(t, saga, "2", "base", 10)
	bj.armed.Store(true)
	r.e.Latch("e-stop")
	<-bj.entered
	hold := time.AfterFunc(400*time.Millisecond, func() { close(bj.release) })
	defer hold.Stop()
	if err := r.e.Close(); err != nil {
		t.Fatal(err)
	}
	if extra := leaktest.Leaked(before, 100*time.Millisecond); len(extra) > 0 {
		t.Fatalf("Close left %d goroutine(s) running:\n\n%s", len(extra), strings.Join(extra, "\n\n"))
	}
	select {
	case <-applied:
	default:
		t.Fatal("Close returned before the halt was applied")
	}
}

// Concurrent Closes and Latches: no race (go test -race), no deadlock,
// nothing left running.
func TestCloseRacesLatch(t *testing.T) {
	check := leaktest.Check(t)
	r := newRig(t, nil)
	done := make(chan struct{})
	for i := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			if i%2 == 0 {
				r.e.Latch("flood")
			} else {
				r.e.Close()
			}
		}()
	}
	for range 8 {
		<-done
	}
	r.e.Close()
	check()
}
