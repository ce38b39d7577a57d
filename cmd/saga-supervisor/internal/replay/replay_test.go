package replay

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/rollback"
)

const (
	armMax  = 120 // shoulder's max in the journal's config
	armRate = 500 // elbow's max_rate (deg/s) in the journal's config
)

// incident writes a journal with a bit of everything the daemon journals:
// commits, an agent's abort, limit, supply, deadline, duplicate and
// unknown-actuator refusals, a refusal before the gate, a failed step, an
// in-doubt step, a compensation that fails until the fallback and its
// halt, an operator's halt and reset, a crash and recovery, and an orderly
// stop.
func incident(t *testing.T, w *writer) {
	t.Helper()
	ms := time.Millisecond

	s1 := w.begin("planner")
	w.mustStep(s1, 20*ms, "shoulder", 30)
	w.mustStep(s1, 20*ms, "elbow", 60)
	w.mustStep(s1, 20*ms, "elbow", 90) // slew-clamped
	if _, err := w.step(s1, 20*ms, "shoulder", 150); rollback.CodeOf(err) != rollback.Code(limits.LimitMax) {
		t.Fatalf("shoulder 150: %v, want LIMIT_MAX", err)
	}
	w.mustStep(s1, 20*ms, "shoulder", 90)
	id, _ := w.step(s1, 20*ms, "wrist", 1)                                          // ACTUATOR_UNKNOWN
	w.stepCmd(s1, 20*ms, rollback.Command{ID: id, Actuator: "shoulder", Value: 91}) // DUPLICATE_ID
	w.stepCmd(s1, 20*ms, rollback.Command{Actuator: "shoulder", Value: 92, Deadline: w.clock()})
	w.commit(s1)

	s2 := w.begin("planner")
	w.mustStep(s2, 20*ms, "gripper", 30)
	w.mustStep(s2, 20*ms, "shoulder", 100)
	w.tick(5 * ms)
	if _, err := w.e.Abort(s2.id, s2.owner, "the agent changed its mind"); err != nil {
		t.Fatal(err)
	}

	s3 := w.begin("planner")
	w.sup.set("battery", 6.5) // below gripper's 6.6
	if _, err := w.step(s3, 20*ms, "gripper", 40); rollback.CodeOf(err) != rollback.Code(limits.SupplyLow) {
		t.Fatalf("gripper on a low battery: %v", err)
	}
	w.sup.set("battery", 7.5)
	w.mustStep(s3, 20*ms, "gripper", 40)
	w.e.RecordRefusal(s3.id, s3.owner, rollback.Command{ID: "x1", Actuator: "shoulder", Value: 5}, "LEASE_EXPIRED", "step: lease expired")
	// Refusals journaled as counts: the lanes', and the gate's beyond an
	// agent's budget (no command id, no actuator).
	w.e.RecordRefusal(0, rollback.Owner{Agent: "planner"}, rollback.Command{}, "RATE_LIMITED", "3 step requests refused with RATE_LIMITED since the last count")
	w.e.RecordRefusal(0, rollback.Owner{Agent: "planner"}, rollback.Command{}, rollback.Code(limits.LimitMax),
		"5 step requests refused with LIMIT_MAX since the last count (beyond the refusals journaled one by one)")
	w.servos["shoulder"].FailOnNth(1)
	if _, err := w.step(s3, 20*ms, "shoulder", 70); rollback.CodeOf(err) != rollback.CodeStepFailed {
		t.Fatalf("failing shoulder step: %v", err)
	}

	s4 := w.begin("controller")
	elbowPrior, _ := w.e.Commanded("elbow")
	w.mustStep(s4, 200*ms, "elbow", 80)
	w.mustStep(s4, 20*ms, "shoulder", 50)
	w.servos["elbow"].FailWhen(func(v float64) bool { return v == elbowPrior }) // its compensation cannot succeed
	w.servos["gripper"].FailOnNth(1)
	if _, err := w.step(s4, 20*ms, "gripper", 20); rollback.CodeOf(err) != rollback.CodeStepFailed {
		t.Fatalf("failing gripper step: %v", err)
	}
	if h, _ := w.e.Halted(); !h {
		t.Fatal("a compensation that fails to the fallback did not halt")
	}
	w.servos["elbow"].Clear()
	w.tick(time.Second)
	if err := w.e.Reset("operator", w.e.HaltGen()); err != nil {
		t.Fatal(err)
	}

	s5 := w.begin("planner")
	w.servos["gripper"].HangNext(false) // the driver times out: in doubt
	if _, err := w.step(s5, 20*ms, "gripper", 25); rollback.CodeOf(err) != rollback.CodeStepInDoubt {
		t.Fatalf("hanging gripper step: %v", err)
	}

	s6 := w.begin("planner")
	w.mustStep(s6, 20*ms, "shoulder", 40)
	w.mustStep(s6, 20*ms, "elbow", 70)
	w.flush()
	w.crash()
	w.tick(3 * time.Second)
	w.restart()

	s7 := w.begin("planner")
	w.mustStep(s7, 20*ms, "shoulder", 60)
	w.mustStep(s7, 20*ms, "elbow", 100)
	w.mustStep(s7, 20*ms, "elbow", 130) // slew-clamped
	w.commit(s7)

	s8 := w.begin("planner")
	w.mustStep(s8, 20*ms, "shoulder", 110)
	w.tick(5 * ms)
	w.e.Halt("operator pressed stop")
	if _, err := w.step(s8, 20*ms, "shoulder", 20); rollback.CodeOf(err) != rollback.CodeHalted {
		t.Fatalf("step while halted: %v", err)
	}
	w.tick(time.Second)
	if err := w.e.Reset("operator", w.e.HaltGen()); err != nil {
		t.Fatal(err)
	}

	s9 := w.begin("planner")
	w.mustStep(s9, 20*ms, "shoulder", 35)
	w.tick(5 * ms)
	w.e.AbortAll("supervisor stopping")
	w.e.Park("supervisor stopping")
	w.flush()
	w.crash()
	w.tick(2 * time.Second)
	w.restart()

	s10 := w.begin("planner")
	w.mustStep(s10, 20*ms, "shoulder", 45)
	w.mustStep(s10, 20*ms, "gripper", 10)
	w.commit(s10)
	w.flush()
}

// replayJSON runs the command with --json and decodes its result.
func replayJSON(t *testing.T, args ...string) (int, *Result) {
	t.Helper()
	code, out, err := run(t, append(args, "--json")...)
	var res Result
	if jerr := json.Unmarshal([]byte(out), &res); jerr != nil {
		t.Fatalf("exit %d (%v): output is not a JSON result: %v\n%s", code, err, jerr, out)
	}
	return code, &res
}

// A journal the real engine wrote under a config replays under the same
// config with no difference — through a crash and recovery, an orderly
// stop, failed and in-doubt steps, a failed compensation and halts — and
// the journal is left exactly as it was, the daemon's log still open on it.
func TestSameConfigSameResult(t *testing.T) {
	cfg, path := armConfig(t, armMax, armRate)
	w := newWriter(t, cfg)
	incident(t, w)
	before := tree(t, w.dir)

	code, res := replayJSON(t, "--wal", w.dir, "--config", path, "--time-tolerance", "0")
	if code != 0 || res.Summary.Differs {
		t.Fatalf("exit %d, want 0; summary: %s\n%+v", code, res.Summary.Line, res)
	}
	// The replay must have done the work, not skipped it.
	s := res.Summary
	if s.Steps < 20 || s.Restarts != 2 || s.InjectedFaults < 4 || s.Halts < 1 || s.Resets != 2 || s.Aborts < 2 || s.Commits < 3 {
		t.Errorf("the replay did less than the journal holds: %+v", s)
	}
	if want := map[string]int{"LEASE_EXPIRED": 1, "RATE_LIMITED": 3, "LIMIT_MAX": 5}; !reflect.DeepEqual(res.NotReplayed, want) {
		t.Errorf("refusals not replayed: %v, want %v", res.NotReplayed, want)
	}
	var moved bool
	for _, p := range res.Final {
		if p.Journal != Num(cfg.Actuators[p.Actuator].Initial) {
			moved = true
		}
	}
	if !moved {
		t.Errorf("no actuator moved from its initial value: the comparison proves nothing: %+v", res.Final)
	}
	if after := tree(t, w.dir); after != before {
		t.Errorf("the replay changed the journal directory:\nbefore %s\nafter  %s", before, after)
	}

	// Under the embedded default config (no shoulder 0..120 with these
	// safe values) the same journal does differ: the comparison can fail.
	code, res = replayJSON(t, "--wal", w.dir)
	if code != 1 || !res.Summary.Differs {
		t.Errorf("under another config: exit %d, summary %s; want 1", code, res.Summary.Line)
	}
}

// Under a config whose shoulder max is lower, exactly the shoulder commands
// served above it are refused now, with their seqs; under a higher one,
// the command refused LIMIT_MAX then is served now.
func TestChangedAngleLimit(t *testing.T) {
	cfg, _ := armConfig(t, armMax, armRate)
	w := newWriter(t, cfg)
	incident(t, w)
	recs := records(t, w.dir)

	const tighter = 60
	_, tight := armConfig(t, tighter, armRate)
	var want []uint64
	for _, r := range recs {
		if r.Type == rollback.RecIntent && r.Actuator == "shoulder" && r.Requested > tighter {
			want = append(want, r.seq)
		}
	}
	if len(want) < 3 {
		t.Fatalf("the journal has %d shoulder commands above %d: the test needs several", len(want), tighter)
	}
	code, res := replayJSON(t, "--wal", w.dir, "--config", tight)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	var got []uint64
	for _, c := range res.RefusedNow {
		got = append(got, c.Seq)
		if c.Now.Code != string(limits.LimitMax) || c.Actuator != "shoulder" || !c.Then.Served || float64(c.Requested) <= tighter {
			t.Errorf("seq %d: %+v", c.Seq, c)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("refused now at seqs %v, want %v", got, want)
	}
	if len(res.ServedNow)+len(res.ClampedDifferently) != 0 {
		t.Errorf("other differences: served now %+v, clamped %+v", res.ServedNow, res.ClampedDifferently)
	}
	var shoulder bool
	for _, d := range res.Divergence {
		shoulder = shoulder || d.Actuator == "shoulder" && d.Seq > want[0]
	}
	if !shoulder {
		t.Errorf("no divergence of the shoulder after seq %d: %+v", want[0], res.Divergence)
	}

	_, loose := armConfig(t, 180, armRate)
	code, res = replayJSON(t, "--wal", w.dir, "--config", loose)
	if code != 1 || len(res.ServedNow) != 1 || float64(res.ServedNow[0].Requested) != 150 || res.ServedNow[0].Then.Code != string(limits.LimitMax) {
		t.Errorf("under max 180: exit %d, served now %+v; want the shoulder 150 refused then", code, res.ServedNow)
	}
}

// elbowRun writes a saga of elbow steps that the slew limit clamps.
func elbowRun(t *testing.T, w *writer) {
	t.Helper()
	s := w.begin("planner")
	w.mustStep(s, 10*time.Millisecond, "elbow", 30) // the first step: no time known, no slew check
	for i, v := range []float64{60, 10, 100, 125, 40, 0, 80} {
		w.mustStep(s, time.Duration(30+10*i)*time.Millisecond, "elbow", v)
	}
	w.commit(s)
	w.flush()
}

// A changed max_rate clamps targets differently: the replay reports the
// steps whose target moved, and each new target is what package limits
// decides under the new rate from the replay's previous value and the
// journal's times.
func TestChangedSlewLimit(t *testing.T) {
	cfg, _ := armConfig(t, armMax, armRate)
	w := newWriter(t, cfg)
	elbowRun(t, w)
	const slower = 200
	slowCfg, slow := armConfig(t, armMax, slower)

	// The oracle: the elbow's steps under the slower rate, by limits alone.
	spec := slowCfg.Actuators["elbow"].LimitsSpec()
	prev := limits.Prev{Value: slowCfg.Actuators["elbow"].Initial, Known: true}
	want := map[uint64]float64{}
	for _, r := range records(t, w.dir) {
		if r.Type != rollback.RecIntent {
			continue
		}
		at := time.Unix(0, r.UnixNano)
		v := limits.Check(spec, prev, r.Requested, at)
		if !v.OK() {
			t.Fatalf("seq %d: the oracle refuses: %s", r.seq, v.Message())
		}
		if v.Value != r.Target {
			want[r.seq] = v.Value
		}
		prev = limits.Prev{Value: v.Value, At: at, Known: true}
	}
	if len(want) < 3 {
		t.Fatalf("only %d steps clamp differently: the test needs several", len(want))
	}
	code, res := replayJSON(t, "--wal", w.dir, "--config", slow)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	got := map[uint64]float64{}
	for _, c := range res.ClampedDifferently {
		got[c.Seq] = float64(*c.Now.Target)
		if c.Then.Target == nil || *c.Then.Target == *c.Now.Target || !c.Then.Clamped {
			t.Errorf("seq %d: %+v", c.Seq, c)
		}
	}
	if len(got) != len(want) {
		t.Errorf("clamped differently at %v, want %v", got, want)
	}
	for seq, v := range want {
		if got[seq] != v {
			t.Errorf("seq %d: target now %v, want %v", seq, got[seq], v)
		}
	}
	if len(res.RefusedNow)+len(res.ServedNow) != 0 {
		t.Errorf("refusals changed: %+v %+v", res.RefusedNow, res.ServedNow)
	}
}

// A window reports only what lies in it: commands outside it are replayed
// (the world must reach the window's start) but not reported, a saga open
// at its start is replayed from its BEGIN and its earlier commands are
// marked, and a window by time selects what the same window by seq does.
func TestWindow(t *testing.T) {
	cfg, _ := armConfig(t, armMax, armRate)
	w := newWriter(t, cfg)
	ms := time.Millisecond
	var ids []string
	for range 3 {
		s := w.begin("planner")
		ids = append(ids, w.mustStep(s, 20*ms, "shoulder", 100), w.mustStep(s, 20*ms, "shoulder", 20))
		w.commit(s)
	}
	open := w.begin("planner") // open across the window's start
	early := w.mustStep(open, 20*ms, "shoulder", 110)
	ids = append(ids, early)
	late := w.begin("planner")
	for range 2 {
		ids = append(ids, w.mustStep(late, 20*ms, "elbow", 50))
	}
	inside := w.mustStep(open, 20*ms, "shoulder", 105)
	w.commit(open)
	w.commit(late)
	s := w.begin("planner")
	after := w.mustStep(s, 20*ms, "shoulder", 115)
	w.commit(s)
	w.flush()
	recs := records(t, w.dir)
	_, tight := armConfig(t, 60, armRate)

	from := seqOf(t, recs, ids[len(ids)-1]) // the late saga's second step
	to := seqOf(t, recs, inside) + 1        // and the open saga's step after it
	code, res := replayJSON(t, "--wal", w.dir, "--config", tight, "--from", strconv.FormatUint(from, 10), "--to", strconv.FormatUint(to, 10))
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if res.Window.FromSeq != from || res.Window.ToSeq != to || res.Window.StartSeq >= from {
		t.Errorf("window %+v, want %d..%d starting before %d", res.Window, from, to, from)
	}
	var openIDs []uint64
	for _, o := range res.Window.OpenAtStart {
		openIDs = append(openIDs, o.Saga)
	}
	if !slices.Equal(openIDs, []uint64{open.id, late.id}) {
		t.Errorf("open at the start: %+v, want sagas %d and %d", res.Window.OpenAtStart, open.id, late.id)
	}
	var got []uint64
	for _, c := range res.RefusedNow {
		got = append(got, c.Seq)
		inWindow := c.Seq >= from && c.Seq <= to
		if inWindow == c.BeforeWindow || (c.BeforeWindow && !slices.Contains(openIDs, c.Saga)) {
			t.Errorf("seq %d (saga %d) reported, before the window %v, window %d..%d", c.Seq, c.Saga, c.BeforeWindow, from, to)
		}
	}
	want := []uint64{seqOf(t, recs, early), seqOf(t, recs, inside)}
	if !slices.Equal(got, want) {
		t.Errorf("refused now at %v, want %v (not %d, after the window)", got, want, seqOf(t, recs, after))
	}

	// The same window by time.
	byTime := func(seq uint64) string {
		for _, r := range recs {
			if r.seq == seq {
				return time.Unix(0, r.UnixNano).UTC().Format(time.RFC3339Nano)
			}
		}
		t.Fatalf("no seq %d", seq)
		return ""
	}
	_, res2 := replayJSON(t, "--wal", w.dir, "--config", tight, "--from", byTime(from), "--to", byTime(to))
	if !reflect.DeepEqual(res2.Window, res.Window) || !slices.EqualFunc(res2.RefusedNow, res.RefusedNow, func(a, b Command) bool { return a.Seq == b.Seq }) {
		t.Errorf("by time: window %+v refused %+v; by seq: %+v %+v", res2.Window, res2.RefusedNow, res.Window, res.RefusedNow)
	}

	for _, bad := range [][]string{
		{"--from", strconv.FormatUint(to, 10), "--to", strconv.FormatUint(from, 10)},
		{"--from", strconv.FormatUint(recs[len(recs)-1].seq+1, 10)},
		{"--from", "yesterday"},
		{"--to", "0"},
		{"--from", "2000-01-01T00:00:00Z", "--to", "2000-01-02T00:00:00Z"},
	} {
		if code, out, err := run(t, append([]string{"--wal", w.dir}, bad...)...); code != 2 {
			t.Errorf("%v: exit %d (%v), want 2\n%s", bad, code, err, out)
		}
	}
}

// A saga the journal names without its BEGIN is skipped only when the
// journal begins after seq 1 (its BEGIN went before the first record);
// in a journal from seq 1 it is an inconsistency, refused as recovery
// would (TestGarbageJournal).
func TestIndexOrphans(t *testing.T) {
	sagas := map[uint64]*sagaInfo{
		1: {named: true},              // named by an INTENT, no BEGIN
		2: {named: true, beginSeq: 5}, // begun in the journal
		3: {},                         // only a refusal named it
	}
	for _, first := range []uint64{1, 100} {
		x := &index{first: first, sagas: sagas}
		if x.orphan(1) != (first > 1) || x.orphan(2) || x.orphan(3) || x.orphan(4) {
			t.Errorf("journal from seq %d: orphans 1 %v, 2 %v, 3 %v, 4 %v", first, x.orphan(1), x.orphan(2), x.orphan(3), x.orphan(4))
		}
	}
}

// The daemon reads its clock at the gate and again to stamp the record, a
// varying moment later; the replay measures slew between the stamps. With
// no tolerance the slew-clamped targets come out a hair apart; within
// max_rate × the default tolerance they are the same.
func TestClockBetweenGateAndStamp(t *testing.T) {
	cfg, path := armConfig(t, armMax, armRate)
	w := newWriter(t, cfg)
	rng := rand.New(rand.NewPCG(3, 4))
	w.drift = func() time.Duration { return time.Duration(rng.IntN(100)) * time.Microsecond }
	elbowRun(t, w)
	code, res := replayJSON(t, "--wal", w.dir, "--config", path, "--time-tolerance", "0")
	if code != 1 || len(res.ClampedDifferently) == 0 {
		t.Fatalf("with no tolerance: exit %d, %d clamped differently; want the drift to show", code, len(res.ClampedDifferently))
	}
	for _, c := range res.ClampedDifferently {
		if d := math.Abs(float64(*c.Then.Target - *c.Now.Target)); d > armRate*DefaultTimeTolerance.Seconds() {
			t.Errorf("seq %d: %v apart, more than the default tolerance allows", c.Seq, d)
		}
	}
	if code, res := replayJSON(t, "--wal", w.dir, "--config", path); code != 0 {
		t.Errorf("with the default tolerance: exit %d: %s", code, res.Summary.Line)
	}
}

// A window that starts between a HALT and its SAFE records finds the
// replay's engine halted by the records applied before it, with its safe
// moves still to come in the journal: they are taken from the journal, as
// the replay's engine, halted before it started, makes none of its own.
func TestWindowStartsInsideAHalt(t *testing.T) {
	cfg, path := armConfig(t, armMax, armRate)
	w := newWriter(t, cfg)
	s := w.begin("planner")
	w.mustStep(s, 20*time.Millisecond, "shoulder", 90)
	w.mustStep(s, 20*time.Millisecond, "elbow", 30)
	w.commit(s)
	w.tick(5 * time.Millisecond)
	w.e.Halt("operator pressed stop")
	w.tick(time.Second)
	if err := w.e.Reset("operator", w.e.HaltGen()); err != nil {
		t.Fatal(err)
	}
	s = w.begin("planner")
	w.mustStep(s, 20*time.Millisecond, "gripper", 20)
	w.commit(s)
	w.flush()
	var from uint64
	for _, r := range records(t, w.dir) {
		if r.Type == rollback.RecSafe && from == 0 {
			from = r.seq
		}
	}
	if from == 0 {
		t.Fatal("the halt journaled no SAFE record")
	}
	code, res := replayJSON(t, "--wal", w.dir, "--config", path, "--from", strconv.FormatUint(from, 10))
	if code != 0 || len(res.Divergence) != 0 {
		t.Errorf("--from %d: exit %d, divergence %+v: %s", from, code, res.Divergence, res.Summary.Line)
	}
	if !slices.ContainsFunc(res.Notes, func(n string) bool { return strings.HasPrefix(n, "inherited: 3 records") }) {
		t.Errorf("notes %q", res.Notes)
	}
}
