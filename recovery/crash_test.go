package recovery_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/recovery"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
	"github.com/saga-supervisor/saga-supervisor/wal/crashfs"
)

const journalDir = "/journal"

// errPowerOff is what a dead process's drivers answer. They drive nothing,
// so it wraps actuators.ErrNotApplied.
var errPowerOff = fmt.Errorf("power off: the computer is dead: %w", actuators.ErrNotApplied)

// poweredDriver models the robot computer's power: once the file system's
// power is cut, the supervisor that was running can no longer move anything.
// The physical world (the sim) lives on across the crash.
type poweredDriver struct {
	actuators.Driver
	fs *crashfs.FS
}

func (d poweredDriver) Set(ctx context.Context, v float64) error {
	if d.fs.AfterCrash() != nil {
		return errPowerOff
	}
	return d.Driver.Set(ctx, v)
}

func (d poweredDriver) Halt() error {
	if d.fs.AfterCrash() != nil {
		return errPowerOff
	}
	return d.Driver.Halt()
}

var jointNames = []string{"base", "shoulder", "elbow", "gripper"}

// robot is a sim arm whose world persists across simulated crashes.
type robot struct {
	world  *sim.World
	servos map[string]*sim.Servo
}

func newRobot() *robot {
	r := &robot{world: sim.NewMemoryWorld(), servos: map[string]*sim.Servo{}}
	for _, n := range jointNames {
		r.servos[n] = r.world.Servo(n, 0, 0)
	}
	return r
}

// registry wires the arm to a supervisor running on fs.
func (r *robot) registry(t *testing.T, fs *crashfs.FS) *actuators.Registry {
	var list []*actuators.Actuator
	for _, n := range jointNames {
		list = append(list, &actuators.Actuator{Name: n, Kind: actuators.Servo, Limits: limits.Spec{Min: -90, Max: 90},
			Safe: actuators.SafePolicy{Mode: actuators.SafeHold}, Timeout: 5 * time.Millisecond,
			Driver: poweredDriver{Driver: r.servos[n], fs: fs}})
	}
	reg, err := actuators.NewRegistry(list...)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func options(t *testing.T, r *robot, fs *crashfs.FS, d rollback.Durability) recovery.Options {
	return recovery.Options{Dir: journalDir,
		WAL:    wal.Options{FS: fs, SegmentSize: 1024, FlushDelay: time.Millisecond},
		Engine: rollback.Config{Actuators: r.registry(t, fs), Durability: d, RetryBackoff: time.Microsecond}}
}

// scenario drives sagas that commit, fault, retry a compensation, go in
// doubt, and one left open. It stops at the first error: after the power
// cut the engine refuses everything.
func scenario(e *rollback.Engine, r *robot) error {
	type step struct {
		act string
		v   float64
	}
	run := func(agent string, steps []step, commit bool) error {
		o := rollback.Owner{Agent: agent, Lease: agent, Epoch: 1}
		s, err := e.Begin(o)
		if err != nil {
			return err
		}
		for i, st := range steps {
			_, err := e.Step(s, o, rollback.Command{ID: fmt.Sprint(i), Actuator: st.act, Value: st.v})
			switch rollback.CodeOf(err) {
			case rollback.CodeStepFailed, rollback.CodeStepInDoubt:
				return nil // unwound
			case rollback.Code(limits.LimitMax):
				continue // refused, nothing moved; the saga goes on
			}
			if err != nil {
				return err
			}
		}
		if commit {
			return e.Commit(s, o)
		}
		return nil
	}
	if err := run("a", []step{{"base", 10}, {"shoulder", 20}}, true); err != nil {
		return err
	}
	r.servos["gripper"].FailOnNth(1)
	if err := run("b", []step{{"base", 30}, {"elbow", 40}, {"gripper", 30}}, true); err != nil {
		return err
	}
	r.servos["gripper"].Clear()
	// The elbow's first compensation fails once: a retry settles it.
	var failed atomic.Bool
	r.servos["elbow"].FailWhen(func(v float64) bool { return v == 0 && !failed.Swap(true) })
	if err := run("c", []step{{"shoulder", 50}, {"elbow", 60}, {"base", 200}}, false); err != nil {
		return err
	}
	o := rollback.Owner{Agent: "c", Lease: "c", Epoch: 1}
	for _, id := range e.OpenSagas() {
		if _, err := e.Abort(id, o, "agent gave up"); err != nil {
			return err
		}
	}
	r.servos["elbow"].Clear()
	r.servos["elbow"].HangNext(true) // the effect happens; the driver never answers
	if err := run("d", []step{{"base", 5}, {"elbow", 15}}, true); err != nil {
		return err
	}
	r.servos["elbow"].Clear()
	// Left open: the crash (or the end of the test) finds it in flight.
	return run("e", []step{{"shoulder", 70}, {"base", 80}}, false)
}

// expectation reads the recovered journal and says where each actuator must
// be: committed steps stand, clean unwinds leave nothing behind. ok is false
// for an actuator touched by a partial unwind (its report says so).
func expectation(t *testing.T, fs *crashfs.FS) (want map[string]float64, known map[string]bool) {
	t.Helper()
	want, known = map[string]float64{}, map[string]bool{}
	for _, n := range jointNames {
		known[n] = true
	}
	type stp struct {
		act    string
		target float64
		failed bool
	}
	steps := map[uint64][]stp{}
	err := wal.Scan(journalDir, wal.Options{FS: fs}, 1, func(wr wal.Record) error {
		r, err := rollback.DecodeRecord(wr.Type, wr.Payload)
		if err != nil {
			return err
		}
		switch r.Type {
		case rollback.RecIntent:
			steps[r.Saga] = append(steps[r.Saga], stp{act: r.Actuator, target: r.Target})
		case rollback.RecFailed:
			if r.Flags&rollback.FlagInDoubt == 0 {
				steps[r.Saga][r.Step-1].failed = true
			}
		case rollback.RecCommit:
			for _, s := range steps[r.Saga] {
				if !s.failed {
					want[s.act] = s.target
				}
			}
		case rollback.RecEnd:
			if r.Code != "clean" {
				for _, s := range steps[r.Saga] {
					known[s.act] = false
				}
			}
		case rollback.RecSafe:
			known[r.Actuator] = false
		}
		return nil
	})
	if err != nil {
		t.Fatalf("scanning the recovered journal: %v", err)
	}
	return want, known
}

// checkRecovered recovers the crash image and checks the invariants.
func checkRecovered(t *testing.T, label string, r *robot, img *crashfs.FS, d rollback.Durability, rng *rand.Rand, nested bool) {
	t.Helper()
	// Faults the scenario armed are test scaffolding, not physics: a cut
	// scenario may have armed one it never used.
	for _, s := range r.servos {
		s.Clear()
	}
	if nested {
		// A crash during recovery itself: recovery must be restartable. The
		// cut goes on a copy; if recovery finishes before the cut point, the
		// copy (recovered) is what the final recovery opens.
		tmp := img.Crash(crashfs.KeepAll())
		tmp.CutPowerAt(1+rng.IntN(40), crashfs.DropUnsynced())
		if res, err := recovery.Open(options(t, r, tmp, d)); err == nil {
			res.Close()
		}
		if after := tmp.AfterCrash(); after != nil {
			img = after
			label += " +crash in recovery"
		} else {
			img = tmp.Crash(crashfs.KeepAll())
		}
	}
	res, err := recovery.Open(options(t, r, img, d))
	if err != nil {
		t.Fatalf("%s: recovery refused: %v\n%s", label, err, img)
	}
	if open := res.Engine.OpenSagas(); len(open) != 0 {
		t.Errorf("%s: sagas %v open after recovery", label, open)
	}
	for _, rep := range res.Reports {
		if !rep.Clean() {
			t.Errorf("%s: recovery unwind partial:\n%s", label, rep)
		}
	}
	if err := res.Close(); err != nil {
		t.Fatalf("%s: close: %v", label, err)
	}
	if vr, err := wal.Verify(journalDir, wal.Options{FS: img}); err != nil || !vr.OK() {
		t.Fatalf("%s: journal does not verify after recovery: %+v %v", label, vr, err)
	}
	h := rollback.NewHistory()
	wal.Scan(journalDir, wal.Options{FS: img}, 1, func(wr wal.Record) error {
		rec, err := rollback.DecodeRecord(wr.Type, wr.Payload)
		if err == nil {
			h.Add(rec)
		}
		return err
	})
	if u := h.Unfinished(); len(u) != 0 {
		t.Errorf("%s: journal shows %d unfinished sagas after recovery", label, len(u))
	}
	want, known := expectation(t, img)
	snap := r.world.Snapshot()
	for _, n := range jointNames {
		if !known[n] {
			continue
		}
		if got := snap[n].Commanded; got != want[n] {
			t.Errorf("%s: %s is at %g, journal says it must be at %g", label, n, got, want[n])
		}
	}
}

// TestCrashAtEveryJournalOperation cuts the power before each mutating file
// operation of the scenario in turn (writes, syncs, renames, directory
// syncs), under each crash injector and both durability modes, then
// recovers — sometimes crashing again during recovery — and checks that the
// journal verifies, no saga is left open, every unwind recovery ran is clean
// and every actuator is where the durable journal says it must be.
func TestCrashAtEveryJournalOperation(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	injectors := []crashfs.Injector{crashfs.DropUnsynced(), crashfs.TearAt(512), crashfs.TearAt(4096), crashfs.ZeroExtend(),
		crashfs.KeepRandomPrefix(rand.New(rand.NewPCG(3, 5)))}
	trials := 0
	for _, d := range []rollback.Durability{rollback.EveryStep, rollback.FirstTouch} {
		for _, inj := range injectors {
			for n := 1; ; n++ {
				fs := crashfs.New()
				r := newRobot()
				fs.CutPowerAt(n, inj)
				res, err := recovery.Open(options(t, r, fs, d))
				if err == nil {
					scenario(res.Engine, r)
					res.Close()
				}
				img := fs.AfterCrash()
				done := img == nil
				if done {
					// The scenario finished before op n: crash at its end.
					img = fs.CutPower(inj)
					checkScenarioRan(t, img)
				}
				label := fmt.Sprintf("%s/%s/cut at op %d", d, inj.Name(), n)
				checkRecovered(t, label, r, img, d, rng, n%3 == 0)
				r.world.Close()
				trials++
				if t.Failed() || done {
					break
				}
			}
		}
	}
	t.Logf("%d crash points recovered", trials)
}

// checkScenarioRan guards the test against passing vacuously: an uncut run
// must show every shape the scenario is meant to produce.
func checkScenarioRan(t *testing.T, fs *crashfs.FS) {
	t.Helper()
	h := rollback.NewHistory()
	wal.Scan(journalDir, wal.Options{FS: fs}, 1, func(wr wal.Record) error {
		rec, err := rollback.DecodeRecord(wr.Type, wr.Payload)
		if err == nil {
			h.Add(rec)
		}
		return err
	})
	if len(h.Sagas) != 5 {
		t.Fatalf("scenario made %d sagas, want 5", len(h.Sagas))
	}
	states := []rollback.SagaState{rollback.SagaCommitted, rollback.SagaUnwound, rollback.SagaUnwound, rollback.SagaUnwound, rollback.SagaOpen}
	for i, s := range h.Sagas {
		if s.State != states[i] {
			t.Errorf("saga %d is %s, want %s", s.ID, s.State, states[i])
		}
	}
	if n := len(h.Sagas[2].Refusals); n != 1 {
		t.Errorf("saga 3 has %d refusals, want 1", n)
	}
	if st := h.Sagas[2].Steps[1]; st.Attempts != 2 || st.Bucket != rollback.Compensated {
		t.Errorf("saga 3 elbow: %d attempts, %s; want a retried compensation", st.Attempts, st.Bucket)
	}
	if st := h.Sagas[3].Steps[1]; st.Outcome != rollback.InDoubt || st.Bucket != rollback.Compensated {
		t.Errorf("saga 4 elbow: %s, %s; want in doubt, compensated", st.Outcome, st.Bucket)
	}
}
