package recovery_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim"
	"github.com/saga-supervisor/saga-supervisor/internal/leaktest"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/recovery"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
	"github.com/saga-supervisor/saga-supervisor/wal/crashfs"
)

func osOptions(tb testing.TB, dir string, w *sim.World) recovery.Options {
	reg, err := actuators.NewRegistry(
		&actuators.Actuator{Name: "base", Kind: actuators.Servo, Limits: limits.Spec{Min: -90, Max: 90}, Driver: w.Servo("base", 0, 0)},
		&actuators.Actuator{Name: "elbow", Kind: actuators.Servo, Limits: limits.Spec{Min: -90, Max: 90}, Driver: w.Servo("elbow", 0, 0)},
	)
	if err != nil {
		tb.Fatal(err)
	}
	return recovery.Options{Dir: dir, Engine: rollback.Config{Actuators: reg}}
}

func TestSecondOwnerIsRefused(t *testing.T) {
	dir := t.TempDir()
	w := sim.NewMemoryWorld()
	defer w.Close()
	first, err := recovery.Open(osOptions(t, dir, w))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := recovery.Open(osOptions(t, dir, w)); !errors.Is(err, wal.ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := recovery.Open(osOptions(t, dir, w))
	if err != nil {
		t.Fatalf("Open after the owner closed: %v", err)
	}
	again.Close()
}

func TestRefusesCorruptJournal(t *testing.T) {
	dir := t.TempDir()
	w := sim.NewMemoryWorld()
	defer w.Close()
	writeJournal(t, dir, w, 50)
	seg := filepath.Join(dir, "0000000000000001.wal")
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xff}, 300) // inside an early record, with valid records after it
	f.Close()
	_, err = recovery.Open(osOptions(t, dir, w))
	var ce *wal.CorruptionError
	if !errors.As(err, &ce) || !errors.Is(err, wal.ErrCorrupt) {
		t.Fatalf("Open on a corrupt journal: %v, want a CorruptionError", err)
	}
	if _, err := os.Stat(filepath.Join(dir, wal.LockName)); err != nil {
		t.Fatal(err)
	}
	// The refusal released the lock: an operator can inspect and repair.
	if err := wal.TruncateAt(dir, wal.Options{}, ce.Seq); err != nil {
		t.Fatal(err)
	}
	res, err := recovery.Open(osOptions(t, dir, w))
	if err != nil {
		t.Fatalf("after the operator's truncation: %v", err)
	}
	res.Close()
}

// writeJournal commits sagas of two steps until about n records exist.
func writeJournal(tb testing.TB, dir string, w *sim.World, n int) {
	res, err := recovery.Open(osOptions(tb, dir, w))
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Close()
	e := res.Engine
	for i := 0; res.Log.LastSeq() < uint64(n); i++ {
		o := rollback.Owner{Agent: "bench", Lease: "l", Epoch: 1}
		s, err := e.Begin(o)
		if err != nil {
			tb.Fatal(err)
		}
		for j, act := range []string{"base", "elbow"} {
			if _, err := e.Step(s, o, rollback.Command{ID: fmt.Sprint(j), Actuator: act, Value: float64(i % 7)}); err != nil {
				tb.Fatal(err)
			}
		}
		if err := e.Commit(s, o); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkRecovery10k is a start-up on a journal of 10,000 records: lock,
// verify the whole chain, rebuild from every record, finish open sagas.
func BenchmarkRecovery10k(b *testing.B) {
	dir := b.TempDir()
	w := sim.NewMemoryWorld()
	defer w.Close()
	writeJournal(b, dir, w, 10000)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := recovery.Open(osOptions(b, dir, w))
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if res.RebuiltRecords < 10000 {
			b.Fatalf("rebuilt from %d records", res.RebuiltRecords)
		}
		res.Close()
		b.StartTimer()
	}
}

// An actuator its device moved on its own is adopted at the device's value,
// journaled, and still there after a restart; a value within reach of the
// commanded one is not a move.
func TestAdoptSurvivesRestart(t *testing.T) {
	fs := crashfs.New()
	r := newRobot()
	res, err := recovery.Open(options(t, r, fs, rollback.EveryStep))
	if err != nil {
		t.Fatal(err)
	}
	moved := func(v float64) func(float64) (float64, bool) {
		return func(commanded float64) (float64, bool) { return v, v != commanded }
	}
	if ok, err := res.Engine.Adopt("elbow", moved(0), "test"); ok || err != nil {
		t.Fatalf("adopted the value it already had: %v %v", ok, err)
	}
	if ok, err := res.Engine.Adopt("elbow", moved(33), "the board's watchdog"); !ok || err != nil {
		t.Fatalf("Adopt: %v %v", ok, err)
	}
	if v, _ := res.Engine.Commanded("elbow"); v != 33 {
		t.Fatalf("commanded %g after adopting 33", v)
	}
	res.Close()
	res, err = recovery.Open(options(t, r, fs.Crash(crashfs.DropUnsynced()), rollback.EveryStep))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	if v, _ := res.Engine.Commanded("elbow"); v != 33 {
		t.Fatalf("after a restart the elbow is commanded at %g; the journal adopted 33", v)
	}
}

// A recovery told to halt first (an e-stop found pressed at start) moves
// nothing back: the open saga ends unresolved and every actuator goes to its
// safe policy instead.
func TestHaltFirstRecoversWithoutMoving(t *testing.T) {
	fs := crashfs.New()
	r := newRobot()
	res, err := recovery.Open(options(t, r, fs, rollback.EveryStep))
	if err != nil {
		t.Fatal(err)
	}
	o := rollback.Owner{Agent: "a", Lease: "a", Epoch: 1}
	saga, _ := res.Engine.Begin(o)
	for i, step := range []struct {
		act string
		v   float64
	}{{"base", 40}, {"elbow", 50}} {
		if _, err := res.Engine.Step(saga, o, rollback.Command{ID: fmt.Sprint(i), Actuator: step.act, Value: step.v}); err != nil {
			t.Fatal(err)
		}
	}
	img := fs.CutPower(crashfs.DropUnsynced()) // the supervisor dies mid-saga
	res.Close()

	sets := func() uint64 { return r.servos["base"].Sets() + r.servos["elbow"].Sets() }
	before := sets()
	opt := options(t, r, img, rollback.EveryStep)
	opt.HaltFirst = func(*rollback.Engine) string { return "estop: pressed at start" }
	res, err = recovery.Open(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	if got := sets(); got != before {
		t.Errorf("recovery drove the arm %d times while the e-stop was pressed", got-before)
	}
	if len(res.Reports) != 1 || res.Reports[0].Clean() || !res.Reports[0].Recovered {
		t.Fatalf("reports %v; want the open saga ended unresolved", res.Reports)
	}
	for _, st := range res.Reports[0].Steps {
		if st.Bucket != rollback.Unresolved {
			t.Errorf("step %d %s: %s, want unresolved", st.Step, st.Actuator, st.Bucket)
		}
	}
	if h, why := res.Engine.Halted(); !h || why != "estop: pressed at start" {
		t.Errorf("halted %v (%q) after recovery", h, why)
	}
	if snap := r.world.Snapshot(); snap["base"].Commanded != 40 || snap["elbow"].Commanded != 50 {
		t.Errorf("the arm moved: base %g, elbow %g", snap["base"].Commanded, snap["elbow"].Commanded)
	}
}

// Open then Close leaves no goroutine (the engine's halt goroutine, the
// journal's writer) and releases the lock; so does an Open refused
// because another owner holds the journal.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	check := leaktest.Check(t)
	dir := t.TempDir()
	w := sim.NewMemoryWorld()
	defer w.Close()
	writeJournal(t, dir, w, 20)
	res, err := recovery.Open(osOptions(t, dir, w))
	if err != nil {
		t.Fatal(err)
	}
	res.Engine.Latch("a halt in flight at Close")
	if _, err := recovery.Open(osOptions(t, dir, w)); !errors.Is(err, wal.ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	if err := res.Close(); err != nil {
		t.Fatal(err)
	}
	if err := res.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	check()
	again, err := recovery.Open(osOptions(t, dir, w))
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	again.Close()
}

// The journal's disk fails after a committed move: the next journal write
// fails, the engine halts (JOURNAL_FAILED) and sends the elbow to its safe
// value — a move the failed disk cannot record. After a restart the journal says
// 120 while the elbow is at 0. Recovery must find that out before anything
// moves: adopt 0 (journaled), halt with a reason naming the elbow, and no
// later unwind may drive the elbow to 120 (were the restart not halted, a
// new saga would record 120 as the elbow's prior, and its clean abort
// would drive the joint there). The disk fails three ways: full
// (ENOSPC on every call), failing media (writes land in the page cache, but
// fsync reports EIO), and remounted read-only by the kernel after an error
// (EROFS on every call).
func TestStartReconcilesWithTheWorld(t *testing.T) {
	for _, tt := range []struct {
		name  string
		fault func(crashfs.Op) error
	}{
		{"disk full", func(crashfs.Op) error { return syscall.ENOSPC }},
		{"fsync EIO", func(op crashfs.Op) error {
			if op.Kind == crashfs.OpSync || op.Kind == crashfs.OpSyncDir {
				return syscall.EIO
			}
			return nil
		}},
		{"read-only remount", func(crashfs.Op) error { return syscall.EROFS }},
	} {
		t.Run(tt.name, func(t *testing.T) { testStartReconciles(t, tt.fault) })
	}
}

func testStartReconciles(t *testing.T, fault func(crashfs.Op) error) {
	fs := crashfs.New()
	w := sim.NewMemoryWorld()
	defer w.Close()
	elbow := w.Servo("elbow", 0, 0)
	opts := func(fs *crashfs.FS) recovery.Options {
		reg, err := actuators.NewRegistry(
			&actuators.Actuator{Name: "elbow", Kind: actuators.Servo, Limits: limits.Spec{Min: -130, Max: 130},
				Safe: actuators.SafePolicy{Mode: actuators.SafeValue, Value: 0}, Driver: elbow},
			&actuators.Actuator{Name: "base", Kind: actuators.Servo, Limits: limits.Spec{Min: -90, Max: 90}, Driver: w.Servo("base", 0, 0)},
		)
		if err != nil {
			t.Fatal(err)
		}
		return recovery.Options{Dir: "/journal", WAL: wal.Options{FS: fs, SegmentSize: 4096}, Engine: rollback.Config{Actuators: reg}}
	}
	res, err := recovery.Open(opts(fs))
	if err != nil {
		t.Fatal(err)
	}
	o := rollback.Owner{Agent: "a", Lease: "a", Epoch: 1}
	saga, _ := res.Engine.Begin(o)
	if _, err := res.Engine.Step(saga, o, rollback.Command{ID: "1", Actuator: "elbow", Value: 120}); err != nil {
		t.Fatal(err)
	}
	if err := res.Engine.Commit(saga, o); err != nil {
		t.Fatal(err)
	}
	// The disk fails.
	fs.SetFault(fault)
	saga2, err := res.Engine.Begin(o)
	if err == nil {
		_, err = res.Engine.Step(saga2, o, rollback.Command{ID: "2", Actuator: "base", Value: 10})
	}
	if rollback.CodeOf(err) != rollback.CodeJournalFailed {
		t.Fatalf("a write to the failed disk: %v, want JOURNAL_FAILED", err)
	}
	waitFor(t, "the journal-failed halt to send the elbow to its safe value", func() bool { return w.Snapshot()["elbow"].Commanded == 0 })
	img := fs.Crash(crashfs.DropUnsynced())
	res.Close()

	// The restart.
	res, err = recovery.Open(opts(img))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	if len(res.Mismatches) != 1 || res.Mismatches[0] != (rollback.Mismatch{Actuator: "elbow", Journal: 120, Found: 0}) {
		t.Fatalf("mismatches %+v, want the elbow: journal 120, found 0", res.Mismatches)
	}
	h, why := res.Engine.Halted()
	if !h || !strings.Contains(why, "elbow reads 0, the journal says 120") {
		t.Fatalf("after the restart: halted %v (%q)", h, why)
	}
	if v, _ := res.Engine.Commanded("elbow"); v != 0 {
		t.Fatalf("the engine believes the elbow at %g, the world has it at 0", v)
	}
	// The operator looks and resets; the next saga's abort goes back to 0.
	if err := res.Engine.Reset("operator", res.Engine.HaltGen()); err != nil {
		t.Fatal(err)
	}
	saga3, err := res.Engine.Begin(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := res.Engine.Step(saga3, o, rollback.Command{ID: "3", Actuator: "elbow", Value: 50}); err != nil {
		t.Fatal(err)
	}
	if _, err := res.Engine.Abort(saga3, o, "test"); err != nil {
		t.Fatal(err)
	}
	if got := w.Snapshot()["elbow"].Commanded; got != 0 {
		t.Fatalf("the abort drove the elbow to %g; it was at 0 before the saga", got)
	}
	// And the adoption is in the journal: a second restart agrees with the
	// world without halting again for it.
	img2 := img.Crash(crashfs.DropUnsynced())
	res.Close()
	res, err = recovery.Open(opts(img2))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Mismatches) != 0 {
		t.Errorf("second restart: mismatches %+v", res.Mismatches)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// lateServo is a sim servo whose read-back fails until a moment has
// passed: a serial board right after a restart, before its first report
// (drivers/serial: CodeStale, "no report from the MCU yet").
type lateServo struct {
	*sim.Servo
	until time.Time // zero: never readable
}

func (s *lateServo) ReadBack(ctx context.Context) (float64, error) {
	if s.until.IsZero() || time.Now().Before(s.until) {
		return 0, errors.New("no report from the MCU yet in this session")
	}
	return s.Servo.ReadBack(ctx)
}

// Reconcile waits for a board's first report, and a board that never
// reports counts as a mismatch: the start halts. Read before the first
// report, the read fails, and recovery, taking the journal's word, would
// unwind open sagas from where the board's watchdog no longer has the
// actuators.
func TestReconcileWaitsForTheFirstReport(t *testing.T) {
	for _, tt := range []struct {
		name     string
		until    func() time.Time
		wantHalt string
	}{
		{"reports after 300 ms", func() time.Time { return time.Now().Add(300 * time.Millisecond) }, "elbow reads 0, the journal says 60"},
		{"never reports", func() time.Time { return time.Time{} }, "elbow cannot be read back (no report from the MCU yet in this session), the journal says 60"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			w := sim.NewMemoryWorld()
			defer w.Close()
			elbow := &lateServo{Servo: w.Servo("elbow", 0, 0), until: time.Now()}
			opts := func() recovery.Options {
				reg, err := actuators.NewRegistry(
					&actuators.Actuator{Name: "elbow", Kind: actuators.Servo, Limits: limits.Spec{Min: -90, Max: 90}, Driver: elbow},
				)
				if err != nil {
					t.Fatal(err)
				}
				return recovery.Options{Dir: dir, Engine: rollback.Config{Actuators: reg}}
			}
			res, err := recovery.Open(opts())
			if err != nil {
				t.Fatal(err)
			}
			o := rollback.Owner{Agent: "a", Lease: "a", Epoch: 1}
			saga, _ := res.Engine.Begin(o)
			if _, err := res.Engine.Step(saga, o, rollback.Command{ID: "1", Actuator: "elbow", Value: 60}); err != nil {
				t.Fatal(err)
			}
			res.Close() // the saga stays open: a crash
			// The board's watchdog parks the elbow at 0, and the restarted
			// board has not reported yet.
			if err := w.Servo("elbow", 0, 0).Set(context.Background(), 0); err != nil {
				t.Fatal(err)
			}
			elbow.until = tt.until()
			res, err = recovery.Open(opts())
			if err != nil {
				t.Fatal(err)
			}
			defer res.Close()
			h, why := res.Engine.Halted()
			if !h || !strings.Contains(why, tt.wantHalt) {
				t.Fatalf("after the restart: halted %v (%q), want a halt naming %q", h, why, tt.wantHalt)
			}
			if got := w.Snapshot()["elbow"].Commanded; got != 0 {
				t.Fatalf("recovery moved the elbow to %g; the board had it at 0 and nothing may move before an operator looks", got)
			}
		})
	}
}
