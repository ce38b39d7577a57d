package modelcheck

import (
	"fmt"
	"sync"
	"syscall"

	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal/crashfs"
)

// syncJournal stands between the run's engine and its journal. It counts
// the engine's Journal.Sync calls (the halt points of a case), and at the
// case's HaltSync-th it latches a halt from another goroutine while the
// sync is under way: the engine's lock is released (engine.journal drops
// it around Sync), the records enqueued are not yet durable. With
// HaltFail the disk dies at that moment.
//
// The run stays deterministic: the sync that latched waits, before it
// goes on to the disk, until the halt has been applied — or, when that
// cannot happen before the sync returns, until the halt has done all it
// can meanwhile. That is the case when the sync is a step's INTENT (the
// step's effect is counted in flight from before its sync, and a halt
// waits for every effect in flight, a zone's halt for those on its
// actuators): the halt's pass then journals, ends the sagas it may end
// and syncs, and waits for the step; the sync goes on once the halt's own
// sync has returned.
type syncJournal struct {
	inner rollback.Journal
	r     *robot
	p     *proc

	mu       sync.Mutex
	syncs    int    // Sync calls made once the engine existed
	lastType uint8  // the last record enqueued
	lastAct  string // its actuator (an INTENT's)
	// window: the HaltSync-th sync is waiting for the halt; a Sync
	// meanwhile is the halt's own.
	window bool
	// haltSynced is closed when the halt's first sync returns.
	haltSynced chan struct{}
}

func (j *syncJournal) Enqueue(typ uint8, payload []byte) (uint64, error) {
	act := ""
	if typ == uint8(rollback.RecIntent) {
		if rec, err := rollback.DecodeRecord(typ, payload); err == nil {
			act = rec.Actuator
		}
	}
	j.mu.Lock()
	j.lastType, j.lastAct = typ, act
	j.mu.Unlock()
	return j.inner.Enqueue(typ, payload)
}

func (j *syncJournal) Sync() error {
	j.mu.Lock()
	if j.window {
		// The halt's own sync, while the sync that latched it waits.
		j.mu.Unlock()
		err := j.inner.Sync()
		j.mu.Lock()
		if j.haltSynced != nil {
			close(j.haltSynced)
			j.haltSynced = nil
		}
		j.mu.Unlock()
		return err
	}
	e := j.p.engine.Load()
	if e != nil {
		j.syncs++
	}
	fire := e != nil && j.r.c.HaltSync > 0 && j.syncs == j.r.c.HaltSync
	intent := j.lastType == uint8(rollback.RecIntent)
	act := j.lastAct
	j.mu.Unlock()
	if fire {
		j.latch(e, intent, intent && inZone(j.r.c.HaltZone, act))
	}
	return j.inner.Sync()
}

// Syncs is how many Journal.Sync calls the engine made.
func (j *syncJournal) Syncs() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.syncs
}

// latch latches the case's halt through the engine's public API, as an
// e-stop (or a zone's e-stop) does, and waits as the type comment says.
// inflight: this sync is a step's INTENT, whose effect counts in flight
// (a full halt's pass waits for it); zoneInflight: on the zone's
// actuator (the zone's pass waits for it too).
func (j *syncJournal) latch(e *rollback.Engine, inflight, zoneInflight bool) {
	r := j.r
	c := r.c
	if h, _ := e.Halted(); h || (c.HaltZone != "" && zoneLatched(e, c.HaltZone)) {
		// Already halted (a failed compensation's halt, whose own sync
		// this is): a second press changes nothing the model can see.
		return
	}
	if j.p.fs.AfterCrash() != nil {
		return
	}
	synced := make(chan struct{})
	j.mu.Lock()
	j.window, j.haltSynced = true, synced
	j.mu.Unlock()
	r.mu.Lock()
	r.fired = true
	switch c.HaltZone {
	case haltedZone:
		r.zoneLatched = true
	case rootZone:
		r.rootLatched = true
	}
	r.mu.Unlock()
	if c.HaltFail && c.HaltZone == "" {
		// The disk dies now: the halt's own records fail too, and the
		// failure's halt joins this one's pass.
		j.p.dead.Store(true)
	}
	why := fmt.Sprintf("model: e-stop during journal sync %d", c.HaltSync)
	if c.HaltZone != "" {
		if _, err := e.ZoneLatch(c.HaltZone, why); err != nil {
			r.violate("run: zone latch: %v", err)
		}
	} else {
		e.Latch(why)
	}
	// Which halt to wait for: the one latched. A full halt does not wait
	// for the zones: this sync may be a zone pass's own (the zone's lane
	// is then this caller's). A halt that waits for this sync's effect
	// cannot be applied before the sync returns: then its first sync is
	// waited for instead.
	waitFull := c.HaltZone == ""
	waitZone := c.HaltZone != ""
	stuck := false
	if waitFull && inflight {
		waitFull, stuck = false, true
	}
	if waitZone && zoneInflight {
		waitZone, stuck = false, true
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			hg, zg := e.HaltGen(), zoneGen(e)
			if waitZone {
				e.WaitZoneHalts()
			}
			if waitFull {
				e.WaitHalts()
			}
			if e.HaltGen() == hg && zoneGen(e) == zg {
				return
			}
		}
	}()
	<-done
	if stuck {
		<-synced
		// The halt goes on once this sync's step is done, perhaps while
		// the run goes on too (a zone's halt parks its actuators while
		// the step's saga is unwound): the run's next effect waits for
		// it (driver.Set), so their moves take turns.
		pending := make(chan struct{})
		go func() {
			defer close(pending)
			waitHalts(e)
		}()
		r.mu.Lock()
		r.pending = pending
		r.mu.Unlock()
	}
	if c.HaltFail && c.HaltZone != "" {
		// With a zone's halt the disk dies once the zone's halt has
		// journaled: the full halt the failure latches then runs on a
		// goroutine of its own while this sync fails, and had it been
		// latched while the zone's pass ran, the two passes' safe moves
		// would interleave either way.
		j.p.dead.Store(true)
	}
	j.mu.Lock()
	j.window, j.haltSynced = false, nil
	j.mu.Unlock()
}

// waitHalts returns once every halt latched, full or zone, has been
// applied, those latched while waiting included (a disk failure latches
// one).
func waitHalts(e *rollback.Engine) {
	for {
		hg, zg := e.HaltGen(), zoneGen(e)
		e.WaitZoneHalts()
		e.WaitHalts()
		if e.HaltGen() == hg && zoneGen(e) == zg {
			return
		}
	}
}

// zoneGen is the sum of the model's zones' halt generations: it grows
// with every zone halt latched.
func zoneGen(e *rollback.Engine) uint64 {
	var sum uint64
	for name := range zones {
		g, _ := e.ZoneGen(name)
		sum += g
	}
	return sum
}

func zoneLatched(e *rollback.Engine, name string) bool {
	for _, z := range e.Zones() {
		if z.Name == name && z.Halted {
			return true
		}
	}
	return false
}

// settle waits, once a halt latched at a sync has fired, for every halt
// the engine's goroutines are applying: the agents act one at a time, as
// the model's oracle-free checks assume.
func (r *robot) settle(e *rollback.Engine) {
	r.mu.Lock()
	fired := r.fired
	r.mu.Unlock()
	if !fired {
		return
	}
	waitHalts(e)
	// A halt applied ends every open saga: none may be left open under
	// it (its agent would be refused forever, its report never sent) —
	// the journal's own failure's halt included, which once left open a
	// saga whose step or commit was being synced.
	if h, _ := e.Halted(); h {
		if open := e.OpenSagas(); len(open) != 0 && !r.openAfterHalt {
			r.openAfterHalt = true // once a run
			r.violate("run: sagas %v open after the halt was applied", open)
		}
	}
}

// tolerated reports whether err is what an agent may be answered once a
// halt latched at a sync has fired: the agent then stops.
func (r *robot) tolerated(err error) bool {
	r.mu.Lock()
	fired := r.fired
	r.mu.Unlock()
	if !fired || err == nil {
		return false
	}
	switch rollback.CodeOf(err) {
	case rollback.CodeHalted, rollback.CodeJournalFailed, rollback.CodeZoneHalted, rollback.CodeSagaUnknown:
		return true
	}
	return false
}

// errDiskDead is what every file-system call answers once the disk died.
var errDiskDead = fmt.Errorf("modelcheck: the disk died: %w", syscall.EIO)

// durableBegins lists the sagas whose BEGIN would survive a power cut now.
func durableBegins(fs *crashfs.FS) map[uint64]bool {
	out := map[uint64]bool{}
	scanJournal(fs.Crash(crashfs.DropUnsynced()), func(rec rollback.Record) {
		if rec.Type == rollback.RecBegin {
			out[rec.Saga] = true
		}
	})
	return out
}

// got takes reports the run's process p produced (answers, OnHalt) and
// checks each at once: a report names a saga whose BEGIN is durable (a
// saga whose BEGIN is not did not exist: after a restart its id is
// handed out again).
func (r *robot) got(p *proc, reps ...*rollback.Report) {
	if len(reps) == 0 {
		return
	}
	var durable map[uint64]bool
	if p.fs.AfterCrash() == nil {
		durable = durableBegins(p.fs)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rep := range reps {
		if rep == nil {
			continue
		}
		r.reported[rep.Saga] = append(r.reported[rep.Saga], p.label())
		r.known[rep.Saga] = true
		if durable != nil && !durable[rep.Saga] {
			r.violation = append(r.violation, fmt.Sprintf("%s: a report names saga %d, whose BEGIN is not durable (after a restart its id is handed out again)", p.label(), rep.Saga))
		}
	}
}

// handedOut records a saga id Begin returned to an agent of process p,
// and checks Begin's promise: the BEGIN is durable, and the saga is open
// (no report has ended it).
func (r *robot) handedOut(p *proc, id uint64) {
	if p.fs.AfterCrash() == nil && !durableBegins(p.fs)[id] {
		r.violate("%s: Begin returned saga %d, whose BEGIN is not durable", p.label(), id)
	}
	r.mu.Lock()
	if by, ok := r.reported[id]; ok {
		r.violation = append(r.violation, fmt.Sprintf("%s: Begin handed out saga %d, which a report had already ended (%v)", p.label(), id, by))
	}
	r.known[id] = true
	r.mu.Unlock()
}

// committed records a commit acknowledged to an agent.
func (r *robot) committed(p *proc, id uint64) {
	r.mu.Lock()
	r.commits[id] = append(r.commits[id], p.label())
	r.mu.Unlock()
}

// checkCommitsAndReports: a saga whose commit was acknowledged is never
// named by a RollbackReport, in any process.
func (r *robot) checkCommitsAndReports() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, by := range r.commits {
		if rep, ok := r.reported[id]; ok {
			r.violation = append(r.violation, fmt.Sprintf("saga %d committed (%v), yet a report says it was unwound (%v)", id, by, rep))
		}
	}
}

// noteReports records the reports a recovery returned.
func (r *robot) noteReports(label string, reps []*rollback.Report) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rep := range reps {
		r.reported[rep.Saga] = append(r.reported[rep.Saga], label)
		r.known[rep.Saga] = true
	}
}

// beginAfterRestart is what the soak did after a restart: a new agent
// begins a saga and commits it. The saga id must be new — no agent was
// handed it, no report named it, in any process before — and (see
// checkCommitsAndReports) its commit must not contradict a report. A
// journal that latched halt refuses the saga: nothing to check then.
func (r *robot) beginAfterRestart(p *proc, e *rollback.Engine) {
	if h, _ := e.Halted(); h {
		return
	}
	owner := rollback.Owner{Agent: "c", Lease: "lc", Epoch: 3}
	id, err := e.Begin(owner)
	if err != nil {
		r.violate("%s: Begin after the restart: %v", p.label(), err)
		return
	}
	r.mu.Lock()
	again := r.known[id]
	r.mu.Unlock()
	if again {
		r.violate("%s: saga id %d handed out again after the restart (an agent was handed it, or a report named it, before)", p.label(), id)
	}
	r.handedOut(p, id)
	if err := e.Commit(id, owner); err != nil {
		r.violate("%s: Commit after the restart: %v", p.label(), err)
		return
	}
	r.committed(p, id)
}

// beliefs is where the engine believes each actuator is.
func beliefs(e *rollback.Engine) map[string]float64 {
	out := map[string]float64{}
	for _, n := range append(append([]string(nil), servoNames...), pulseName) {
		out[n], _ = e.Commanded(n)
	}
	return out
}
