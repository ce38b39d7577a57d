package rollback

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
)

// An effect — a step's or a compensation's — stays in flight until its
// outcome is recorded: journaled, and its commanded value set. A halt
// waits for the effects in flight, then journals and applies the safe
// policies. An effect counted out of flight before its outcome let a halt
// go first, and the late outcome then overwrote the safe value: the engine
// took the actuator to be at the step's target, where the halt had sent it
// to its safe value, and the outcome followed the SAFE records in the
// journal. Under qemu (make test-arm) the step's goroutine was descheduled
// between the two, and replay's TestShortenedJournalCheckpointInsideAHalt
// found shoulder commanded 77 against the journal's 10.
//
// These tests take the engine's lock inside the driver's Set, so that the
// effect's goroutine returns from it and blocks on that lock; once it is
// seen blocked there, a wait for the effects in flight (what a halt does)
// must still be waiting.

func TestStepInFlightUntilItsOutcomeIsRecorded(t *testing.T) {
	r := newRig(t, nil)
	r.reg.Get("shoulder").Timeout = time.Minute // returning late would be in doubt
	saga := r.begin(t)
	locked := lockAtSet(r, "shoulder", 30)
	done := make(chan error, 1)
	go func() {
		_, err := r.e.Step(saga, r.owner, Command{ID: "1", Actuator: "shoulder", Value: 30})
		done <- err
	}()
	checkInFlightUntilRecorded(t, r, "rollback.(*Engine).Step(", locked, done)
	if c, _ := r.e.Commanded("shoulder"); c != 30 {
		t.Errorf("shoulder commanded %v, want 30", c)
	}
}

func TestCompensationInFlightUntilItsOutcomeIsRecorded(t *testing.T) {
	r := newRig(t, nil)
	r.reg.Get("shoulder").Timeout = time.Minute
	saga := r.begin(t)
	r.step(t, saga, "1", "shoulder", 30)
	locked := lockAtSet(r, "shoulder", 10) // the compensation, back to the prior
	done := make(chan error, 1)
	go func() {
		rep, err := r.e.Abort(saga, r.owner, "test")
		if err == nil && !rep.Clean() {
			t.Errorf("unwind not clean: %+v", rep)
		}
		done <- err
	}()
	checkInFlightUntilRecorded(t, r, "rollback.(*Engine).compensateLocked(", locked, done)
	if c, _ := r.e.Commanded("shoulder"); c != 10 {
		t.Errorf("shoulder commanded %v, want 10", c)
	}
}

// lockAtSet makes the driver of act take the engine's lock when it is set
// to v, and return; the channel is closed then.
func lockAtSet(r *rig, act string, v float64) <-chan struct{} {
	locked := make(chan struct{})
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	r.w.check = func(a string, value float64) {
		if a == act && value == v {
			r.e.mu.Lock()
			close(locked)
		}
	}
	return locked
}

// checkInFlightUntilRecorded waits for a goroutine in fn to be blocked on
// the engine's lock after its effect returned, checks that the effect is
// still in flight, then lets it go and waits for done.
func checkInFlightUntilRecorded(t *testing.T, r *rig, fn string, locked <-chan struct{}, done chan error) {
	t.Helper()
	<-locked // after the effect's inflight.Add, for the race detector
	for deadline := time.Now().Add(testtool.Slow(10 * time.Second)); !blockedOnLock(fn); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			r.e.mu.Unlock()
			t.Fatalf("no goroutine in %s blocked on the engine's lock after its effect", fn)
		}
	}
	out := make(chan struct{})
	go func() {
		r.e.inflight.Wait()
		close(out)
	}()
	select {
	case <-out:
		t.Error("the effect was out of flight before its outcome was recorded: a halt could journal and apply the safe policies first, and the outcome overwrite them")
	case <-time.After(testtool.Slow(300 * time.Millisecond)):
	}
	r.e.mu.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	<-out
}

// blockedOnLock reports whether a goroutine in fn (and not in a driver) is
// blocked in sync.Mutex.Lock.
func blockedOnLock(fn string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) && strings.Contains(g, "sync.(*Mutex).Lock") && !strings.Contains(g, "fakeDriver") {
			return true
		}
	}
	return false
}
