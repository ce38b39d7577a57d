package replay

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/approval"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// DefaultTimeTolerance is the default Options.TimeTolerance: the daemon
// reads its clock at the gate and again, microseconds later, to stamp the
// record; a millisecond covers that with room for a preempted thread.
const DefaultTimeTolerance = time.Millisecond

// Options configures a replay.
type Options struct {
	// Dir is the journal directory. It is only read: no lock is taken and
	// nothing is written, so the daemon may be running on it.
	Dir string
	// Config is the configuration whose actuators, limits, clamp and safe
	// policies and unwind settings the replay runs under; nil means the
	// embedded default (config.Default).
	Config *config.Config
	// ConfigName names Config in the report.
	ConfigName string
	// From and To select the window reported (open: the whole journal).
	From, To Bound
	// TimeTolerance is how far the journal's times may be from the
	// daemon's gate clock (see DefaultTimeTolerance); values limited by a
	// rate are compared within max_rate × TimeTolerance.
	TimeTolerance time.Duration
}

// ErrNoJournal is returned when the directory holds no journal.
var ErrNoJournal = errors.New("no journal")

// unknownSaga is the id given to the gate for a saga the replay never
// began: no saga of the replay has it, so the gate refuses SAGA_UNKNOWN.
const unknownSaga = math.MaxUint64

// recoveryFinished is the message of the RECOVERY record that ends a
// recovery (rollback.Engine.Recover); any other RECOVERY record begins one.
const recoveryFinished = "recovery finished"

// Replay replays the journal in opt.Dir under opt.Config and reports what
// differs. A journal that begins after seq 1 (retention deleted its oldest
// segments) is replayed from its oldest usable checkpoint (Window.Checkpoint).
// Every error is about its input: a missing, unreadable or damaged
// journal, a journal the engine cannot rebuild from, a checkpoint whose
// snapshot cannot be restored, a configuration the replay cannot build, or
// a window that selects nothing.
func Replay(opt Options) (*Result, error) {
	switch ok, err := wal.Present(nil, opt.Dir); {
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrNoJournal, err)
	case !ok:
		return nil, fmt.Errorf("%w: %s holds no journal segment (*.wal)", ErrNoJournal, opt.Dir)
	}
	if opt.Config == nil {
		opt.Config = config.Default()
		if opt.ConfigName == "" {
			opt.ConfigName = "the embedded default config"
		}
	}
	if opt.TimeTolerance < 0 {
		return nil, errors.New("negative time tolerance")
	}
	idx, err := readIndex(opt.Dir, opt.From, opt.To)
	if err != nil {
		return nil, fmt.Errorf("reading journal %s: %w", opt.Dir, err)
	}
	if idx.records == 0 && !(opt.From.IsZero() && opt.To.IsZero()) {
		return nil, fmt.Errorf("%w: the journal holds no records", errBadWindow)
	}
	r, err := newReplayer(opt, idx)
	if err != nil {
		return nil, err
	}
	defer r.close()
	if idx.records > 0 {
		if err := r.run(); err != nil {
			return nil, fmt.Errorf("replaying journal %s: %w", opt.Dir, err)
		}
	}
	r.finish()
	return r.res, nil
}

// replayer drives one replay: the engine under test, the journal's view
// (an engine rebuilt from the journal with Apply, as recovery would, to
// say what the journal's commanded values are), and the bookkeeping that
// tells when the two may be compared.
type replayer struct {
	opt   Options
	cfg   *config.Config
	idx   *index
	clk   *clock
	flt   *faults
	world *simWorld
	jn    *scratch
	ecfg  rollback.Config
	e     *rollback.Engine // the replay
	view  *rollback.Engine // the journal, applied
	res   *Result
	tol   map[string]float64

	started      bool
	sagaMap      map[uint64]uint64 // journal saga id → the replay's
	beginRefused map[uint64]string // journal saga id → why the replay refused its BEGIN
	inflight     map[stepKey]string
	touched      map[uint64][]string // journal saga → the actuators its steps named
	unwinding    map[uint64]bool     // journal sagas aborted and not yet ended
	origHalted   bool                // the journal shows a halt latched
	awaitSafe    map[string]bool     // actuators a halt in the journal has yet to journal SAFE for
	parked       bool
	diverged     map[string]bool
	skipped      map[uint64]bool
	unknownActs  map[string]bool
	aggregates   bool   // refusals journaled as counts were met in the window
	mismatch     string // the checkpoint was taken under other actuators: how
	inh          inherited
	taken        int // records taken from the journal to finish inherited work

	mu        sync.Mutex        // guards what the scratch journal's hook writes
	nowEnd    map[uint64]string // replay saga id → committed, clean or partial
	marking   bool
	callFirst *rollback.Record // the first INTENT or REFUSED journaled since mark
}

func newReplayer(opt Options, idx *index) (*replayer, error) {
	r := &replayer{
		opt: opt, cfg: opt.Config, idx: idx, clk: &clock{},
		sagaMap: map[uint64]uint64{}, beginRefused: map[uint64]string{}, inflight: map[stepKey]string{},
		touched: map[uint64][]string{}, unwinding: map[uint64]bool{}, awaitSafe: map[string]bool{},
		diverged: map[string]bool{}, skipped: map[uint64]bool{}, unknownActs: map[string]bool{},
		nowEnd: map[uint64]string{},
		tol:    tolerance(opt.Config, opt.TimeTolerance),
	}
	r.clk.set(idx.firstTime)
	r.flt = newFaults(idx.comps)
	w, err := buildWorld(opt.Config, r.clk, r.flt)
	if err != nil {
		return nil, fmt.Errorf("building the simulated world from the config: %w", err)
	}
	r.world = w
	if idx.ckpt != nil {
		r.clk.set(idx.ckptAt[idx.base].unixNano)
	}
	r.jn = &scratch{onRec: r.onRecord}
	r.ecfg = opt.Config.RollbackConfig()
	r.ecfg.Journal, r.ecfg.Actuators, r.ecfg.Supplies, r.ecfg.Now = r.jn, w.registry, w.supplies, r.clk.Now
	// A backoff only waits; what an attempt does is decided by the fault
	// script, so the replay does not sleep through it.
	r.ecfg.RetryBackoff = time.Nanosecond
	if r.e, err = rollback.New(r.ecfg); err != nil {
		w.world.Close()
		return nil, err
	}
	if r.view, err = rollback.New(rollback.Config{Journal: discard{}, Actuators: w.registry, Order: r.ecfg.Order, Zones: r.ecfg.Zones}); err != nil {
		r.e.Close()
		w.world.Close()
		return nil, err
	}
	if idx.ckpt != nil {
		for _, e := range []*rollback.Engine{r.view, r.e} {
			if err := r.restore(e); err != nil {
				r.close()
				return nil, err
			}
		}
		r.seedFollow()
	}
	idx.findStart(r.view.Sagas())
	r.res = &Result{Format: Format, Journal: opt.Dir, Config: opt.ConfigName, NotReplayed: map[string]int{}}
	r.res.Window = Window{FirstSeq: idx.first, LastSeq: idx.last, FromSeq: idx.fromSeq, ToSeq: idx.toSeq, StartSeq: idx.startSeq}
	if c := idx.ckpt; c != nil {
		r.res.Window.Checkpoint = &StartCheckpoint{Seq: c.At.Seq, File: c.Name}
	}
	return r, nil
}

// restore installs the checkpoint's snapshot into a new engine: the
// journal's view, the replay's engine, and the engine of each restart. A
// snapshot taken under other actuators than the config's is installed
// for the actuators both have, and noted; one that does not decode ends
// the replay: the records it covers are gone, and nothing else can say
// where they left things.
func (r *replayer) restore(e *rollback.Engine) error {
	c := r.idx.ckpt
	err := e.Restore(c.Payload)
	if errors.Is(err, rollback.ErrSnapshotMismatch) {
		r.mismatch = err.Error()
		return nil
	}
	if err != nil {
		return fmt.Errorf("journal %s begins at seq %d and must be replayed from its checkpoint %s (record %d), "+
			"whose snapshot the replay cannot restore: %w", r.opt.Dir, r.idx.first, c.Name, c.At.Seq, err)
	}
	return nil
}

// seedFollow gives the bookkeeping of follow what the records up to the
// checkpoint would have given it: the actuators each open saga's steps
// named, the steps in flight, the sagas being unwound, a halt latched.
func (r *replayer) seedFollow() {
	for _, s := range r.view.Sagas() {
		if s.AbortReason != "" {
			r.unwinding[s.ID] = true
		}
		for _, sp := range s.Steps {
			if !slices.Contains(r.touched[s.ID], sp.Actuator) {
				r.touched[s.ID] = append(r.touched[s.ID], sp.Actuator)
			}
			if sp.Outcome == "" {
				r.inflight[stepKey{s.ID, sp.N}] = sp.Actuator
			}
		}
	}
	r.origHalted, _ = r.view.Halted()
}

func (r *replayer) close() {
	r.e.Close()
	r.view.Close()
	r.world.world.Close()
}

// onRecord is told of every record the replay's engine journals. It runs
// with the engine's lock held: it only notes.
func (r *replayer) onRecord(rec rollback.Record) {
	r.flt.journaled(&rec)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch rec.Type {
	case rollback.RecCommit:
		r.nowEnd[rec.Saga] = "committed"
	case rollback.RecEnd:
		r.nowEnd[rec.Saga] = rec.Code
	case rollback.RecIntent, rollback.RecRefused:
		if r.marking && r.callFirst == nil {
			r.callFirst = &rec
		}
	}
}

// run reads the journal once more (the index was the first pass): records
// before the replay's start are applied, later ones driven, all of them
// applied to the journal's view.
func (r *replayer) run() error {
	err := wal.Scan(r.opt.Dir, wal.Options{}, r.idx.first, func(wr wal.Record) error {
		if wr.Seq > r.idx.toSeq {
			return errStop // the window's end, or records the daemon wrote since the index
		}
		rec, err := rollback.DecodeRecord(wr.Type, wr.Payload)
		if err != nil {
			return fmt.Errorf("record seq %d is not an engine record: %w", wr.Seq, err)
		}
		if wr.Seq == r.idx.fromSeq {
			r.res.Window.From = stamp(rec.UnixNano)
		}
		if wr.Seq == r.idx.toSeq {
			r.res.Window.To = stamp(rec.UnixNano)
		}
		if wr.Seq <= r.idx.base {
			return nil // in the checkpoint's snapshot
		}
		orphan := hasSaga(rec.Type) && r.idx.orphan(rec.Saga)
		if !orphan {
			if err := r.view.Apply(wr.Seq, wr.Type, wr.Payload); err != nil {
				return fmt.Errorf("the journal does not rebuild as recovery would: %w", err)
			}
		}
		if wr.Seq < r.idx.startSeq {
			if !orphan {
				if err := r.e.Apply(wr.Seq, wr.Type, wr.Payload); err != nil {
					return fmt.Errorf("the journal does not rebuild as recovery would: %w", err)
				}
			}
			r.follow(wr.Seq, &rec, false)
			return nil
		}
		if !r.started {
			r.begun()
		}
		r.res.Summary.Records++
		if orphan {
			r.skip(rec.Saga)
			return nil
		}
		switch took, err := r.take(wr, &rec); {
		case err != nil:
			return err
		case !took:
			if err := r.drive(wr.Seq, &rec); err != nil {
				return err
			}
		}
		r.follow(wr.Seq, &rec, true)
		return nil
	})
	if errors.Is(err, errStop) {
		err = nil
	}
	return err
}

// begun is called at the first driven record: sagas left open by the
// checkpoint and the records applied before it keep their ids in the
// replay, and what they had in progress is inherited.
func (r *replayer) begun() {
	r.started = true
	r.inh = inherited{steps: map[stepKey]bool{}, unwinds: map[uint64]bool{}}
	for _, s := range r.e.Sagas() {
		r.sagaMap[s.ID] = s.ID
		r.flt.mu.Lock()
		r.flt.origOf[s.ID] = s.ID
		r.flt.mu.Unlock()
		if s.AbortReason != "" {
			r.inh.unwinds[s.ID] = true
		}
		for _, sp := range s.Steps {
			if sp.Outcome == "" {
				r.inh.steps[stepKey{s.ID, sp.N}] = true
			}
		}
	}
	r.inh.halt, _ = r.e.Halted()
}

// inherited is the work the daemon had in progress where the replay starts
// driving — steps whose outcome the journal holds later, unwinds under
// way, a latched halt whose safe moves may follow — as the journal's state
// there (a checkpoint's snapshot, records applied) shows it. The daemon's
// engine finished that work on its own, and the replay's engine, which
// did not begin it, never would: take finishes it from the journal.
type inherited struct {
	steps   map[stepKey]bool // steps in flight: their APPLIED or FAILED
	unwinds map[uint64]bool  // sagas aborted and open: their COMP_INTENT, COMP_DONE and END
	halt    bool             // halt latched: SAFE records until the journal's RESET
}

// take applies a record that finishes inherited work to the replay's
// engine as to the journal's view, and keeps it in the scratch journal so
// that a restart rebuilds from it; it reports whether it did. A RESET ends
// the inherited halt and a restart (RECOVERY) all inherited work: the
// replay's own recovery finishes it from then on.
func (r *replayer) take(wr wal.Record, rec *rollback.Record) (bool, error) {
	switch rec.Type {
	case rollback.RecApplied, rollback.RecFailed:
		k := stepKey{rec.Saga, rec.Step}
		if !r.inh.steps[k] {
			return false, nil
		}
		delete(r.inh.steps, k)
	case rollback.RecCompIntent, rollback.RecCompDone, rollback.RecEnd:
		if !r.inh.unwinds[rec.Saga] {
			return false, nil
		}
		if rec.Type == rollback.RecEnd {
			delete(r.inh.unwinds, rec.Saga)
		}
	case rollback.RecSafe:
		if !r.inh.halt {
			return false, nil
		}
	case rollback.RecReset:
		r.inh.halt = false
		return false, nil
	case rollback.RecRecovery:
		if rec.Message != recoveryFinished {
			r.inh = inherited{}
		}
		return false, nil
	default:
		return false, nil
	}
	if hasSaga(rec.Type) && !slices.Contains(r.e.OpenSagas(), rec.Saga) {
		// The replay's engine has already ended the saga (a halt of its
		// own): nothing is left to finish.
		delete(r.inh.unwinds, rec.Saga)
		return false, nil
	}
	if err := r.e.Apply(wr.Seq, wr.Type, wr.Payload); err != nil {
		return false, fmt.Errorf("finishing what the journal had in progress at the replay's start: %w", err)
	}
	r.jn.keep(wr.Type, wr.Payload)
	r.taken++
	switch rec.Type {
	case rollback.RecCompIntent:
		r.flt.drop(compKey{rec.Saga, rec.Actuator}) // an attempt the replay does not make
	case rollback.RecEnd:
		r.mu.Lock()
		r.nowEnd[rec.Saga] = rec.Code
		r.mu.Unlock()
	}
	return true, nil
}

func (r *replayer) skip(id uint64) {
	if !r.skipped[id] {
		r.skipped[id] = true
		r.res.Skipped = append(r.res.Skipped, SkippedSaga{Saga: id,
			Reason: fmt.Sprintf("its BEGIN is not in the journal (it began before seq %d): its records are not replayed", r.idx.first)})
	}
}

// hasSaga reports whether records of type t belong to one saga.
func hasSaga(t rollback.RecordType) bool {
	switch t {
	case rollback.RecBegin, rollback.RecIntent, rollback.RecApplied, rollback.RecFailed, rollback.RecRefused,
		rollback.RecCommit, rollback.RecAbort, rollback.RecCompIntent, rollback.RecCompDone, rollback.RecEnd:
		return true
	}
	return false
}

// reportable reports whether what saga does at seq is reported: it is in
// the window, or the saga was open at the window's start and is replayed
// from its BEGIN.
func (r *replayer) reportable(seq, saga uint64) bool {
	return seq >= r.idx.fromSeq || slices.Contains(r.idx.openAtStart, saga)
}

// drive does what a record asks of the replay's engine. Records that are
// the engine's own doing (outcomes, unwinds, halt passes) ask nothing:
// the replay's engine does its own.
func (r *replayer) drive(seq uint64, rec *rollback.Record) error {
	r.clk.set(rec.UnixNano)
	defer r.e.WaitHalts()
	s := &r.res.Summary
	switch rec.Type {
	case rollback.RecBegin:
		s.Begins++
		id, err := r.e.Begin(rollback.Owner{Agent: rec.Agent, Lease: rec.Lease, Epoch: rec.Epoch})
		if err != nil {
			r.beginRefused[rec.Saga] = string(rollback.CodeOf(err))
			return nil
		}
		r.sagaMap[rec.Saga] = id
		r.flt.mu.Lock()
		r.flt.origOf[id] = rec.Saga
		r.flt.mu.Unlock()
	case rollback.RecIntent:
		r.step(seq, rec)
	case rollback.RecRefused:
		switch {
		case aggregate(rec):
			if r.reportable(seq, rec.Saga) {
				r.res.NotReplayed[rec.Code] += aggregateCount(rec.Message)
				r.aggregates = true
			}
		case gateRefusal(rec):
			r.step(seq, rec)
		case r.reportable(seq, rec.Saga):
			r.res.NotReplayed[rec.Code]++
		}
	case rollback.RecCommit:
		s.Commits++
		if id, ok := r.open(rec.Saga); ok {
			r.e.Commit(id, r.owner(rec.Saga)) // a refusal shows in how the saga ended
		}
	case rollback.RecAbort, rollback.RecEnd:
		// The replay ends a saga on its own when it fails a step, halts or
		// recovers; an ABORT finds it still open only when the journal's
		// cause is the agent's, the lease's or the stop's. An END that
		// finds it open finishes an unwind begun before the replay's start.
		if id, ok := r.open(rec.Saga); ok {
			s.Aborts++
			why := rec.Message
			if rec.Type == rollback.RecEnd {
				why = "unwound in the journal (END " + rec.Code + ")"
			}
			r.e.Abort(id, r.owner(rec.Saga), why)
		}
	case rollback.RecHalt:
		if h, _ := r.e.Halted(); !h {
			s.Halts++
			r.e.Halt(rec.Message) // its errors are the safe policies': the report shows where things ended
		}
	case rollback.RecReset:
		if h, _ := r.e.Halted(); h {
			s.Resets++
			r.e.Reset(rec.Agent, r.e.HaltGen())
		}
	case rollback.RecZoneHalt:
		// A zone the replay's configuration does not have is refused
		// (UNKNOWN_ZONE): the report shows where things ended.
		r.e.ZoneHalt(rec.Code, rec.Message)
	case rollback.RecZoneReset:
		if gen, err := r.e.ZoneGen(rec.Code); err == nil {
			r.e.ZoneReset(rec.Agent, rec.Code, gen)
		}
	case rollback.RecSafe:
		if r.zoneSafe(rec.Actuator) {
			// A zone halt's safe move: the replay's zone halt made it.
			break
		}
		if !r.origHalted && !r.parked {
			// SAFE with no halt latched is the orderly stop's park.
			r.parked = true
			r.e.Park("orderly stop, replayed from the journal's SAFE records")
		}
	case rollback.RecRecovery:
		if rec.Message != recoveryFinished {
			return r.restart()
		}
	case rollback.RecLease:
		r.e.RecordLease(rec.Agent, rec.Lease, rec.Epoch)
	case rollback.RecObserved:
		target := rec.Target
		r.e.Adopt(rec.Actuator, func(float64) (float64, bool) { return target, true }, rec.Message)
	}
	return nil
}

// zoneSafe reports whether the actuator is in a zone the journal's view
// has halted: its SAFE record is the zone halt's, not an orderly stop's.
func (r *replayer) zoneSafe(actuator string) bool {
	z := r.view.ZoneOf(actuator)
	if z == "" {
		return false
	}
	for _, zs := range r.view.Zones() {
		if zs.Name == z {
			return zs.Halted
		}
	}
	return false
}

// open returns the replay's id of journal saga id if it is open there.
func (r *replayer) open(id uint64) (uint64, bool) {
	rid, ok := r.sagaMap[id]
	if !ok {
		return 0, false
	}
	return rid, slices.Contains(r.e.OpenSagas(), rid)
}

func (r *replayer) owner(id uint64) rollback.Owner {
	if s := r.idx.sagas[id]; s != nil {
		return s.owner
	}
	return rollback.Owner{}
}

// restart is a new process taking over the journal: a new engine rebuilt
// from everything journaled so far — the checkpoint's snapshot and the
// journal's records after it before the replay's start, then the replay's
// own (and those it took from the journal) — and Recover.
func (r *replayer) restart() error {
	r.res.Summary.Restarts++
	r.e.Close()
	e, err := rollback.New(r.ecfg)
	if err != nil {
		return err
	}
	r.e, r.parked = e, false
	from := r.idx.first
	if r.idx.ckpt != nil {
		if err := r.restore(e); err != nil {
			return fmt.Errorf("restart at a RECOVERY record: %w", err)
		}
		from = r.idx.base + 1
	}
	if r.idx.startSeq > from {
		err = wal.Scan(r.opt.Dir, wal.Options{}, from, func(wr wal.Record) error {
			if wr.Seq >= r.idx.startSeq {
				return errStop
			}
			rec, err := rollback.DecodeRecord(wr.Type, wr.Payload)
			if err != nil {
				return fmt.Errorf("record seq %d is not an engine record: %w", wr.Seq, err)
			}
			if hasSaga(rec.Type) && r.idx.orphan(rec.Saga) {
				return nil
			}
			return e.Apply(wr.Seq, wr.Type, wr.Payload)
		})
		if err != nil && !errors.Is(err, errStop) {
			return fmt.Errorf("restart at a RECOVERY record: %w", err)
		}
	}
	if err := r.jn.each(e.Apply); err != nil {
		return fmt.Errorf("restart at a RECOVERY record: rebuilding from the replay's own journal: %w", err)
	}
	if _, err := e.Recover(); err != nil {
		return fmt.Errorf("restart at a RECOVERY record: %w", err)
	}
	return nil
}

// gateCodes are the codes the engine's step gate refuses with.
var gateCodes = map[rollback.Code]bool{
	rollback.CodeHalted: true, rollback.CodeBadRequest: true, rollback.CodeSagaUnknown: true, rollback.CodeSagaNotOwner: true,
	rollback.CodeSagaBusy: true, rollback.CodeSagaFull: true, rollback.CodeDuplicateID: true, rollback.CodeDeadlinePassed: true,
	rollback.CodeActuatorUnknown: true, rollback.CodeActuatorBusy: true,
	rollback.Code(limits.NotFinite): true, rollback.Code(limits.LimitMin): true, rollback.Code(limits.LimitMax): true,
	rollback.Code(limits.LimitStep): true, rollback.Code(limits.LimitSlew): true,
	rollback.Code(limits.SupplyLow): true, rollback.Code(limits.SupplyHigh): true, rollback.Code(limits.SupplyUnknown): true,
	rollback.Code(limits.SupplyStale): true, rollback.Code(limits.SupplyTripped): true,
	rollback.Code(approval.CodeReplayed): true, rollback.Code(approval.CodeFull): true,
	rollback.CodeZoneHalted: true,
}

// aggregate reports whether a REFUSED record is a count of refusals rather
// than one command: the supervisor journals in aggregate what its lanes
// refuse, and what an agent refused too often earns beyond a budget, as
// one record per agent, op and code ("12 step requests refused with
// LIMIT_MAX since the last count"), naming no command id and no actuator.
// A single refused step always carries its id and its actuator.
func aggregate(rec *rollback.Record) bool { return rec.CmdID == "" && rec.Actuator == "" }

// aggregateCount is how many refusals an aggregate record counts: the
// number its message starts with, or 1.
func aggregateCount(msg string) int {
	n := 0
	for _, c := range msg {
		if c < '0' || c > '9' || n > 1e8 {
			break
		}
		n = n*10 + int(c-'0')
	}
	return max(n, 1)
}

// gateRefusal reports whether a REFUSED record is the engine's step gate's
// (replayable) rather than the supervisor's, which it journals with the
// request's op in front of the message ("step: lease expired").
func gateRefusal(rec *rollback.Record) bool {
	c := rollback.Code(rec.Code)
	if !gateCodes[c] {
		return false
	}
	switch limits.Code(c) {
	case limits.LimitMin, limits.LimitMax, limits.LimitStep, limits.LimitSlew:
		return true // only the gate checks limits
	}
	for _, op := range []api.Op{api.OpHello, api.OpHeartbeat, api.OpBegin, api.OpStep, api.OpCommit, api.OpAbort,
		api.OpBye, api.OpHalt, api.OpReset, api.OpStatus} {
		if strings.HasPrefix(rec.Message, string(op)+": ") {
			return false
		}
	}
	return true
}

// force makes a refused command carry what the journal lacks, so the gate
// refuses it again for the journaled reason once every check it can make
// anew has passed: a value that was not finite (journaled as 0), a
// deadline already passed, and causes the replay cannot know — a supply,
// an approval's nonce, a step of the saga in flight.
func (r *replayer) force(cmd *rollback.Command, rec *rollback.Record) {
	switch c := rollback.Code(rec.Code); c {
	case rollback.Code(limits.NotFinite):
		cmd.Value = math.NaN()
	case rollback.CodeDeadlinePassed:
		cmd.Deadline = r.clk.Now()
	case rollback.Code(limits.SupplyLow), rollback.Code(limits.SupplyHigh), rollback.Code(limits.SupplyUnknown),
		rollback.Code(limits.SupplyStale), rollback.Code(limits.SupplyTripped), rollback.CodeSagaBusy,
		rollback.Code(approval.CodeReplayed), rollback.Code(approval.CodeFull):
		msg := rec.Message
		cmd.Admit = func() *rollback.Error { return &rollback.Error{Code: c, Message: msg} }
	}
}

// step drives one step command, served (INTENT) or refused (REFUSED) then,
// and records how the replay's gate decided it.
func (r *replayer) step(seq uint64, rec *rollback.Record) {
	r.res.Summary.Steps++
	owner := r.owner(rec.Saga)
	cmd := rollback.Command{ID: rec.CmdID, Actuator: rec.Actuator, Value: rec.Requested}
	var then Verdict
	if rec.Type == rollback.RecIntent {
		then = Verdict{Served: true, Target: num(rec.Target), Clamped: rec.Flags&rollback.FlagClamped != 0}
		if f, ok := r.idx.fails[stepKey{rec.Saga, rec.Step}]; ok {
			r.flt.arm(rec.Actuator, stepError(f))
		}
	} else {
		owner = rollback.Owner{Agent: rec.Agent, Lease: rec.Lease, Epoch: rec.Epoch}
		then = Verdict{Code: rec.Code, Reason: rec.Message}
		r.force(&cmd, rec)
	}
	if rec.Actuator != "" && r.world.registry.Get(rec.Actuator) == nil {
		r.unknownActs[rec.Actuator] = true
	}
	id, ok := r.sagaMap[rec.Saga]
	if !ok {
		id = unknownSaga
	}
	r.mu.Lock()
	r.marking, r.callFirst = true, nil
	r.mu.Unlock()
	_, err := r.e.Step(id, owner, cmd)
	r.mu.Lock()
	first := r.callFirst
	r.marking, r.callFirst = false, nil
	r.mu.Unlock()
	r.flt.arm(rec.Actuator, nil) // not taken if the gate refused
	if !r.reportable(seq, rec.Saga) {
		return
	}
	now := verdictOf(first, err)
	c := Command{Seq: seq, Time: stamp(rec.UnixNano), Saga: rec.Saga, Agent: owner.Agent, Actuator: rec.Actuator,
		CmdID: rec.CmdID, Requested: Num(rec.Requested), BeforeWindow: seq < r.idx.fromSeq, Then: then, Now: now}
	switch {
	case then.Served && !now.Served:
		r.res.RefusedNow = append(r.res.RefusedNow, c)
	case !then.Served && now.Served:
		r.res.ServedNow = append(r.res.ServedNow, c)
	case !then.Served && then.Code != now.Code:
		r.res.RefusedDifferently = append(r.res.RefusedDifferently, c)
	case then.Served && !same(float64(*then.Target), float64(*now.Target), r.tol[rec.Actuator]):
		r.res.ClampedDifferently = append(r.res.ClampedDifferently, c)
	}
}

// verdictOf reads how the replay's gate decided from the first record the
// Step journaled (its INTENT or its refusal), or from its error when it
// journaled neither.
func verdictOf(first *rollback.Record, err error) Verdict {
	switch {
	case first != nil && first.Type == rollback.RecIntent:
		return Verdict{Served: true, Target: num(first.Target), Clamped: first.Flags&rollback.FlagClamped != 0}
	case first != nil:
		return Verdict{Code: first.Code, Reason: first.Message}
	case err != nil:
		return Verdict{Code: string(rollback.CodeOf(err)), Reason: err.Error()}
	}
	return Verdict{Code: "NOT_JOURNALED", Reason: "the replay's engine journaled no decision"}
}

// follow keeps track of where the journal stands after a record — steps in
// flight, sagas unwinding, a halt awaiting its SAFE records — and, once
// the window is reached, compares the actuators the record settles.
func (r *replayer) follow(seq uint64, rec *rollback.Record, driving bool) {
	cmp := driving && seq >= r.idx.fromSeq
	switch rec.Type {
	case rollback.RecIntent:
		r.inflight[stepKey{rec.Saga, rec.Step}] = rec.Actuator
		if !slices.Contains(r.touched[rec.Saga], rec.Actuator) {
			r.touched[rec.Saga] = append(r.touched[rec.Saga], rec.Actuator)
		}
	case rollback.RecApplied, rollback.RecFailed:
		k := stepKey{rec.Saga, rec.Step}
		act, ok := r.inflight[k]
		delete(r.inflight, k)
		// A failed step's saga is about to unwind: it settles at END.
		if cmp && ok && rec.Type == rollback.RecApplied && !r.unwinding[rec.Saga] {
			r.compare(seq, rec, act)
		}
	case rollback.RecAbort:
		r.unwinding[rec.Saga] = true
	case rollback.RecCommit, rollback.RecEnd:
		acts := r.touched[rec.Saga]
		delete(r.touched, rec.Saga)
		delete(r.unwinding, rec.Saga)
		if cmp {
			r.compare(seq, rec, acts...)
		}
	case rollback.RecHalt:
		r.origHalted = true
		r.expectSafe()
	case rollback.RecReset:
		r.origHalted = false
		clear(r.awaitSafe)
	case rollback.RecRecovery:
		if rec.Message != recoveryFinished && r.origHalted {
			r.expectSafe() // recovery applies the latched halt's safe policies again
		}
	case rollback.RecZoneHalt:
		// The replay's zone halt parks the zone at once; the journal's
		// SAFE records for it follow the unwinds of the zone's sagas.
		r.expectZoneSafe(rec.Code)
	case rollback.RecSafe:
		delete(r.awaitSafe, rec.Actuator)
		if cmp {
			r.compare(seq, rec, rec.Actuator)
		}
	case rollback.RecObserved:
		if cmp {
			r.compare(seq, rec, rec.Actuator)
		}
	}
}

// expectZoneSafe is expectSafe for the actuators of one zone.
func (r *replayer) expectZoneSafe(zone string) {
	for _, name := range r.world.registry.Names() {
		if r.view.ZoneOf(name) == zone && r.world.registry.Get(name).Safe.Mode != actuators.SafeHold {
			r.awaitSafe[name] = true
		}
	}
}

// expectSafe marks the actuators a halt moves: until the journal's SAFE
// record for each, the journal has not caught up with the replay's halt,
// which moved them at once.
func (r *replayer) expectSafe() {
	for _, name := range r.world.registry.Names() {
		if r.world.registry.Get(name).Safe.Mode != actuators.SafeHold {
			r.awaitSafe[name] = true
		}
	}
}

// compare checks actuators whose commanded value the journal has just
// settled, and records the first record each differs at.
func (r *replayer) compare(seq uint64, rec *rollback.Record, names ...string) {
	for _, name := range names {
		if r.diverged[name] || r.awaitSafe[name] {
			continue
		}
		jv, ok1 := r.view.Commanded(name)
		rv, ok2 := r.e.Commanded(name)
		if !ok1 || !ok2 || same(jv, rv, r.tol[name]) {
			continue
		}
		r.diverged[name] = true
		r.res.Divergence = append(r.res.Divergence, Divergence{Actuator: name, Seq: seq, Time: stamp(rec.UnixNano),
			Record: describe(rec), Journal: Num(jv), Replay: Num(rv)})
	}
}

func describe(rec *rollback.Record) string {
	switch rec.Type {
	case rollback.RecApplied:
		return fmt.Sprintf("APPLIED saga %d step %d", rec.Saga, rec.Step)
	case rollback.RecCommit, rollback.RecEnd:
		return fmt.Sprintf("%s saga %d", rec.Type, rec.Saga)
	}
	return rec.Type.String() + " " + rec.Actuator
}

// finish compares where every actuator ends, how each saga ended, and
// writes the notes.
func (r *replayer) finish() {
	res := r.res
	for _, name := range r.world.registry.Names() {
		jv, _ := r.view.Commanded(name)
		rv, _ := r.e.Commanded(name)
		res.Final = append(res.Final, Position{Actuator: name, Journal: Num(jv), Replay: Num(rv), Differs: !same(jv, rv, r.tol[name])})
	}
	for _, id := range r.idx.openAtStart {
		s := r.idx.sagas[id]
		res.Window.OpenAtStart = append(res.Window.OpenAtStart, OpenSaga{Saga: id, Agent: s.owner.Agent, BeginSeq: s.beginSeq,
			FromCheckpoint: s.fromCkpt})
	}
	var ids []uint64
	for id, s := range r.idx.sagas {
		begunInReplay := s.beginSeq != 0 && s.beginSeq <= r.idx.toSeq && s.beginSeq >= r.idx.startSeq && r.reportable(s.beginSeq, id)
		if begunInReplay || s.fromCkpt && slices.Contains(r.idx.openAtStart, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	r.mu.Lock()
	for _, id := range ids {
		s := r.idx.sagas[id]
		then := r.idx.thenOutcome(id, r.idx.toSeq)
		now := "open"
		if code, refused := r.beginRefused[id]; refused {
			now = "not begun: " + code
		} else if how, ok := r.nowEnd[r.sagaMap[id]]; ok {
			now = how
		}
		if then != now {
			res.Sagas = append(res.Sagas, SagaDiff{Saga: id, Agent: s.owner.Agent, BeginSeq: s.beginSeq, Then: then, Now: now})
		}
	}
	r.mu.Unlock()
	slices.SortFunc(res.Skipped, func(a, b SkippedSaga) int { return cmp.Compare(a.Saga, b.Saga) })
	r.flt.mu.Lock()
	res.Summary.InjectedFaults = r.flt.injected
	r.flt.mu.Unlock()
	res.Notes = r.notes()
	res.normalize()
	res.summarize()
}

// beginningNotes say how a journal that begins after seq 1 was replayed:
// from which checkpoint, or, when none could be used, from the config's
// initial values, and why.
func (r *replayer) beginningNotes() []string {
	x := r.idx
	if x.first <= 1 {
		return nil
	}
	var n []string
	if c := x.ckpt; c != nil {
		n = append(n, fmt.Sprintf("beginning: the journal begins at seq %d (the records before it are gone); the replay "+
			"starts from checkpoint %s, which covers the records up to seq %d: the replay's engine and the journal's view "+
			"(and the engine of each restart) are restored from its snapshot — open sagas with their owners and steps, "+
			"every actuator's commanded value, the saga counter, the halt latch — and the records up to seq %d are not replayed",
			x.first, c.Name, c.At.Seq, c.At.Seq))
		if x.fromSeq > x.first && x.fromSeq <= x.base {
			n = append(n, fmt.Sprintf("window: its records from seq %d to %d are in the checkpoint's snapshot and are not replayed or reported",
				x.fromSeq, x.base))
		}
		if r.mismatch != "" {
			n = append(n, "checkpoint: it was taken under other actuators than this config's ("+r.mismatch+
				"); what it says of the actuators both have is restored, and the others start from the config's initial values")
		}
	} else {
		n = append(n, fmt.Sprintf("beginning: the journal begins at seq %d (the records before it are gone) and no checkpoint covers "+
			"the missing records; the actuators start from the config's initial values, in the journal's view as in the replay, "+
			"not from where those records left them, and sagas begun before seq %d are skipped", x.first, x.first))
		if len(x.ckpts)+len(x.damaged) == 0 {
			n = append(n, "checkpoints: the journal directory holds none")
		}
	}
	for _, p := range x.passedOver {
		n = append(n, "checkpoints: "+p)
	}
	for _, d := range x.damaged {
		n = append(n, fmt.Sprintf("checkpoints: %s is damaged and not used: %s", d.Name, d.Reason))
	}
	return n
}

// notes say, in the same words every run, what the replay could not check
// as the daemon did and what it took from the journal instead.
func (r *replayer) notes() []string {
	n := []string{
		fmt.Sprintf("time: the replay's clock is set to each record's journal time, so slew is measured between those; "+
			"the daemon read its own clock a moment earlier, so values an actuator's max_rate bounds are compared within "+
			"max_rate × %s (--time-tolerance)", r.opt.TimeTolerance),
	}
	if len(r.world.supplies) > 0 {
		var vs []string
		for _, name := range sortedKeys(r.world.supplies) {
			vs = append(vs, fmt.Sprintf("%s %g V", name, r.world.supplies[name]))
		}
		n = append(n, "supplies: the journal holds no voltages; every supply is taken as nominal ("+strings.Join(vs, ", ")+
			"); a command a supply refused then is refused again with that code once the limits pass, "+
			"and no command served then is checked against a supply")
		n = append(n, r.world.notes...)
	}
	n = append(n,
		"deadlines: not journaled; a command refused DEADLINE_PASSED then is refused so again, every other one is replayed without a deadline",
		"approvals: not journaled; a step on an actuator that requires approval is replayed as approved, and the gate's "+
			"APPROVAL_REPLAYED and APPROVALS_FULL refusals are refused again with that code",
		"concurrency: the replay is sequential; a step refused SAGA_BUSY then is refused again with that code",
		fmt.Sprintf("drivers: the simulated devices do what they are told, except where the journal shows a driver failure: "+
			"%d step or compensation failures were made to happen again", r.flt.injected),
		"supervisor: refusals it decided before the gate (leases, permissions, rates, readiness) are not replayed "+
			"(counted under not_replayed); a lapsed lease shows in the journal as aborts, which are replayed",
	)
	if r.aggregates {
		n = append(n, "counts: some refusals are journaled only as a count per agent, op and code (an agent refused too often, "+
			"or refused by its lane); they name no command, so they are counted under not_replayed and not replayed, "+
			"and the command ids they used are unknown to the replay's gate")
	}
	n = append(n, r.beginningNotes()...)
	if r.idx.startSeq > r.idx.first {
		n = append(n, fmt.Sprintf("start: the replay starts at seq %d from the journal's state there, rebuilt as recovery would; "+
			"the first step on each actuator after it is not slew-checked, as the engine knows no time for the value it starts from", r.idx.startSeq))
	}
	if r.taken > 0 {
		what := "1 record"
		if r.taken > 1 {
			what = fmt.Sprintf("%d records", r.taken)
		}
		n = append(n, "inherited: "+what+" finishing what the daemon had in progress where the replay starts "+
			"(a step's outcome, an unwind under way, a halt's safe moves) taken from the journal: the replay's engine did not begin that work "+
			"and does not redo it")
	}
	if r.res.Summary.Restarts > 0 {
		from := "the replay's own journal"
		if r.idx.ckpt != nil {
			from = "the checkpoint's snapshot and the replay's own journal"
		}
		n = append(n, fmt.Sprintf("restarts: %d RECOVERY records (a new process taking the journal over), each replayed "+
			"as a new engine rebuilt from %s, then Recover", r.res.Summary.Restarts, from))
	}
	if len(r.unknownActs) > 0 {
		n = append(n, "actuators the journal names but the config does not: "+strings.Join(sortedKeys(r.unknownActs), ", ")+
			" (refused ACTUATOR_UNKNOWN now; no position to compare)")
	}
	n = append(n, "divergence: compared where the journal has settled a value (a step applied, a saga ended, a SAFE or OBSERVED record), from the window's start")
	return n
}
