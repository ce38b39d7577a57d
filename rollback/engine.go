package rollback

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/limits"
)

// Journal is what the engine needs of the write-ahead journal (wal.Log
// implements it). Enqueue orders a record after every record enqueued
// before it and returns at once; Sync returns when every record enqueued
// before the call is durable. Any error is fatal.
type Journal interface {
	Enqueue(typ uint8, payload []byte) (seq uint64, err error)
	Sync() error
}

// Supplies reports the state of a named supply at a time. ok is false when no
// such supply exists.
type Supplies interface {
	SupplyState(name string, now time.Time) (st limits.SupplyState, ok bool)
}

// Durability says which intents wait for fdatasync before their effect.
type Durability uint8

const (
	// EveryStep makes every INTENT durable before its effect (the default).
	EveryStep Durability = iota
	// FirstTouch makes durable only a saga's first INTENT on an actuator (its
	// prior is the saga's restore target); later steps on that actuator ride
	// the next group commit. It trades audit completeness for rate: after a
	// crash the last few steps may be missing from the journal, but the
	// actuator is still restored to the saga's starting value.
	FirstTouch
)

func (d Durability) String() string {
	if d == FirstTouch {
		return "first-touch"
	}
	return "every-step"
}

// Order is the unwind order.
type Order uint8

const (
	// Retrace undoes steps last-first, each to its own prior: the arm goes
	// back the way it came (the default).
	Retrace Order = iota
	// Direct moves each actuator straight to its pre-saga value, in reverse
	// order of first touch.
	Direct
)

func (o Order) String() string {
	if o == Direct {
		return "direct"
	}
	return "retrace"
}

// OnCompensationFailure says what the engine does when a compensation still
// fails after its retries and the actuator has gone to its safe policy.
type OnCompensationFailure uint8

const (
	// HaltOnFailure latches halt: every actuator to its safe policy, the rest
	// of the unwind unresolved (the default).
	HaltOnFailure OnCompensationFailure = iota
	// ContinueOnFailure carries on unwinding the remaining steps.
	ContinueOnFailure
)

// Config wires an engine.
type Config struct {
	Journal   Journal
	Actuators *actuators.Registry
	Supplies  Supplies         // nil: actuators naming a supply are refused
	Now       func() time.Time // nil: time.Now (its monotonic reading)

	Durability            Durability
	Order                 Order
	OnCompensationFailure OnCompensationFailure
	Retries               int           // compensation retries after the first attempt; default 2
	RetryBackoff          time.Duration // first backoff, doubled each retry; default 10ms
	// MaxSagaCommands bounds the commands (applied or refused) one saga may
	// carry, so a saga's memory — its steps and seen command ids — stays
	// bounded however long an agent streams. Default DefaultMaxSagaCommands.
	MaxSagaCommands int
	// MaxSagasPerLease bounds the sagas one owner (agent, lease, epoch) may
	// hold open at once. Default DefaultMaxSagasPerLease.
	MaxSagasPerLease int
	Logger           *slog.Logger // nil: discard
	// JournalRefusal, if set, is asked (with the engine's lock held: it
	// must be quick and must not call the engine) whether a step the gate
	// refused is journaled on its own; false leaves it to the caller to
	// journal in aggregate, so that an agent refused without end cannot
	// fill the disk one record per command. nil journals every one.
	JournalRefusal func(owner Owner, code Code) bool
	// OnHalt receives, after each halt the engine's halt goroutine applied
	// (see Latch), the reports of the sagas it ended and the safe-policy
	// errors. It runs on that goroutine: it must not call Halt.
	OnHalt func([]*Report, error)
	// Zones groups actuators into named zones for scoped halts (see
	// zones.go): zone name to its actuators, each actuator in at most one.
	Zones map[string][]string
}

// DefaultMaxSagaCommands is the default Config.MaxSagaCommands: ten
// thousand steps is minutes of streaming at a control rate, far more than
// any sequence a person wants unwound in one piece.
const DefaultMaxSagaCommands = 10000

// DefaultMaxSagasPerLease is the default Config.MaxSagasPerLease: a
// controller rarely needs more than one or two sagas open (an arm and a
// base moving independently); eight leaves room without letting one agent
// hold every actuator in sagas it never closes.
const DefaultMaxSagasPerLease = 8

// Owner identifies who acts in a saga. Lease and epoch are checked by the
// supervisor; the engine records them and refuses another owner's commands.
type Owner struct {
	Agent string
	Lease string
	Epoch uint64
}

// Command is one step request.
type Command struct {
	ID       string
	Actuator string
	Value    float64
	Deadline time.Time // zero: none
	// Admit, if set, is the gate's last check: called with the engine's
	// lock held once every other check has passed, just before the step's
	// INTENT is journaled. A non-nil *Error refuses the step like any other
	// gate refusal (journaled REFUSED, nothing moves); nil admits it, and
	// nothing after Admit refuses the step. The supervisor spends an
	// operator approval's nonce here, so a step the gate refuses for any
	// other reason does not use up its approval. It must be quick and must
	// not call the engine.
	Admit func() *Error
	// Note, if set, is journaled as the INTENT's message: for the audit
	// trail only (the supervisor names the keys that approved the step).
	Note string
}

// StepResult is what a successful step did.
type StepResult struct {
	Step      uint32
	Prior     float64
	Value     float64 // the value applied (differs from Requested when clamped)
	Requested float64
	Clamped   bool
}

type actState struct {
	a         *actuators.Actuator
	commanded float64
	changed   uint64    // when commanded last changed, in the engine's change count
	at        time.Time // when the last command was applied; zero when unknown
	holder    *saga
	// alt is, after the rebuild, a second place the journal allows the
	// actuator to be (altOK): the value before a move whose outcome the
	// journal lacks — a step or compensation in flight at the crash, a
	// safe policy journaled but perhaps not applied. Reconcile accepts
	// either.
	alt   float64
	altOK bool
	// detached: the journal's last word on the actuator is a detach (a
	// safe policy): it is wherever it came to rest, which the journal
	// cannot say. Reconcile leaves it alone.
	detached bool
	// zone is the actuator's zone (nil: none); moving counts its effects
	// in flight (a step's or a compensation's), which a zone halt waits
	// for before it parks the zone (guarded by mu, signalled by moved).
	zone   *zone
	moving int
}

type step struct {
	n        uint32
	actName  string
	act      *actState // nil when the journal names an actuator no longer configured
	prior    float64
	target   float64
	outcome  Outcome // "" while the effect is in flight
	bucket   Bucket  // "" until unwound
	attempts uint32  // compensation attempts journaled (numbering)
	// failures counts attempts known to have failed. The retry budget is
	// spent only by these: an attempt cut short by a crash is in doubt, not
	// failed, so a crash (even during recovery) never uses up the retries.
	failures uint32
	err      string
	// compTarget is what the last journaled compensation drove to; only
	// the rebuild needs it, to bring back the commanded value.
	compTarget float64
}

type saga struct {
	id        uint64
	owner     Owner
	steps     []*step
	ids       map[string]struct{}
	busy      bool // a step's effect is in flight
	unwinding bool
	abortWhy  string // set once ABORT is journaled
	// pendingAbort is set when the saga's agent was aborted while a step was
	// in flight; the step unwinds the saga when its effect returns.
	pendingAbort string
}

// Engine runs the step protocol and unwinds. It is safe for concurrent use.
type Engine struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	acts     map[string]*actState
	sagas    map[uint64]*saga
	nextSaga uint64
	maxEpoch uint64 // the highest lease epoch a saga began under
	changes  uint64 // commanded values changed by this process (orders them)
	// latchGen counts halts asked for; clearedGen is the latest generation
	// a reset cleared. Halted is latchGen > clearedGen (see halt.go).
	latchGen   atomic.Uint64
	clearedGen atomic.Uint64
	lane       haltLane
	// parked: an orderly stop sent every actuator to its safe policy;
	// nothing moves again in this process. Not journaled.
	parked  bool
	parkWhy string
	// safeDone: this process has applied the safe policies since the halt
	// latched (so Recover need not apply them again).
	safeDone bool
	fatal    error
	buf      []byte // record encoding buffer, guarded by mu
	inflight sync.WaitGroup
	// effectDoneHook, if set (tests only), runs just after an effect
	// stops counting as in flight (see effectDone).
	effectDoneHook func()
	haltMu         sync.Mutex // serialises halts
	// bg counts the goroutines the engine started (the halt goroutine,
	// see Latch); Close waits for them. Add is made under lane.mu and
	// only while the lane is open, so it never races Close's Wait.
	bg sync.WaitGroup
	// closed: Close was called; every call that works is refused
	// (errClosed). Guarded by mu; the lane has its own flag.
	closed bool
	// drain is the drain in force (nil: none); drainGen numbers the
	// drains of this process. quarantined holds the barred agents. All
	// guarded by mu, rebuilt from the journal (drain.go, quarantine.go).
	drain       *Drain
	drainGen    uint64
	quarantined map[string]*Quarantine
	// zl holds the zones and their halts (zones.go); moved is signalled
	// (on mu) whenever an effect stops counting as in flight.
	zl    zoneLane
	moved *sync.Cond
}

// New builds an engine. Before serving, a recovering caller feeds it the
// journal with Apply and then calls Recover.
func New(cfg Config) (*Engine, error) {
	if cfg.Journal == nil || cfg.Actuators == nil {
		return nil, errors.New("rollback: config needs a journal and actuators")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Retries < 0 {
		return nil, errors.New("rollback: negative retries")
	}
	if cfg.Retries == 0 {
		cfg.Retries = 2
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = 10 * time.Millisecond
	}
	if cfg.MaxSagaCommands <= 0 {
		cfg.MaxSagaCommands = DefaultMaxSagaCommands
	}
	if cfg.MaxSagasPerLease <= 0 {
		cfg.MaxSagasPerLease = DefaultMaxSagasPerLease
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	e := &Engine{
		cfg:         cfg,
		log:         lg,
		acts:        make(map[string]*actState),
		sagas:       make(map[uint64]*saga),
		nextSaga:    1,
		quarantined: make(map[string]*Quarantine),
		buf:         make([]byte, 0, 512),
	}
	for _, name := range cfg.Actuators.Names() {
		a := cfg.Actuators.Get(name)
		e.acts[name] = &actState{a: a, commanded: a.Initial}
	}
	e.moved = sync.NewCond(&e.mu)
	if err := e.initZones(); err != nil {
		return nil, err
	}
	return e, nil
}

// enqueue journals r without waiting. Callers hold mu.
func (e *Engine) enqueue(r *Record) (uint64, error) {
	if e.fatal != nil {
		return 0, e.fatal
	}
	r.UnixNano = e.cfg.Now().UnixNano()
	e.buf = r.AppendEncode(e.buf[:0])
	seq, err := e.cfg.Journal.Enqueue(uint8(r.Type), e.buf)
	if err != nil {
		e.failLocked(err)
	}
	return seq, err
}

// sync waits for durability of everything enqueued. Callers do not hold mu.
func (e *Engine) sync() error {
	err := e.cfg.Journal.Sync()
	if err != nil {
		e.mu.Lock()
		e.failLocked(err)
		e.mu.Unlock()
	}
	return err
}

// journal enqueues r and waits for it to be durable. Callers hold mu; it is
// released while waiting and held again on return.
func (e *Engine) journal(r *Record) error {
	if _, err := e.enqueue(r); err != nil {
		return err
	}
	e.mu.Unlock()
	err := e.sync()
	e.mu.Lock()
	return err
}

// failLocked latches the journal failure: fail-stop. A journal that cannot
// record an intent cannot permit an effect.
func (e *Engine) failLocked(err error) {
	if e.fatal != nil {
		return
	}
	e.fatal = fmt.Errorf("rollback: journal failed: %w", err)
	e.log.Error("journal failed; halting", "err", err)
	e.Latch("journal failed") // applied by the halt goroutine: the caller holds mu
}

// Begin opens a saga for owner. It returns once the BEGIN record is
// durable, so a saga id an agent has been told of is never handed out
// again, even after a crash.
func (e *Engine) Begin(owner Owner) (uint64, error) {
	if owner.Agent == "" {
		return 0, refusal(CodeBadRequest, "begin without an agent")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.gateGlobal(); err != nil {
		return 0, err
	}
	if err := e.quarantineRefusal(owner.Agent); err != nil {
		return 0, err
	}
	if err := e.drainRefusal(); err != nil {
		return 0, err
	}
	open := 0
	for _, s := range e.sagas {
		if s.owner == owner {
			open++
		}
	}
	if open >= e.cfg.MaxSagasPerLease {
		return 0, refusal(CodeTooManySagas, "%d sagas are open under this lease: commit or abort one first", open)
	}
	// Registered before the sync, so that another Begin counts it, but
	// busy until its BEGIN is durable: a halt pass, a zone halt or an
	// agent's abort leaves it alone meanwhile. A saga whose BEGIN never
	// became durable did not exist; no report may name it, for after a
	// restart its id is handed out again (the rebuild counts only durable
	// BEGINs).
	s := &saga{id: e.nextSaga, owner: owner, ids: make(map[string]struct{}), busy: true}
	e.nextSaga++
	e.sagas[s.id] = s
	e.maxEpoch = max(e.maxEpoch, owner.Epoch)
	err := e.journal(&Record{Type: RecBegin, Saga: s.id, Agent: owner.Agent, Lease: owner.Lease, Epoch: owner.Epoch})
	s.busy = false
	if err != nil {
		delete(e.sagas, s.id)
		return 0, refusal(CodeJournalFailed, "%v", err)
	}
	// The BEGIN is durable, but a halt may have passed while it was
	// synced: the agent is told so rather than handed a saga that is gone.
	if rep := e.endBusyIfHaltedLocked(s); rep != nil {
		return 0, &Error{Code: CodeHalted, Message: "halted while the saga began: " + e.haltReason(), Report: rep}
	}
	if why := s.pendingAbort; why != "" {
		rep := e.unwindLocked(s, why, false)
		return 0, &Error{Code: CodeSagaUnknown, Message: "saga aborted while it began: " + why, Report: rep}
	}
	return s.id, nil
}

// endBusyIfHaltedLocked ends s, whose busy spell (a BEGIN, INTENT or
// COMMIT being synced) has just ended, as a halt's pass would have ended
// it had it not been busy, if a halt is latched; it returns the report, or
// nil when no halt is. Ending it here, under the lock the sync returned
// to, leaves nothing to which goroutine takes the lock first. Callers
// hold mu.
func (e *Engine) endBusyIfHaltedLocked(s *saga) *Report {
	if !e.stopped() {
		return nil
	}
	return e.closeHaltedLocked(s)
}

// RecordLease makes a lease grant durable before the agent is told of it,
// so that its epoch is never granted again, even after a crash.
func (e *Engine) RecordLease(agent, lease string, epoch uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.gateGlobal(); err != nil && (err.Code == CodeJournalFailed || e.closed) {
		return err
	}
	if err := e.journal(&Record{Type: RecLease, Agent: agent, Lease: lease, Epoch: epoch}); err != nil {
		return &Error{Code: CodeJournalFailed, Message: err.Error(), err: err}
	}
	e.maxEpoch = max(e.maxEpoch, epoch)
	return nil
}

// MaxEpoch is the highest lease epoch the journal shows spent (granted, or
// begun under). A lease manager starts above it, so epochs — fencing
// tokens — keep increasing across restarts. Refusals are not counted: they
// may carry any epoch a client sent.
func (e *Engine) MaxEpoch() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.maxEpoch
}

func (e *Engine) gateGlobal() *Error {
	if e.closed {
		return errClosed()
	}
	if e.fatal != nil {
		return &Error{Code: CodeJournalFailed, Message: e.fatal.Error(), err: e.fatal}
	}
	if e.stopped() {
		return refusal(CodeHalted, "halted: %s", e.haltReason())
	}
	return nil
}

// openSaga finds an open saga of owner that is free to act. Callers hold mu.
func (e *Engine) openSaga(id uint64, owner Owner) (*saga, *Error) {
	s := e.sagas[id]
	if s == nil || s.unwinding {
		return nil, refusal(CodeSagaUnknown, "no open saga %d", id)
	}
	if s.owner != owner {
		return nil, refusal(CodeSagaNotOwner, "saga %d belongs to agent %q lease %q epoch %d", id, s.owner.Agent, s.owner.Lease, s.owner.Epoch)
	}
	if s.busy {
		return nil, refusal(CodeSagaBusy, "saga %d has a step in flight", id)
	}
	return s, nil
}

// Step runs one command through the gate, the durable intent, the effect
// and the outcome. A refusal returns an *Error and moves nothing. A failed
// or in-doubt effect unwinds the saga and returns an *Error carrying the
// RollbackReport.
func (e *Engine) Step(sagaID uint64, owner Owner, cmd Command) (StepResult, error) {
	e.mu.Lock()
	now := e.cfg.Now()
	s, st, v, rerr := e.gate(sagaID, owner, cmd, now)
	if rerr != nil {
		// Refusals are journaled for the audit trail; durability is not
		// required, so they ride the next group commit. After Close the
		// journal is its owner's to close: nothing more is written.
		if e.fatal == nil && !e.closed && (e.cfg.JournalRefusal == nil || e.cfg.JournalRefusal(owner, rerr.Code)) {
			e.enqueue(&Record{Type: RecRefused, Saga: sagaID, Actuator: cmd.Actuator, Requested: finiteOrZero(cmd.Value),
				Agent: owner.Agent, Lease: owner.Lease, Epoch: owner.Epoch, CmdID: cmd.ID, Code: string(rerr.Code), Message: rerr.Message})
		}
		e.mu.Unlock()
		return StepResult{}, rerr
	}
	firstTouch := st.holder == nil
	st.holder = s
	sp := &step{n: uint32(len(s.steps) + 1), actName: cmd.Actuator, act: st, prior: st.commanded, target: v.Value}
	s.steps = append(s.steps, sp)
	s.busy = true
	rec := Record{Type: RecIntent, Saga: s.id, Step: sp.n, Actuator: cmd.Actuator, Target: v.Value, Prior: sp.prior,
		Requested: cmd.Value, Lease: owner.Lease, Epoch: owner.Epoch, CmdID: cmd.ID, Message: cmd.Note}
	if v.Clamped {
		rec.Flags |= FlagClamped
	}
	if firstTouch {
		rec.Flags |= FlagFirstTouch
	}
	_, err := e.enqueue(&rec)
	if err == nil {
		e.inflight.Add(1)
		st.moving++
	}
	e.mu.Unlock()
	counted := err == nil // the effect counts in flight
	if err == nil && (e.cfg.Durability == EveryStep || firstTouch) {
		err = e.sync()
	}
	if err != nil {
		// The intent may not be durable: the effect must not happen.
		e.mu.Lock()
		if counted {
			e.effectDone(st)
		}
		sp.outcome = Failed
		s.busy = false
		// The failure latched the halt, whose pass left this saga alone.
		jerr := &Error{Code: CodeJournalFailed, Message: err.Error(), err: err, Report: e.endBusyIfHaltedLocked(s)}
		e.mu.Unlock()
		return StepResult{}, jerr
	}
	if e.latched() {
		// A halt latched while the intent was being made durable: the halt
		// wins. The intent is closed as not applied and nothing moves.
		e.mu.Lock()
		sp.outcome = Failed
		e.enqueue(&Record{Type: RecFailed, Saga: s.id, Step: sp.n, Code: "NOT_APPLIED", Message: "halted before the effect: not applied"})
		// Done only now: the halt's SAFE records, which wait for every
		// step in flight, must follow this outcome in the journal (the
		// rebuild takes a FAILED step's actuator back to its prior).
		e.effectDone(st)
		s.busy = false
		rep := e.closeHaltedLocked(s)
		e.mu.Unlock()
		return StepResult{}, &Error{Code: CodeHalted, Message: "halted while the intent was made durable: not applied; saga ended unresolved", Report: rep}
	}
	if st.zoneHalted() {
		// The actuator's zone halted meanwhile: the same, for the zone.
		// The saga touches the zone, so it is unwound whole (its steps
		// in the zone unresolved, the others put back).
		e.mu.Lock()
		sp.outcome = Failed
		e.enqueue(&Record{Type: RecFailed, Saga: s.id, Step: sp.n, Code: "NOT_APPLIED", Message: "zone halted before the effect: not applied"})
		e.effectDone(st)
		s.busy = false
		why := "zone " + st.zone.name + " halted: " + e.zoneReason(st.zone)
		rep := e.unwindLocked(s, why, false)
		e.mu.Unlock()
		return StepResult{}, &Error{Code: CodeZoneHalted, Message: why + " (before the effect: not applied; saga unwound)", Report: rep}
	}

	effErr := e.effect(st.a, v.Value)

	e.mu.Lock()
	outcome := Applied
	out := Record{Type: RecApplied, Saga: s.id, Step: sp.n}
	if effErr != nil {
		outcome = Failed
		out.Type = RecFailed
		out.Message = effErr.Error()
		out.Code = "FAILED"
		if inDoubt(effErr) {
			outcome = InDoubt
			out.Flags |= FlagInDoubt
			out.Code = "IN_DOUBT"
		}
	}
	sp.outcome = outcome
	if outcome != Failed {
		// In doubt counts as applied: the target is the best knowledge.
		e.setCommanded(st, v.Value)
		st.at = now
	}
	e.enqueue(&out)
	// Done only now that the outcome is recorded: see effectDone.
	e.effectDone(st)
	s.busy = false
	if outcome == Applied {
		if e.stopped() {
			// A halt arrived while the effect was in flight: end the saga.
			rep := e.closeHaltedLocked(s)
			e.mu.Unlock()
			return StepResult{}, &Error{Code: CodeHalted, Message: "halted during the step; saga ended unresolved", Report: rep}
		}
		if why := s.pendingAbort; why != "" {
			rep := e.unwindLocked(s, why, false)
			e.mu.Unlock()
			return StepResult{}, &Error{Code: CodeSagaUnknown, Message: "saga aborted during the step: " + why, Report: rep}
		}
		e.mu.Unlock()
		return StepResult{Step: sp.n, Prior: sp.prior, Value: v.Value, Requested: cmd.Value, Clamped: v.Clamped}, nil
	}
	why := fmt.Sprintf("step %d on %s %s: %v", sp.n, cmd.Actuator, outcome, effErr)
	rep := e.unwindLocked(s, why, false)
	e.mu.Unlock()
	code := CodeStepFailed
	if outcome == InDoubt {
		code = CodeStepInDoubt
	}
	return StepResult{}, &Error{Code: code, Message: why, Report: rep, err: effErr}
}

// RecordRefusal journals a refusal decided before the engine's gate — a
// malformed request, a lease that is not live, a replayed command id — so
// the audit trail shows every refused command, whoever refused it. Like the
// gate's own refusals it is not waited for.
func (e *Engine) RecordRefusal(sagaID uint64, owner Owner, cmd Command, code Code, msg string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fatal != nil || e.closed {
		return
	}
	e.enqueue(&Record{Type: RecRefused, Saga: sagaID, Actuator: cmd.Actuator, Requested: finiteOrZero(cmd.Value),
		Agent: owner.Agent, Lease: owner.Lease, Epoch: owner.Epoch, CmdID: cmd.ID, Code: string(code), Message: msg})
}

func finiteOrZero(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

// gate decides whether cmd may proceed. Callers hold mu. It touches nothing
// but the saga's seen-ids set.
func (e *Engine) gate(sagaID uint64, owner Owner, cmd Command, now time.Time) (*saga, *actState, limits.Verdict, *Error) {
	var v limits.Verdict
	if err := e.gateGlobal(); err != nil {
		return nil, nil, v, err
	}
	if cmd.ID == "" {
		return nil, nil, v, refusal(CodeBadRequest, "command without an id")
	}
	if err := e.quarantineRefusal(owner.Agent); err != nil {
		return nil, nil, v, err
	}
	s, err := e.openSaga(sagaID, owner)
	if err != nil {
		return nil, nil, v, err
	}
	if len(s.ids) >= e.cfg.MaxSagaCommands {
		return nil, nil, v, refusal(CodeSagaFull, "saga %d has carried %d commands: commit or abort it and begin another", s.id, len(s.ids))
	}
	if _, seen := s.ids[cmd.ID]; seen {
		return nil, nil, v, refusal(CodeDuplicateID, "command id %q already seen in saga %d", cmd.ID, s.id)
	}
	s.ids[cmd.ID] = struct{}{}
	if !cmd.Deadline.IsZero() && !now.Before(cmd.Deadline) {
		return nil, nil, v, refusal(CodeDeadlinePassed, "deadline passed %s ago", now.Sub(cmd.Deadline))
	}
	st := e.acts[cmd.Actuator]
	if st == nil {
		return nil, nil, v, refusal(CodeActuatorUnknown, "no actuator %q", cmd.Actuator)
	}
	if st.holder != nil && st.holder != s {
		return nil, nil, v, refusal(CodeActuatorBusy, "%s is held by saga %d", cmd.Actuator, st.holder.id)
	}
	if st.zoneHalted() {
		return nil, nil, v, refusal(CodeZoneHalted, "%s: zone %s halted: %s", cmd.Actuator, st.zone.name, e.zoneReason(st.zone))
	}
	prev := limits.Prev{Value: st.commanded, At: st.at, Known: true}
	v = limits.Check(st.a.Limits, prev, cmd.Value, now)
	if !v.OK() {
		v.Name = cmd.Actuator
		return nil, nil, v, &Error{Code: Code(v.Code), Message: v.Message()}
	}
	if name := st.a.Limits.Supply; name != "" {
		var ss limits.SupplyState
		ok := false
		if e.cfg.Supplies != nil {
			ss, ok = e.cfg.Supplies.SupplyState(name, now)
		}
		if !ok {
			return nil, nil, v, refusal(Code(limits.SupplyUnknown), "%s: supply %q unknown", cmd.Actuator, name)
		}
		if c := limits.CheckSupply(st.a.Limits, ss); c != limits.OK {
			return nil, nil, v, refusal(Code(c), "%s: supply %q at %.2f V", cmd.Actuator, name, ss.Volts)
		}
	}
	if cmd.Admit != nil {
		if err := cmd.Admit(); err != nil {
			return nil, nil, v, err
		}
	}
	return s, st, v, nil
}

// effectDone ends the count of an effect in flight on st: from then on a halt
// waiting for effects in flight may go on to its safe policies. Callers
// hold mu and have recorded the effect's outcome — the commanded value set,
// the outcome enqueued — so the halt's SAFE records follow the outcome in
// the journal and its safe values overwrite the effect's target, never the
// other way round. (Counted out before, an effect returning just as a halt
// was applied could record its target after the safe value: the engine,
// and for a compensation the journal too, would believe the actuator at a
// target it had left for its safe value.)
func (e *Engine) effectDone(st *actState) {
	e.inflight.Done()
	st.moving--
	e.moved.Broadcast()
	if e.effectDoneHook != nil {
		e.effectDoneHook()
	}
}

// effect drives one actuator with the driver timeout.
func (e *Engine) effect(a *actuators.Actuator, value float64) error {
	ctx, cancel := context.WithTimeout(context.Background(), a.DriverTimeout())
	defer cancel()
	err := a.Driver.Set(ctx, value)
	if err == nil && ctx.Err() != nil {
		// Returned late: the driver broke its contract; treat as in doubt.
		err = ctx.Err()
	}
	return err
}

// inDoubt reports whether a driver error leaves the effect unknown. It
// fails closed: every error is in doubt (the step counts as applied and is
// compensated) unless it wraps actuators.ErrNotApplied, the driver's promise
// that the output did not change.
func inDoubt(err error) bool {
	return !errors.Is(err, actuators.ErrNotApplied)
}

// Commit closes a saga: its commit record is durable before Commit returns.
func (e *Engine) Commit(sagaID uint64, owner Owner) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.gateGlobal(); err != nil {
		return err
	}
	s, rerr := e.openSaga(sagaID, owner)
	if rerr != nil {
		return rerr
	}
	s.busy = true // nothing else may act on it while the commit is made durable
	err := e.journal(&Record{Type: RecCommit, Saga: s.id})
	s.busy = false
	if err != nil {
		// As in Step: the failure latched the halt, whose pass left the
		// saga alone while its COMMIT was synced.
		return &Error{Code: CodeJournalFailed, Message: err.Error(), err: err, Report: e.endBusyIfHaltedLocked(s)}
	}
	e.closeLocked(s)
	return nil
}

// Abort unwinds an open saga of owner and returns its report.
func (e *Engine) Abort(sagaID uint64, owner Owner, reason string) (*Report, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errClosed()
	}
	s, rerr := e.openSaga(sagaID, owner)
	if rerr != nil {
		return nil, rerr
	}
	if reason == "" {
		reason = "aborted by agent"
	}
	return e.unwindLocked(s, reason, false), nil
}

// AbortAgent unwinds every open saga of an agent, newest first — what a
// lease expiry or an agent's last will does. A saga with a step in flight is
// marked and unwound by that step as soon as its effect returns; its report
// is then returned to the step's caller, not here.
func (e *Engine) AbortAgent(agent, reason string) []*Report {
	return e.abortWhere(func(o Owner) bool { return o.Agent == agent }, reason)
}

// AbortAll unwinds every open saga, newest first: what a supervisor does
// when it stops (SIGTERM) or a supply trips with the unwind action.
func (e *Engine) AbortAll(reason string) []*Report {
	return e.abortWhere(func(Owner) bool { return true }, reason)
}

func (e *Engine) abortWhere(match func(Owner) bool, reason string) []*Report {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil // nothing moves after Close
	}
	return e.abortWhereLocked(match, reason)
}

// abortWhereLocked is abortWhere for a caller that holds mu.
func (e *Engine) abortWhereLocked(match func(Owner) bool, reason string) []*Report {
	var reps []*Report
	for _, s := range e.sagasNewestFirst() {
		if !match(s.owner) || s.unwinding {
			continue
		}
		if s.busy {
			s.pendingAbort = reason
			continue
		}
		reps = append(reps, e.unwindLocked(s, reason, false))
	}
	return reps
}

func (e *Engine) closeLocked(s *saga) {
	for _, sp := range s.steps {
		if sp.act != nil && sp.act.holder == s {
			sp.act.holder = nil
		}
	}
	delete(e.sagas, s.id)
}
