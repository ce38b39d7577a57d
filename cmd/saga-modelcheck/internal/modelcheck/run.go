package modelcheck

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/recovery"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
	"github.com/saga-supervisor/saga-supervisor/wal/crashfs"
)

// Outcome is what one case did and whether every invariant held.
type Outcome struct {
	Case Case
	// Ops is how many mutating file-system calls the run made (the crash
	// points of its crash-free case); RecoveryOps the same for the recovery
	// after its crash.
	Ops, RecoveryOps int
	// Syncs is how many Journal.Sync calls the run's engine made (the
	// points a halt is latched at in its HaltCases).
	Syncs int
	// CrashClass is, for a crash-free case, the equivalence class of a
	// power cut before each call c = 1..Ops+1 (index c-1): cuts in one class
	// leave the same durable journal and the same world, so one of them
	// stands for all (see Check).
	CrashClass []crashClass
	// Crashed: the power cut struck (it may lie past the end of the run).
	Crashed, RecoveryCrashed bool
	// HaltFired: the case's halt at a sync was latched.
	HaltFired bool
	// FromCheckpoint: the (last) recovery started from a checkpoint.
	FromCheckpoint bool
	Violations     []string
	Calls          []string
	Reports        []string
}

// OK reports whether every invariant held.
func (o *Outcome) OK() bool { return len(o.Violations) == 0 }

func (o *Outcome) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "case %s: ", o.Case)
	if o.OK() {
		b.WriteString("ok\n")
	} else {
		fmt.Fprintf(&b, "%d violations\n", len(o.Violations))
		for _, v := range o.Violations {
			fmt.Fprintf(&b, "  VIOLATION %s\n", v)
		}
	}
	b.WriteString("  driver calls:\n")
	for _, c := range o.Calls {
		fmt.Fprintf(&b, "    %s\n", c)
	}
	for _, r := range o.Reports {
		fmt.Fprintf(&b, "  %s\n", strings.ReplaceAll(strings.TrimSpace(r), "\n", "\n  "))
	}
	return b.String()
}

func (p *proc) options(r *robot) recovery.Options {
	durability := rollback.EveryStep
	if r.c.FirstTouch {
		durability = rollback.FirstTouch
	}
	opt := recovery.Options{Dir: journalDir,
		WAL: wal.Options{FS: p.fs, SegmentSize: 2048, FlushDelay: time.Hour, Deterministic: true},
		Engine: rollback.Config{Actuators: r.registry(p), Durability: durability, Order: rollback.Retrace,
			OnCompensationFailure: rollback.HaltOnFailure, Retries: retries, RetryBackoff: time.Nanosecond, Zones: zones},
		// Checkpoints at fixed moments, so that power cuts land inside
		// their writes and recoveries start from them.
		Checkpoint: recovery.CheckpointOptions{Manual: true}}
	if p.id == 0 {
		// The run: its journal is counted and interposed on (syncJournal:
		// from the moment Open has returned the engine), and the reports of the halts the
		// engine's own goroutines apply are taken and checked.
		opt.WrapJournal = func(j rollback.Journal) rollback.Journal {
			p.journal = &syncJournal{inner: j, r: r, p: p}
			return p.journal
		}
		opt.Engine.OnHalt = func(reps []*rollback.Report, _ error) {
			r.got(p, reps...)
			r.mu.Lock()
			r.onHalt = append(r.onHalt, reps...)
			r.mu.Unlock()
		}
	}
	return opt
}

// Run runs one case and checks it.
func Run(c Case) *Outcome {
	return RunRecoveries(c, func(*Outcome) []int { return nil })[0]
}

// RunRecoveries runs the case once. With a power cut, it then recovers the
// crash image as the case says, and again, from fresh copies of the image
// and the world, once for each recovery cut that more returns when shown
// the first outcome: so the cuts can depend on how many calls the first
// recovery made, and the run before the crash is not repeated.
func RunRecoveries(c Case, more func(first *Outcome) []int) []*Outcome {
	if c.Sagas == 0 {
		c.Sagas = 1
	}
	r := newRobot(c, nil)
	defer r.world.Close()
	o := &Outcome{Case: c}
	run := &proc{id: 0, fs: crashfs.New()}
	var syncs []int // sync-like calls among the first k, by k
	n := 0
	if c.Crash > 0 {
		run.fs.CutPowerAt(c.Crash, crashfs.DropUnsynced())
	} else {
		syncs = append(syncs, 0)
	}
	run.fs.SetFault(func(op crashfs.Op) error {
		if run.dead.Load() {
			return errDiskDead // HaltFail: the disk died
		}
		if c.Crash == 0 {
			if op.Kind == crashfs.OpSync || op.Kind == crashfs.OpSyncDir {
				n++
			}
			syncs = append(syncs, n)
		}
		return nil
	})
	var reports []*rollback.Report
	res, err := recovery.Open(run.options(r))
	if err == nil {
		run.engine.Store(res.Engine)
		run.ckpt = res.Checkpointer
		reports = r.drive(run, res.Engine)
		if c.HaltSync > 0 && !c.HaltFail && len(res.Engine.OpenSagas()) == 0 {
			r.live = beliefs(res.Engine)
		}
		res.Close()
	} else if run.fs.AfterCrash() == nil {
		r.violate("run: a fresh journal did not open: %v", err)
	}
	o.Ops = run.fs.Ops()
	if run.journal != nil {
		o.Syncs = run.journal.Syncs()
	}
	r.mu.Lock()
	onHalt := r.onHalt
	r.mu.Unlock()
	// The oracles compare the answers only; the reports the engine's
	// goroutines applied (OnHalt) are checked with the rest.
	all := append(append([]*rollback.Report(nil), reports...), onHalt...)
	if c.Crash == 0 {
		o.CrashClass = r.crashClasses(syncs, o.Ops)
	}
	img := run.fs.AfterCrash()
	o.Crashed = img != nil
	if img == nil {
		// No crash, or the cut lay past the end of the run: check the run's
		// own reports against the model, then recover the journal as a
		// restart would find it (every record was synced by Close).
		switch {
		case c.Crash != 0 || c.HaltSync > 0 || c.commitBoth():
			// The halt at a sync: no oracle; the invariants judge.
		case c.Zone > 0:
			r.predictZone(reports)
		default:
			r.predictAndCompare(reports)
		}
		img = run.fs.Crash(crashfs.DropUnsynced())
	}
	r.checkReports("run", all)
	recoverFrom := func(rc Case) *Outcome {
		r2 := newRobot(rc, r)
		defer r2.world.Close()
		o2 := &Outcome{Case: rc, Ops: o.Ops, Crashed: o.Crashed, Syncs: o.Syncs, HaltFired: r.fired}
		r2.recoverAndCheck(o2, img.Crash(crashfs.KeepAll()))
		return r2.finish(o2, all)
	}
	if c.Crash == 0 {
		r.checkRebuildRules("run", img)
		if c.HaltSync > 0 {
			// After the e-stop (and the dead disk) the supervisor is
			// restarted on what the disk holds.
			return []*Outcome{recoverFrom(c)}
		}
		return []*Outcome{r.finish(o, all)}
	}
	first := recoverFrom(c)
	outs := []*Outcome{first}
	for _, k := range more(first) {
		rc := c
		rc.RecoveryCrash = k
		outs = append(outs, recoverFrom(rc))
	}
	return outs
}

func (r *robot) finish(o *Outcome, reports []*rollback.Report) *Outcome {
	r.checkCommitsAndReports()
	o.HaltFired = o.HaltFired || r.fired
	o.Violations = r.violation
	for _, cl := range r.calls {
		o.Calls = append(o.Calls, cl.String())
	}
	for _, rep := range reports {
		o.Reports = append(o.Reports, rep.String())
	}
	return o
}

// crashClass identifies what a power cut leaves: the durable image is
// fixed by the sync-like calls (File.Sync, SyncDir) done before the cut,
// the world by the driver calls made before it; after the cut nothing
// reaches the disk or the world. The run is deterministic
// (wal.Options.Deterministic, no flush timer), so equal classes mean equal
// crash states.
type crashClass struct{ syncs, calls int }

func (r *robot) crashClasses(syncs []int, ops int) []crashClass {
	out := make([]crashClass, ops+1)
	for c := 1; c <= ops+1; c++ {
		calls := 0
		for _, k := range r.opsAtCall {
			if k < c {
				calls++
			}
		}
		out[c-1] = crashClass{syncs: syncs[min(c-1, len(syncs)-1)], calls: calls}
	}
	return out
}

// drive plays the case's agents against the engine. It stops at the first
// error after the power cut: a dead computer acknowledges nothing.
func (r *robot) drive(p *proc, e *rollback.Engine) []*rollback.Report {
	c := r.c
	var reports []*rollback.Report
	dead := func() bool { return p.fs.AfterCrash() != nil }
	unexpected := func(what string, err error) {
		if !dead() {
			r.violate("run: %s: unexpected error %v", what, err)
		}
	}
	// answer takes an engine call's error: its report, if any, is
	// collected (and checked); every halt the engine's goroutines are
	// applying is waited for.
	answer := func(err error) {
		r.settle(e)
		var ee *rollback.Error
		if errors.As(err, &ee) && ee.Report != nil {
			r.got(p, ee.Report)
			reports = append(reports, ee.Report)
		}
	}
	fired := func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.fired
	}
	owners := []rollback.Owner{{Agent: "a", Lease: "la", Epoch: 1}, {Agent: "b", Lease: "lb", Epoch: 2}}
	sagaIDs := make([]uint64, c.Sagas)
	closed := make([]bool, c.Sagas)
	stopped := make([]bool, c.Sagas) // refused ZONE_HALTED, or halted: the agent stops stepping
	for i := range sagaIDs {
		id, err := e.Begin(owners[i])
		answer(err)
		if r.tolerated(err) {
			// A halt latched at a sync: the saga was never begun, or
			// was ended as it began (its report taken above).
			closed[i], stopped[i] = true, true
			continue
		}
		if err != nil {
			unexpected("begin", err)
			return reports
		}
		r.handedOut(p, id)
		sagaIDs[i] = id
	}
	probed := false
	touched := false // the first saga has stepped on the zone's actuator
	for k := range r.steps {
		if c.Zone > 0 && k == c.Zone {
			if !r.zoneHalt(p, e, sagaIDs, owners, closed, touched, &reports) {
				return reports
			}
		}
		if k == len(r.steps)/2 && p.ckpt != nil {
			// A checkpoint halfway: sagas open, steps behind it and
			// after it.
			err := p.ckpt.CheckpointNow()
			answer(nil)
			if err != nil && !(fired() && c.HaltFail) {
				unexpected("checkpoint", err)
				return reports
			}
		}
		st := &r.steps[k]
		if stopped[st.saga-1] {
			continue
		}
		if c.Zone > 0 && k >= c.Zone && inHaltedZone(st.act) && !closed[st.saga-1] {
			// The zone is halted: the step is refused, nothing moves. The
			// agent issues no further steps (its engine step numbers would
			// no longer be the plan's) and commits what it did.
			stopped[st.saga-1] = true
			var code rollback.Code
			if !r.noEffect(func() error {
				_, err := e.Step(sagaIDs[st.saga-1], owners[st.saga-1], rollback.Command{ID: fmt.Sprint(k), Actuator: st.act, Value: st.target})
				answer(err)
				code = rollback.CodeOf(err)
				return err
			}) && !dead() {
				r.violate("run: a step on the halted zone was not refused")
			}
			if code != rollback.CodeZoneHalted && !dead() && !r.tolerated(err0(code)) {
				r.violate("run: a step on the halted zone got %q, want %s", code, rollback.CodeZoneHalted)
			}
			continue
		}
		if closed[st.saga-1] {
			// The saga ended (its agent's lease expired): a late command is
			// refused and moves nothing.
			if !r.noEffect(func() error {
				_, err := e.Step(sagaIDs[st.saga-1], owners[st.saga-1], rollback.Command{ID: fmt.Sprintf("late%d", k), Actuator: st.act, Value: st.target})
				answer(err)
				return err
			}) && !dead() {
				r.violate("run: a command on an ended saga was not refused")
			}
			continue
		}
		r.mu.Lock()
		r.expect = st
		r.mu.Unlock()
		_, err := e.Step(sagaIDs[st.saga-1], owners[st.saga-1], rollback.Command{ID: fmt.Sprint(k), Actuator: st.act, Value: st.target})
		r.mu.Lock()
		r.expect = nil
		r.mu.Unlock()
		answer(err)
		if c.Sagas != 2 && st.n == c.Fault {
			want := rollback.CodeStepInDoubt
			if c.Shape == Failed {
				want = rollback.CodeStepFailed
			}
			if code := rollback.CodeOf(err); code != want && !dead() && !r.tolerated(err) {
				r.violate("run: step %d failed with %q (%v), want %s", st.n, code, err, want)
			}
			return r.haltProbe(p, e, owners[0], reports)
		}
		if r.tolerated(err) {
			// Halted (or the disk died) at a sync: this agent stops.
			closed[st.saga-1], stopped[st.saga-1] = true, true
			continue
		}
		if err != nil {
			unexpected(fmt.Sprintf("step %d", st.n), err)
			return reports
		}
		if st.saga == 1 && inHaltedZone(st.act) {
			touched = true
		}
		if !probed && c.Sagas != 2 {
			// The refusal probe: a command over the limits is refused with
			// its code, and nothing moves.
			probed = true
			var code rollback.Code
			if !r.noEffect(func() error {
				_, err := e.Step(sagaIDs[0], owners[0], rollback.Command{ID: "probe", Actuator: st.act, Value: refusedValue})
				answer(err)
				code = rollback.CodeOf(err)
				return err
			}) && !dead() {
				r.violate("run: a command over the limits was not refused")
			}
			if code != rollback.Code(limits.LimitMax) && !dead() && !r.tolerated(err0(code)) {
				r.violate("run: the refusal probe got %q, want %s", code, limits.LimitMax)
			}
		}
		if c.Sagas == 2 && st.saga == 1 && st.n == c.Expire {
			// The first agent's lease runs out now.
			reps := e.AbortAgent(owners[0].Agent, "lease expired")
			answer(nil)
			r.got(p, reps...)
			reports = append(reports, reps...)
			closed[0] = true
		}
	}
	if c.Zone == len(r.steps) {
		if !r.zoneHalt(p, e, sagaIDs, owners, closed, touched, &reports) {
			return reports
		}
	}
	if c.ZoneReset {
		gen, err := e.ZoneGen(haltedZone)
		if err == nil {
			err = e.ZoneReset("operator", haltedZone, gen)
		}
		answer(err)
		if err != nil && !fired() {
			unexpected("zone reset", err)
			return reports
		}
		r.mu.Lock()
		r.zoneLatched = false
		r.mu.Unlock()
	}
	switch {
	case c.Sagas == 2 || c.End == Commit:
		for i, id := range sagaIDs {
			if closed[i] {
				continue
			}
			err := e.Commit(id, owners[i])
			answer(err)
			if r.tolerated(err) {
				continue
			}
			if err != nil {
				unexpected("commit", err)
				return reports
			}
			r.committed(p, id)
		}
	case c.End == Abort:
		if closed[0] {
			break
		}
		rep, err := e.Abort(sagaIDs[0], owners[0], "agent aborted")
		answer(err)
		if err != nil && !r.tolerated(err) {
			unexpected("abort", err)
		}
		if rep != nil {
			r.got(p, rep)
			reports = append(reports, rep)
		}
	}
	return r.haltProbe(p, e, owners[0], reports)
}

// zoneHalt halts the zone: the first saga, if it touched the zone, is
// unwound whole (and closed); the second saga must not be touched. A step
// on the zone's actuator by the second saga is then refused ZONE_HALTED.
// It reports false once the power is off.
func (r *robot) zoneHalt(p *proc, e *rollback.Engine, sagaIDs []uint64, owners []rollback.Owner, closed []bool, touched bool, reports *[]*rollback.Report) bool {
	r.mu.Lock()
	r.zoneLatched = true
	r.mu.Unlock()
	reps, err := e.ZoneHalt(haltedZone, "model: zone halt")
	r.settle(e)
	r.mu.Lock()
	fired := r.fired // a full halt latched at a sync came first
	r.mu.Unlock()
	if p.fs.AfterCrash() != nil {
		return false
	}
	if err != nil {
		r.violate("run: zone halt: %v", err)
		return false
	}
	r.got(p, reps...)
	*reports = append(*reports, reps...)
	for _, rep := range reps {
		if rep.Saga != sagaIDs[0] {
			r.violate("run: the zone halt unwound saga %d, which does not touch the zone", rep.Saga)
		}
	}
	if touched != (len(reps) == 1) && !fired {
		r.violate("run: the zone halt unwound %d sagas; the first saga touched the zone: %v", len(reps), touched)
	}
	closed[0] = closed[0] || touched
	if h, _ := e.Halted(); h && !fired {
		r.violate("run: a zone halt latched the full halt")
	}
	if closed[1] {
		return true // the second agent stopped: no one to probe with
	}
	var code rollback.Code
	if !r.noEffect(func() error {
		_, err := e.Step(sagaIDs[1], owners[1], rollback.Command{ID: "zone-probe", Actuator: "shoulder", Value: 100})
		r.settle(e)
		code = rollback.CodeOf(err)
		return err
	}) && p.fs.AfterCrash() == nil {
		r.violate("run: a step on the halted zone was not refused")
	}
	if code != rollback.CodeZoneHalted && p.fs.AfterCrash() == nil && !r.tolerated(err0(code)) {
		r.violate("run: a step on the halted zone got %q, want %s", code, rollback.CodeZoneHalted)
	}
	return p.fs.AfterCrash() == nil
}

// noEffect runs fn and reports whether it failed without any driver call.
func (r *robot) noEffect(fn func() error) bool {
	r.mu.Lock()
	before := len(r.calls)
	r.mu.Unlock()
	err := fn()
	r.mu.Lock()
	after := len(r.calls)
	r.mu.Unlock()
	if after != before {
		r.violate("run: a refused command moved something: %v", r.calls[before:after])
	}
	return err != nil
}

// haltProbe: once halted, nothing new may begin, and nothing moves.
func (r *robot) haltProbe(p *proc, e *rollback.Engine, o rollback.Owner, reports []*rollback.Report) []*rollback.Report {
	if h, _ := e.Halted(); !h || p.fs.AfterCrash() != nil {
		return reports
	}
	var code rollback.Code
	if !r.noEffect(func() error {
		id, err := e.Begin(o)
		if err == nil {
			_, err = e.Step(id, o, rollback.Command{ID: "after-halt", Actuator: "base", Value: 50})
		}
		code = rollback.CodeOf(err)
		return err
	}) {
		r.violate("run: a command after the halt was not refused")
	}
	if code != rollback.CodeHalted && p.fs.AfterCrash() == nil && !(code == rollback.CodeJournalFailed && p.dead.Load()) {
		r.violate("run: a command after the halt got %q, want %s", code, rollback.CodeHalted)
	}
	return reports
}

// recoverAndCheck recovers the crash image, perhaps cutting the power
// during recovery once, and checks everything that must hold afterwards.
func (r *robot) recoverAndCheck(o *Outcome, img *crashfs.FS) {
	before := journalFacts(img)
	// A power cut may leave a torn tail (Open cuts it); anything else is
	// corruption.
	// The power may also go before the journal's directory is durable:
	// then nothing was acknowledged (and, by the first invariant, nothing
	// moved), and recovery starts a new journal.
	if vr, err := wal.Verify(journalDir, wal.Options{FS: img}); (err != nil && !errors.Is(err, fs.ErrNotExist)) || vr.Broken != nil {
		r.violate("the journal does not verify after the crash: %+v %v", vr, err)
		return
	}
	id := 1
	if r.c.RecoveryCrash > 0 {
		tmp := img.Crash(crashfs.KeepAll())
		tmp.CutPowerAt(r.c.RecoveryCrash, crashfs.DropUnsynced())
		p := &proc{id: id, fs: tmp, haltedAtStart: before.halted, zoneHaltedAtStart: before.zoneHalted, rootHaltedAtStart: before.rootHalted}
		mark := len(r.calls)
		if res, err := recovery.Open(p.options(r)); err == nil {
			r.checkReports(p.label(), res.Reports)
			r.noteReports(p.label(), res.Reports)
			res.Close()
		} else if tmp.AfterCrash() == nil {
			r.violate("%s: recovery refused: %v", p.label(), err)
		}
		r.checkRecoveryCalls(p, before, mark)
		o.RecoveryOps = tmp.Ops()
		id++
		if after := tmp.AfterCrash(); after != nil {
			o.RecoveryCrashed = true
			img = after
			before = journalFacts(img)
		} else {
			img = tmp.Crash(crashfs.KeepAll())
			before = journalFacts(img)
		}
	}
	p := &proc{id: id, fs: img, haltedAtStart: before.halted, zoneHaltedAtStart: before.zoneHalted, rootHaltedAtStart: before.rootHalted}
	mark := len(r.calls)
	res, err := recovery.Open(p.options(r))
	if err != nil {
		r.violate("%s: recovery refused: %v", p.label(), err)
		return
	}
	p.engine.Store(res.Engine)
	o.FromCheckpoint = res.Opened.Checkpoint != nil
	if o.RecoveryOps == 0 {
		o.RecoveryOps = img.Ops()
	}
	r.checkRecoveryCalls(p, before, mark)
	r.checkReports(p.label(), res.Reports)
	r.noteReports(p.label(), res.Reports)
	if open := res.Engine.OpenSagas(); len(open) != 0 {
		r.violate("%s: sagas %v still open after recovery", p.label(), open)
	}
	if r.live != nil {
		// The run's engine closed with no saga open and every record
		// durable: the rebuild must believe what it believed.
		for name, live := range r.live {
			if got, _ := res.Engine.Commanded(name); got != live {
				r.violate("%s: the rebuilt engine believes %s at %g, the engine that wrote the journal believed %g", p.label(), name, got, live)
			}
		}
	}
	if r.c.HaltSync > 0 {
		r.beginAfterRestart(p, res.Engine)
	}
	for _, z := range res.Engine.Zones() {
		if z.Name == haltedZone && z.Halted != before.zoneHalted {
			r.violate("%s: zone %s rebuilt halted=%v, the journal says %v", p.label(), z.Name, z.Halted, before.zoneHalted)
		}
		if z.Name == rootZone && z.Halted != before.rootHalted {
			r.violate("%s: zone %s rebuilt halted=%v, the journal says %v", p.label(), z.Name, z.Halted, before.rootHalted)
		}
	}
	if err := res.Close(); err != nil {
		r.violate("%s: close: %v", p.label(), err)
	}
	if vr, err := wal.Verify(journalDir, wal.Options{FS: img}); err != nil || !vr.OK() {
		r.violate("%s: the journal does not verify after recovery: %+v %v", p.label(), vr, err)
	}
	r.checkRebuildRules(p.label(), img)
	r.checkFinal(img)
}

// checkRebuildRules: the rebuild's rules accept every record of the
// journal — the crashed runs' and every recovery's — checked the way verify
// checks them (rollback.Validator).
func (r *robot) checkRebuildRules(label string, img *crashfs.FS) {
	v := rollback.NewValidator()
	err := wal.Scan(journalDir, wal.Options{FS: img}, 1, func(wr wal.Record) error {
		return v.Apply(wr.Seq, wr.Type, wr.Payload)
	})
	if err != nil {
		r.violate("%s: the journal's record is refused by replay's rules: %v", label, err)
	}
}

// facts is what a journal says that later processes must respect.
type facts struct {
	halted     bool
	zoneHalted bool            // the zone's last record is a ZONE_HALT
	rootHalted bool            // the same for the root zone
	settled    map[[2]int]bool // (engine saga, step) whose bucket is durable
}

func journalFacts(fs *crashfs.FS) facts {
	f := facts{settled: map[[2]int]bool{}}
	scanJournal(fs, func(rec rollback.Record) {
		switch rec.Type {
		case rollback.RecHalt:
			f.halted = true
		case rollback.RecReset:
			f.halted = false
		case rollback.RecZoneHalt:
			f.zoneHalted = f.zoneHalted || rec.Code == haltedZone
			f.rootHalted = f.rootHalted || rec.Code == rootZone
		case rollback.RecZoneReset:
			f.zoneHalted = f.zoneHalted && rec.Code != haltedZone
			f.rootHalted = f.rootHalted && rec.Code != rootZone
		case rollback.RecCompDone:
			if rec.Code != "" {
				f.settled[[2]int{int(rec.Saga), int(rec.Step)}] = true
			}
		}
	})
	return f
}

// checkRecoveryCalls: a recovery moves nothing forward, never compensates a
// step whose bucket was already durable, and compensates nothing when the
// journal had latched halt.
func (r *robot) checkRecoveryCalls(p *proc, before facts, mark int) {
	r.mu.Lock()
	calls := append([]call(nil), r.calls[mark:]...)
	r.mu.Unlock()
	for _, c := range calls {
		switch c.kind {
		case forwardCall:
			r.violate("%s: a forward effect during recovery: %s", p.label(), c)
		case compCall:
			// Engine saga ids follow Begin order: saga 1 is the first agent's.
			if before.settled[[2]int{c.saga, c.step}] {
				r.violate("%s: %s compensated a second time (its bucket was durable)", p.label(), c)
			}
			if before.halted {
				r.violate("%s: %s after a latched halt", p.label(), c)
			}
		}
	}
}

// err0 is an error carrying code, for tolerated.
func err0(code rollback.Code) error {
	if code == "" {
		return nil
	}
	return &rollback.Error{Code: code}
}
