package modelcheck

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal/crashfs"
)

// TestCheck runs the model check to a bound that keeps the suite quick
// (`make check` runs the full one) and
// fails on any violation, printing the first counterexamples.
func TestCheck(t *testing.T) {
	bound := 4
	if raceEnabled || testtool.Emulated() {
		// Under the race detector or an emulated ARM CPU (make test-arm)
		// the bound-4 run takes minutes; bound 3 keeps every kind of case.
		bound = 3
	}
	res := Check(Config{MaxSteps: bound, Sagas: 2})
	t.Logf("%d cases: %d crash-free, %d two-saga, %d zone, %d power cuts (%d struck), %d cuts in recovery (%d struck), %d equivalent cut points, %d halts at a sync (%d latched; %d runs laid on), in %v",
		res.Cases, res.Base, res.TwoSaga, res.Zone, res.Crash, res.CrashesStruck, res.RecoveryCrash, res.RecoveryCrashesStruck, res.CrashEquivalent,
		res.HaltSync, res.HaltFired, res.HaltBase, res.Took)
	for i, o := range res.Failed {
		if i == 3 {
			t.Errorf("... and %d more", len(res.Failed)-3)
			break
		}
		t.Errorf("%s", o)
	}
	// Guard against a vacuous pass: the bound must have produced every
	// kind of case, and most cuts must have struck mid-run.
	if res.Base != int64(len(BaseCases(bound))) || res.TwoSaga != int64(len(TwoSagaCases(bound))) || res.Zone != int64(len(ZoneCases(bound))) {
		t.Errorf("ran %d+%d+%d crash-free cases, enumerated %d+%d+%d", res.Base, res.TwoSaga, res.Zone, len(BaseCases(bound)), len(TwoSagaCases(bound)), len(ZoneCases(bound)))
	}
	if res.CrashesStruck < res.Crash/2 || res.RecoveryCrashesStruck < res.RecoveryCrash/2 {
		t.Errorf("too few power cuts struck: %d of %d, %d of %d in recovery", res.CrashesStruck, res.Crash, res.RecoveryCrashesStruck, res.RecoveryCrash)
	}
	// Most halts at a sync must latch (the rest land in the sync of a
	// halt already applied), and every sync of every run has its halt.
	if res.HaltSync == 0 || res.HaltFired < res.HaltSync/2 || res.HaltBase != int64(len(TwoSagaCommitCases(bound))) {
		t.Errorf("halts at a sync: %d cases, %d latched, laid on %d runs of two committing sagas (enumerated %d)", res.HaltSync, res.HaltFired, res.HaltBase, len(TwoSagaCommitCases(bound)))
	}
}

// The enumeration covers the dimensions the check promises, and every case
// id reads back as the same case.
func TestCasesEnumerateAndRoundTrip(t *testing.T) {
	cases := BaseCases(6)
	seen := map[string]bool{}
	shapes := map[Shape]int{}
	orphans, compFails := 0, 0
	for _, c := range cases {
		id := c.String()
		if seen[id] {
			t.Fatalf("case %s enumerated twice", id)
		}
		seen[id] = true
		back, err := ParseCase(id)
		if err != nil || back != c {
			t.Fatalf("case %s reads back as %+v, %v", id, back, err)
		}
		shapes[c.Shape]++
		if c.Orphan > 0 {
			orphans++
		}
		if c.CompFail != 0 {
			compFails++
		}
	}
	if len(shapes) != 4 || orphans == 0 || compFails == 0 {
		t.Errorf("enumeration misses a dimension: shapes %v, %d orphan cases, %d with failing compensations", shapes, orphans, compFails)
	}
	// The inspiring library checks 321 failure shapes for up to 6 steps;
	// the crash-free cases alone must be well past ten times that.
	if len(cases) < 3210/2 {
		t.Errorf("%d crash-free cases for 6 steps", len(cases))
	}
	ft := cases[len(cases)-1]
	ft.FirstTouch = true
	if back, err := ParseCase(ft.String()); err != nil || back != ft {
		t.Fatalf("first-touch case %s reads back as %+v, %v", ft, back, err)
	}
	for _, c := range ZoneCases(6) {
		back, err := ParseCase(c.String())
		if err != nil || back != c {
			t.Fatalf("zone case %s reads back as %+v, %v", c, back, err)
		}
	}
	for _, c := range TwoSagaCases(6) {
		back, err := ParseCase(c.String())
		if err != nil || back != c {
			t.Fatalf("case %s reads back as %+v, %v", c, back, err)
		}
	}
	kinds := map[string]int{}
	for _, c := range append(append(BaseCases(3), TwoSagaCases(3)...), TwoSagaCommitCases(3)...) {
		c.Sagas = max(c.Sagas, 1)
		for _, hc := range HaltCases(c, 4) {
			back, err := ParseCase(hc.String())
			if err != nil || back != hc {
				t.Fatalf("halt case %s reads back as %+v, %v", hc, back, err)
			}
			kinds[fmt.Sprintf("%s/%v", hc.HaltZone, hc.HaltFail)]++
		}
	}
	if len(kinds) != 6 {
		t.Errorf("halt cases miss a kind (full, arm, root; disk alive or dead): %v", kinds)
	}
	for _, bad := range []string{"", "n0.commit.comp0.orphan0.crash0.rcrash0", "n2.f3-failed.comp0.orphan0.crash0.rcrash0",
		"n2.commit.comp8.orphan0.crash0.rcrash0", "n2.f1-weird.comp0.orphan0.crash0.rcrash0", "n2.commit.comp0.orphan0.crash-1.rcrash0",
		"n2.hsync0.commit.comp0.orphan0.crash0.rcrash0", "n2.eio.commit.comp0.orphan0.crash0.rcrash0",
		"n2.zsync1-arm.commit.comp0.orphan0.crash0.rcrash0", "n1.b1.order1.expire1.zsync1-legs.expire.comp0.orphan0.crash0.rcrash0",
		"n1.b1.order1.expire1.zsync1.expire.comp0.orphan0.crash0.rcrash0"} {
		if _, err := ParseCase(bad); err == nil {
			t.Errorf("ParseCase(%q) accepted", bad)
		}
	}
}

// The checks can fail: a world moved behind the engine's back and a
// compensation out of order are each caught.
func TestChecksCatchWrongWorlds(t *testing.T) {
	c := Case{Steps: 3, End: Abort, Sagas: 1}
	if o := Run(c); !o.OK() {
		t.Fatalf("%s", o)
	}

	r := newRobot(c, nil)
	r.devs["elbow"].Set(t.Context(), 42) // nobody asked for this
	r.predictAndCompare(nil)
	if !strings.Contains(strings.Join(r.violation, "\n"), "elbow is at 42") {
		t.Errorf("a moved elbow went unnoticed: %q", r.violation)
	}

	r = newRobot(c, nil)
	r.calls = []call{{kind: compCall, saga: 1, step: 1}, {kind: compCall, saga: 1, step: 3}}
	r.checkLIFO()
	if len(r.violation) != 1 {
		t.Errorf("an out-of-order unwind went unnoticed: %q", r.violation)
	}
}

// TestProgress: the callback is called while the check runs, with counts
// that only grow and an ETA once a share is done; it is not called after
// Check returns.
func TestProgress(t *testing.T) {
	var got []Progress
	var mu sync.Mutex
	res := Check(Config{MaxSteps: 3, Sagas: 2, ProgressEvery: time.Millisecond, Progress: func(p Progress) {
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
	}})
	mu.Lock()
	n := len(got)
	mu.Unlock()
	if n == 0 {
		t.Fatal("Progress was never called")
	}
	time.Sleep(20 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != n {
		t.Errorf("Progress called %d times after Check returned", len(got)-n)
	}
	var prev Progress
	sawETA := false
	for _, p := range got {
		if p.Cases < prev.Cases || p.BaseDone < prev.BaseDone || p.Elapsed < prev.Elapsed {
			t.Fatalf("progress went back: %+v after %+v", p, prev)
		}
		if p.BaseTotal == 0 || p.BaseDone > p.BaseTotal || p.Cases > res.Cases {
			t.Fatalf("progress out of bounds: %+v (cases in all %d)", p, res.Cases)
		}
		if _, ok := p.ETA(); ok {
			sawETA = true
		}
		prev = p
	}
	if !sawETA {
		t.Errorf("no ETA in %d progress calls", len(got))
	}
}

// A halt at a sync lands inside the sync, with the engine's lock released:
// at the first sync (the BEGIN's) the saga is ended by Begin with its
// report (HALTED), its BEGIN durable; with the disk dying there, Begin
// fails, no report names the saga, and the restart hands its id out to
// a new saga, which commits.
func TestHaltAtSyncLandsInsideTheSync(t *testing.T) {
	c := Case{Steps: 1, End: Commit, Sagas: 1, HaltSync: 1}
	o := Run(c)
	if !o.OK() || !o.HaltFired {
		t.Fatalf("halt fired %v:\n%s", o.HaltFired, o)
	}
	if len(o.Reports) != 1 || !strings.Contains(o.Reports[0], "saga 1 (halted: model: e-stop during journal sync 1)") {
		t.Errorf("want the report of saga 1, ended by the halt while it began:\n%s", o)
	}
	for _, cl := range o.Calls {
		if strings.Contains(cl, "forward") {
			t.Errorf("a step moved after the halt: %s", cl)
		}
	}
	c.HaltFail = true
	o = Run(c)
	if !o.OK() || !o.HaltFired || len(o.Reports) != 0 {
		t.Fatalf("halt with the disk dying at the BEGIN's sync: fired %v, %d reports:\n%s", o.HaltFired, len(o.Reports), o)
	}
}

// The new checks can fail: a report naming a saga whose BEGIN is not
// durable, a saga id handed out twice, a committed saga reported.
func TestHaltChecksCatch(t *testing.T) {
	c := Case{Steps: 1, End: Commit, Sagas: 1, HaltSync: 1}
	r := newRobot(c, nil)
	defer r.world.Close()
	p := &proc{fs: crashfs.New()} // an empty disk: no BEGIN is durable
	r.got(p, &rollback.Report{Saga: 7})
	r.handedOut(p, 7)
	r.committed(p, 7)
	r.checkCommitsAndReports()
	got := strings.Join(r.violation, "\n")
	for _, want := range []string{"a report names saga 7, whose BEGIN is not durable", "Begin returned saga 7, whose BEGIN is not durable",
		"Begin handed out saga 7, which a report had already ended", "saga 7 committed"} {
		if !strings.Contains(got, want) {
			t.Errorf("missed %q in:\n%s", want, got)
		}
	}
}
