package supervisor

import (
	"cmp"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/internal/promtext"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/recovery"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/ingress"
	"github.com/saga-supervisor/saga-supervisor/supervisor/lease"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// Options are the parts a Supervisor is composed of. FromConfig builds them
// from a configuration file; tests build them by hand.
type Options struct {
	Actuators *actuators.Registry
	Supplies  *Supplies
	// JournalDir, WAL and Engine configure recovery and the engine; the
	// engine's Journal, Actuators and Supplies are filled in by New.
	JournalDir string
	WAL        wal.Options
	Engine     rollback.Config
	// Checkpoint keeps journal checkpoints while serving (see
	// recovery.Checkpointer); its Every 0 writes none.
	Checkpoint recovery.CheckpointOptions
	// Leases configures the lease manager; FirstEpoch and OnEnd are set by
	// New.
	Leases lease.Options
	// ResetToken authorises reset. Empty: reset is refused to everyone
	// (NO_OPERATOR_TOKEN), never open to anyone.
	ResetToken string
	// ResetTokenFile is where the operator finds ResetToken (absolute), for
	// the dashboard's reset box: the path only, never the token. "" when
	// the token is not kept in a file (inline, or none).
	ResetTokenFile string
	// RemoteReset allows reset through the controller API (MQTT), where
	// the token crosses the broker. Off: such a reset is refused
	// FORBIDDEN, and only HTTP resets.
	RemoteReset bool
	// Permissions say what each agent may do; see Permission. Empty:
	// every agent may do everything.
	Permissions map[string]Permission
	// PollEvery is how often supplies, readiness and actuator states are
	// refreshed. Default 100ms.
	PollEvery time.Duration
	Logger    *slog.Logger
	// Registry receives the supervisor's metrics (with the Go and process
	// collectors). nil: a registry of its own; see Supervisor.Registry.
	Registry *promtext.Registry
	// Inputs are safety inputs (an e-stop, a controller board's link):
	// each one not ready makes the supervisor not ready.
	Inputs []Input
	// Publisher carries events, retained states and the status to the
	// controllers (the MQTT transport, built before the supervisor and
	// connected after it: transport/mqtt.NewTransport). nil: nothing is
	// published.
	Publisher Publisher
	// Ingress configures the per-agent lanes (queue, rate, caps).
	Ingress ingress.Options
	// HaltLine, if set, delivers halts from inputs (an e-stop press); one
	// triggered before New halts before crash recovery moves anything,
	// and one triggered while it recovers latches at once. nil: Prepare
	// makes one (the start-up HTTP handler halts through it).
	HaltLine *HaltLine
	// JournalOpened, if set, is called once the journal is open and
	// locked, before recovery reads it (recovery.Options.Opened): the
	// daemon serves the start-up HTTP handler from then on, and then
	// waits for its boards (Built.WaitBoards). An error ends Open.
	JournalOpened func() error
	// Progress, if set, is called as crash recovery moves on (see
	// recovery.Options.Progress): the daemon extends systemd's start
	// timeout while it is.
	Progress func()
	// Approvals configures operator approvals; nil: none (every approval
	// sent is refused, and no actuator requires one).
	Approvals *Approvals
	// OnRefresh, if set, is given every status the poller computes (every
	// PollEvery, and at once after a halt or reset), on the poller's
	// goroutine: it must return at once (the fleet summary stores it and
	// publishes from a goroutine of its own). Never called on the halt path.
	OnRefresh func(Status)
	// AutoQuarantine, if its AfterRefusals is set, quarantines an agent
	// refused that often within its Window (autoquarantine.go).
	AutoQuarantine AutoQuarantine
	// SupplyZones binds supplies to zones (supplies.<name>.zone): a trip
	// with the halt action halts the zone, not everything, and a tripped
	// bound supply holds its zone's reset instead of the supervisor's
	// readiness. InputZones does the same for inputs by name (estop.zone):
	// a press halts the zone; while it is not ready the zone cannot be
	// reset.
	SupplyZones map[string]string
	InputZones  map[string]string
}

// Publisher carries what the supervisor tells every controller, whatever
// the transport: events, the last commanded value of each actuator, and
// the supervisor's status. The MQTT transport implements it.
type Publisher interface {
	PublishEvent(api.Event)
	PublishState(api.State)
	SetStatus(api.Status)
}

// Supervisor is the daemon's core: the engine behind a journal taken over
// by recovery, leases, supplies, readiness and halt.
type Supervisor struct {
	opt      Options
	log      *slog.Logger
	rec      *recovery.Result
	engine   *rollback.Engine
	journal  *wal.Log
	reg      *actuators.Registry
	supplies *Supplies
	leases   *lease.Manager
	lanes    *ingress.Lanes
	// resetLimit limits failed HTTP resets; one per supervisor, however
	// many HTTP handlers serve it.
	resetLimit *resetLimiter
	bg         sync.WaitGroup // unwinds started off the ingress path (wills)
	// bgMu guards bgClosed: once Close has begun, no goroutine joins bg
	// (its Add would race Close's Wait). Never held across I/O.
	bgMu           sync.Mutex
	bgClosed       bool
	rebuiltRecords uint64
	tailCut        string
	metrics        *metrics
	approve        *approvalGate
	dash           *dashHub // the live dashboard's snapshots (dashboard.go)
	// starting is what the start-up handler says the start is doing
	// (SetStarting); nil: StartingReason.
	starting atomic.Pointer[string]

	statesMu  sync.Mutex // serialises publishStates; never taken on the halt path
	refreshMu sync.Mutex // serialises refresh; never taken on the halt path
	mu        sync.Mutex // never held across I/O
	pub       Publisher
	ready     bool
	reasons   []string
	status    Status             // the status the last refresh computed (the dashboard's)
	statusAt  time.Time          // when
	published map[string]float64 // retained state last published per actuator
	pressed   map[string]bool    // polled e-stops: pressed at the last poll

	stop    chan struct{}
	stopped chan struct{}
	// refusals decides which refusals are journaled one by one.
	refusals *refusalBudget
	// verified is closed when the journal's verification pass ends
	// (journalcheck.go); Close waits for it after closing stop.
	verified chan struct{}
	// statesDue asks the poll goroutine to publish changed states now
	// (after a command, once its reply is on its way).
	statesDue chan struct{}
	// refreshDue asks the poll goroutine to refresh readiness and status
	// now (after a halt).
	refreshDue chan struct{}
	closeErr   error
	once       sync.Once
	alive      liveness // what Alive tracks

	// drainMu guards drainTimer, which unwinds the open sagas at a
	// drain's deadline (drain.go). Never held across I/O.
	drainMu    sync.Mutex
	drainTimer *time.Timer
	// barred is the quarantined agents, read without a lock on the
	// request path (drain.go: loadBarred).
	barred   atomic.Pointer[map[string]struct{}]
	barredMu sync.Mutex // serialises the writers of barred
	// autoQ counts refusals towards an automatic quarantine.
	autoQ *refusalWindow
	// opened is set once Open has succeeded: the engine, the journal and
	// the lanes exist (a Prepared supervisor's HTTP guard reads it).
	opened atomic.Bool
}

// New takes over the journal (recovering every saga a previous process
// left open before anything else may move), then starts leases and the
// poller. Recovery reports are returned by Recovered. It is Prepare, then
// Open.
func New(opt Options) (*Supervisor, error) {
	s, err := Prepare(opt)
	if err != nil {
		return nil, err
	}
	if err := s.Open(); err != nil {
		return nil, err
	}
	return s, nil
}

// Prepare makes a supervisor that has not opened its journal yet: its
// metrics, its HTTP guard (GuardHTTP) and its start-up handler
// (StartupHTTPHandler) work, nothing else does until Open has returned
// nil. The daemon serves HTTP from the moment the journal is open
// (Options.JournalOpened) while Open recovers.
func Prepare(opt Options) (*Supervisor, error) {
	if opt.Actuators == nil || opt.Supplies == nil {
		return nil, errors.New("supervisor: actuators and supplies are required")
	}
	if opt.PollEvery <= 0 {
		opt.PollEvery = 100 * time.Millisecond
	}
	if opt.HaltLine == nil {
		opt.HaltLine = &HaltLine{} // the start-up handler's halts go through it
	}
	lg := opt.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	s := &Supervisor{opt: opt, log: lg, reg: opt.Actuators, supplies: opt.Supplies, published: map[string]float64{}, resetLimit: newResetLimiter(), pub: opt.Publisher,
		stop: make(chan struct{}), stopped: make(chan struct{}), verified: make(chan struct{}), refusals: newRefusalBudget(), statesDue: make(chan struct{}, 1), refreshDue: make(chan struct{}, 1)}
	m, err := newMetrics(opt.Registry)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	s.approve = newApprovalGate(opt.Approvals)
	s.autoQ = newRefusalWindow(opt.AutoQuarantine)
	return s, nil
}

// Open takes over the journal, recovering every saga a previous process
// left open before anything else may move, then starts leases and the
// poller. Call it once, on a supervisor from Prepare; on error the
// supervisor is unusable (its metrics unregistered, its journal closed).
func (s *Supervisor) Open() error {
	opt, lg, m := s.opt, s.log, s.metrics
	opt.WAL.OnBatch = &journalObserver{m: m, next: opt.WAL.OnBatch} // recovery's own writes are measured too
	ec := opt.Engine
	ec.Actuators, ec.Supplies, ec.Logger = opt.Actuators, opt.Supplies, lg
	ec.OnHalt = s.haltApplied
	ec.JournalRefusal = s.journalGateRefusal
	ro := recovery.Options{Dir: opt.JournalDir, WAL: opt.WAL, Engine: ec, Progress: opt.Progress, Checkpoint: opt.Checkpoint, Opened: opt.JournalOpened}
	if ro.Checkpoint.Every > 0 {
		ro.Checkpoint.Logger = lg
		ro.Checkpoint.OnCheckpoint = func(at wal.Position, ret wal.RetentionReport) {
			if len(ret.Deleted) > 0 {
				lg.Info("journal retention: segments deleted behind the oldest checkpoint", "deleted", ret.Deleted,
					"archive", opt.WAL.Retention.ArchiveDir, "first_seq", ret.FirstSeq, "segments", ret.Segments, "bytes", ret.Bytes)
			}
		}
	}
	ro.HaltFirst = func(e *rollback.Engine) string {
		// From here on a halt on the line latches the recovering engine
		// at once; one that came earlier is taken now.
		if why := opt.HaltLine.latchOn(e); why != "" {
			return why
		}
		// An e-stop settles its first reading when opened, before its
		// watcher reports the press: ask it directly.
		for _, in := range opt.Inputs {
			if p, ok := in.(interface{ Pressed() bool }); ok && p.Pressed() {
				return in.Name() + ": pressed (or unreadable) at start"
			}
			if p, ok := in.(polledEStop); ok && p.EStopPressed() {
				return in.Name() + ": e-stop pressed at start"
			}
		}
		return ""
	}
	res, err := recovery.Open(ro)
	if err != nil {
		m.unregister()
		return err
	}
	for _, rep := range res.Reports {
		m.unwound(rep)
	}
	s.rec, s.engine, s.journal, s.rebuiltRecords = res, res.Engine, res.Log, res.RebuiltRecords
	if err := m.journalStats(res); err != nil {
		res.Close()
		m.unregister()
		return err
	}
	for _, d := range res.Opened.CheckpointsDamaged {
		lg.Warn("journal: a damaged checkpoint was passed over (an older one, or the journal itself, stood in: nothing is lost)", "checkpoint", d.String())
	}
	if res.CheckpointMismatch != "" {
		lg.Warn("journal: the checkpoint was taken with other actuators configured", "detail", res.CheckpointMismatch)
	}
	if t := res.Opened.TailCut; t != nil {
		s.tailCut = fmt.Sprintf("%d bytes at %s offset %d (%s), kept in %s", t.Bytes, t.Segment, t.Offset, t.Reason, t.BrokenFile)
		m.tailCut.Set(float64(t.Bytes))
		lg.Warn("journal: torn tail cut", "detail", s.tailCut)
	}
	lo := opt.Leases
	lo.FirstEpoch = s.engine.MaxEpoch()
	lo.OnEnd = s.leaseEnded
	if s.leases, err = lease.New(lo); err != nil {
		res.Close()
		m.unregister()
		return err
	}
	if s.lanes, err = ingress.New(opt.Ingress, laneHandler{s}); err != nil {
		s.leases.Close()
		res.Close()
		m.unregister()
		return err
	}
	s.loadBarred()
	s.pressed = map[string]bool{}
	for _, in := range opt.Inputs {
		if p, ok := in.(polledEStop); ok {
			// Pressed at start was handled before recovery (HaltFirst).
			s.pressed[in.Name()] = p.EStopPressed()
		}
	}
	s.dash = newDashHub(s, newJournalTail(s.journal, opt.JournalDir, opt.WAL, res.Rebuilt))
	s.refresh()
	m.state.attach(s)
	s.opened.Store(true)
	opt.HaltLine.bind(s)
	go s.poll()
	go s.dash.run(s.stop)
	go s.verifyJournal(&m.journalVerified)
	return nil
}

// Recovered is what recovery found and finished at start.
func (s *Supervisor) Recovered() *recovery.Result { return s.rec }

// Engine is the saga engine (for the CLI and tests).
func (s *Supervisor) Engine() *rollback.Engine { return s.engine }

func (s *Supervisor) now() time.Time {
	if s.opt.Leases.Now != nil {
		return s.opt.Leases.Now()
	}
	return time.Now()
}

// leaseEnded unwinds the agent's open sagas, newest first, when its lease
// ends: expiry, bye, its MQTT will, a superseding hello, shutdown.
func (s *Supervisor) leaseEnded(l lease.Lease, reason string) {
	s.log.Info("lease ended", "agent", l.Agent, "epoch", l.Epoch, "reason", reason)
	s.metrics.leaseEnded(reason)
	for _, rep := range s.engine.AbortAgent(l.Agent, "lease "+reason) {
		s.publishReport(rep)
	}
	s.publishStates()
}

func (s *Supervisor) publishReport(rep *rollback.Report) {
	s.metrics.unwound(rep)
	if !rep.Clean() {
		s.log.Error("unwind partial", "saga", rep.Saga, "report", rep.String())
	}
	s.publishEvent(api.Event{Kind: api.EventRollback, Report: api.ReportFromRollback(rep)})
}

func (s *Supervisor) publishEvent(ev api.Event) {
	s.mu.Lock()
	pub := s.pub
	s.mu.Unlock()
	if pub != nil {
		pub.PublishEvent(ev)
	}
}

// publishStates publishes the retained state of every actuator whose
// commanded value changed since it was last published, in the order a
// reader needs: the order in which the values changed.
// s.mu is not held while publishing (a publish may wait on the network).
func (s *Supervisor) publishStates() {
	s.statesMu.Lock() // one publisher at a time: a later value never goes out before an earlier one
	defer s.statesMu.Unlock()
	changes := s.engine.Changes()
	s.mu.Lock()
	pub := s.pub
	type change struct {
		st  api.State
		seq uint64
	}
	var due []change
	if pub != nil {
		for _, name := range s.reg.Names() {
			c := changes[name]
			v := c.Commanded
			if old, ok := s.published[name]; ok && (old == v || (math.IsNaN(old) && math.IsNaN(v))) {
				continue
			}
			s.published[name] = v
			due = append(due, change{api.State{Actuator: name, Commanded: v}, c.Seq})
		}
	}
	s.mu.Unlock()
	// In the order the values changed (an unwind's order); the registry's
	// order among those unchanged since start.
	slices.SortStableFunc(due, func(a, b change) int { return cmp.Compare(a.seq, b.seq) })
	for _, c := range due {
		pub.PublishState(c.st)
	}
}

// poll refreshes supplies (acting on trips), readiness and retained state.
func (s *Supervisor) poll() {
	defer close(s.stopped)
	t := time.NewTicker(s.opt.PollEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.refresh()
		case <-s.statesDue:
			s.publishStates()
		case <-s.refreshDue:
			s.refresh()
		}
	}
}

func (s *Supervisor) refresh() {
	// One at a time: Reset refreshes on its caller's goroutine while the
	// poller may be refreshing too, and a refresh that read the state
	// before the reset must not store or publish it after (status would
	// say halted, and begin get NOT_READY, for up to a poll interval after
	// a confirmed reset). Never taken on the halt path.
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()
	for _, ev := range s.supplies.Poll(s.now()) {
		s.supplyEvent(ev)
	}
	s.pollEStops()
	s.adoptDrift()
	st := s.Status()
	s.mu.Lock()
	s.ready, s.reasons = st.Ready, st.Reasons
	s.status, s.statusAt = st, time.Now()
	pub := s.pub
	s.mu.Unlock()
	if pub != nil {
		pub.SetStatus(api.Status{Ready: st.Ready, Reasons: st.Reasons, Halted: st.Halted, HaltReason: st.HaltWhy, HaltedZones: haltedZones(st.Zones)})
	}
	if s.opt.OnRefresh != nil {
		s.opt.OnRefresh(st)
	}
	s.publishStates()
	s.alive.lastRefresh.Store(time.Now().UnixNano())
}

// supplyEvent applies a supply's trip action (DESIGN §8: warn < refuse <
// unwind < halt). Refusal needs no action here: the gate refuses every
// command on an actuator whose supply is tripped.
func (s *Supervisor) supplyEvent(ev SupplyEvent) {
	if !ev.Tripped {
		s.log.Info("supply cleared", "supply", ev.Name, "volts", ev.State.Volts)
		return
	}
	why := fmt.Sprintf("supply %s tripped: %s at %.2f V", ev.Name, ev.State.Code, ev.State.Volts)
	s.log.Error(why, "action", ev.Action.String())
	switch ev.Action {
	case limits.Unwind:
		for _, rep := range s.engine.AbortAll(why) {
			s.publishReport(rep)
		}
	case limits.Halt:
		if z := s.opt.SupplyZones[ev.Name]; z != "" {
			s.HaltZone(z, "supply "+ev.Name, why)
			return
		}
		s.engine.Latch(why)
		s.metrics.halts.Inc()
	}
}

// readiness returns the cached readiness, refreshed every PollEvery and
// after every halt or reset. A latched halt counts from the instant it is
// latched, before any refresh.
func (s *Supervisor) readiness() (bool, []string) {
	s.mu.Lock()
	ready, reasons := s.ready, s.reasons
	s.mu.Unlock()
	if h, why := s.engine.Halted(); h {
		r := "halted: " + why
		if len(reasons) == 0 || reasons[0] != r {
			reasons = append([]string{r}, reasons...)
		}
		return false, reasons
	}
	return ready, reasons
}

// Readiness is what /readyz answers, from the last refresh: whether the
// supervisor is ready, and if not why (a halt first). It reads no driver.
func (s *Supervisor) Readiness() (ready bool, reasons []string) { return s.readiness() }

// cachedStatus is the status the last refresh computed, and when: it
// reads no driver.
func (s *Supervisor) cachedStatus() (Status, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status, s.statusAt
}

// Halt latches halt from any source (MQTT, HTTP, CLI, e-stop, supply) and
// returns at once. It is the halt path: it takes no lock that is ever held
// across network or disk I/O and waits on nothing — the engine latches an
// atomic and its halt goroutine journals the halt and applies the safe
// policies (haltApplied then publishes what it did). Every command is
// refused from the instant Halt is called.
func (s *Supervisor) Halt(source, reason string) {
	why := source
	if reason != "" {
		why += ": " + reason
	}
	s.engine.Latch(why)
	s.metrics.halts.Inc()
	s.refreshSoon()
}

func haltedZones(zs []ZoneJSON) []string {
	var out []string
	for _, z := range zs {
		if z.Halted {
			out = append(out, z.Name)
		}
	}
	return out
}

// HaltZone latches a halt of one zone (see rollback's zones.go) and
// returns at once: steps on the zone's actuators are refused from now on,
// and the engine's zone goroutine unwinds the sagas touching the zone and
// parks its actuators. A zone the configuration does not have halts
// everything instead — a mistyped zone in an emergency must still stop
// the robot — and is answered UNKNOWN_ZONE.
func (s *Supervisor) HaltZone(zone, source, reason string) *api.Error {
	why := source
	if reason != "" {
		why += ": " + reason
	}
	if _, err := s.engine.ZoneLatch(zone, why); err != nil {
		s.Halt(source, fmt.Sprintf("halt of zone %q, which does not exist: everything halted", zone))
		return &api.Error{Code: string(rollback.CodeUnknownZone), Field: "zone",
			Message: fmt.Sprintf("no zone %q (zones: %s): everything was halted instead", zone, s.zoneNames())}
	}
	s.refreshSoon()
	return nil
}

func (s *Supervisor) zoneNames() string {
	var names []string
	for _, z := range s.engine.Zones() {
		names = append(names, z.Name)
	}
	if len(names) == 0 {
		return "none configured"
	}
	return strings.Join(names, ", ")
}

// ResetZone clears a zone's halt: an operator action, allowed only with
// the token and only when nothing bound to the zone holds it (a tripped
// supply, an e-stop still pressed). It neither needs nor clears the full
// halt's reset.
func (s *Supervisor) ResetZone(token, by, zone string) error {
	if s.opt.ResetToken == "" {
		return ErrNoOperatorToken
	}
	if !TokenMatches(token, s.opt.ResetToken) {
		return ErrUnauthorized
	}
	return s.resetZoneAuthorized(by, zone)
}

func (s *Supervisor) resetZoneAuthorized(by, zone string) error {
	if s.opt.ResetToken == "" {
		return ErrNoOperatorToken
	}
	gen, err := s.engine.ZoneGen(zone)
	if err != nil {
		return err
	}
	if held := s.zoneHeld(zone); len(held) > 0 {
		return &api.Error{Code: api.CodeNotReady, Message: fmt.Sprintf("zone %s reset refused: %s", zone, strings.Join(held, "; "))}
	}
	err = s.engine.ZoneReset(by, zone, gen)
	s.refresh()
	return err
}

// zoneHeld lists what keeps a zone from being reset: its supplies tripped,
// its inputs not ready.
func (s *Supervisor) zoneHeld(zone string) []string {
	var held []string
	for _, sup := range s.supplies.States(s.now()) {
		if s.opt.SupplyZones[sup.Name] == zone && sup.Code != limits.OK {
			held = append(held, fmt.Sprintf("supply %s: %s", sup.Name, sup.Code))
		}
	}
	for _, in := range s.opt.Inputs {
		if s.opt.InputZones[in.Name()] != zone {
			continue
		}
		if err := in.Ready(); err != nil {
			held = append(held, fmt.Sprintf("input %s: %v", in.Name(), err))
		}
	}
	return held
}

// haltApplied is the engine's OnHalt: the halt goroutine has journaled a
// halt and applied it. It runs there, never on an ingress path.
func (s *Supervisor) haltApplied(reps []*rollback.Report, err error) {
	for _, rep := range reps {
		s.publishReport(rep)
	}
	if err != nil {
		s.log.Error("halt: safe policies failed", "err", err)
	}
	s.refreshSoon()
}

// Refresh brings readiness, the status and the actuators' states up to
// date now: the daemon calls it once its transport is connected, so that
// the first status it reports is not one from before.
func (s *Supervisor) Refresh() { s.refresh() }

// refreshSoon asks the poll goroutine for a refresh now, without waiting.
func (s *Supervisor) refreshSoon() {
	select {
	case s.refreshDue <- struct{}{}:
	default: // already due
	}
}

// ErrUnauthorized is returned by Reset with a wrong or missing token.
var ErrUnauthorized = errors.New("supervisor: reset refused: wrong operator token")

// ErrNoOperatorToken is returned by Reset, whatever the token, when the
// supervisor has none configured: no reset can succeed, so it is neither a
// wrong token nor a guess worth limiting.
var ErrNoOperatorToken = &api.Error{Code: api.CodeNoOperatorToken, Message: "reset refused: no operator token is configured, so no one can reset: " +
	"set http.reset_token_file to a file holding only the token (at least 32 bytes, mode 0600: openssl rand -hex 32), " +
	"or with http.generate_reset_token: true to a file the supervisor creates, and restart the supervisor"}

// TokenMatches reports whether got is the operator token want, in time
// that depends on neither value: both are hashed with SHA-256 and the
// digests compared with crypto/subtle, so not even the token's length leaks
// (subtle.ConstantTimeCompare on the raw strings returns at once when the
// lengths differ). An empty want matches nothing: without a configured
// token, reset is refused to everyone. HTTP and MQTT resets both come here.
func TokenMatches(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	eq := subtle.ConstantTimeCompare(g[:], w[:]) == 1
	return eq && want != ""
}

// Reset clears the halt: an operator action, allowed only with the token
// and only when every other ready condition holds. It clears only the
// halts latched before it looked at those conditions: a halt that arrives
// while the reset is being made stays latched (HALTED).
func (s *Supervisor) Reset(token, by string) error {
	if s.opt.ResetToken == "" {
		return ErrNoOperatorToken
	}
	if !TokenMatches(token, s.opt.ResetToken) {
		return ErrUnauthorized
	}
	return s.resetAuthorized(by)
}

// resetAuthorized is Reset for a request whose operator token was already
// checked: an HTTP login's operator session or bearer token.
func (s *Supervisor) resetAuthorized(by string) error {
	if s.opt.ResetToken == "" {
		return ErrNoOperatorToken
	}
	gen := s.engine.HaltGen()
	st := s.Status()
	var other []string
	for _, r := range st.Reasons {
		if strings.HasPrefix(r, drainReason) {
			continue // a drain does not stop a reset: it only refuses new sagas
		}
		if !st.Halted || r != "halted: "+st.HaltWhy {
			other = append(other, r)
		}
	}
	if len(other) > 0 {
		return &api.Error{Code: api.CodeNotReady, Message: "reset refused: not ready: " + fmt.Sprint(other)}
	}
	if st.Halted {
		if err := s.safeStateHolds(); err != nil {
			return err
		}
	}
	err := s.engine.Reset(by, gen)
	s.refresh()
	return err
}

// safeStateHolds checks, before a reset clears a halt, that the world is
// where the halt's SAFE records put it: the safe policies that failed
// (a board out of reach) are tried again, and each output with a safe value
// whose device reports it elsewhere is named. Either refuses the reset
// (NOT_READY): cleared, the halt would leave the journal saying safe where
// the outputs are not, and the next saga would start from values the world
// does not hold.
func (s *Supervisor) safeStateHolds() error {
	if !s.engine.SafeApplied() {
		if err := s.engine.RetrySafe(); err != nil {
			return &api.Error{Code: api.CodeNotReady, Message: "reset refused: the halt's safe policies did not all take " +
				"(the journal records every output at its safe policy); tried again now: " + strings.ReplaceAll(err.Error(), "\n", "; ")}
		}
	}
	var off []string
	for _, name := range s.reg.Names() {
		a := s.reg.Get(name)
		d, ok := a.Driver.(actuators.Drifter)
		if !ok || a.Safe.Mode != actuators.SafeValue {
			continue
		}
		if v, moved := d.Drifted(a.Safe.Value); moved {
			off = append(off, fmt.Sprintf("%s reads back %g, its safe value is %g", name, v, a.Safe.Value))
		}
	}
	if len(off) > 0 {
		return &api.Error{Code: api.CodeNotReady, Message: "reset refused: the read-back disagrees with the safe state the journal records: " + strings.Join(off, "; ")}
	}
	return nil
}

// Close is the orderly stop (SIGTERM): every lease ends (unwinding its
// sagas), any saga left is unwound, actuators go to their safe policies
// (without latching halt for the next start), and the journal is closed.
func (s *Supervisor) Close() error {
	s.once.Do(func() {
		s.dash.close() // dashboard streams end first: they hold HTTP connections
		close(s.stop)
		<-s.stopped
		<-s.dash.done
		<-s.verified
		s.lanes.Close() // what agents queued is answered first
		s.bgMu.Lock()
		s.bgClosed = true // a will arriving now is ignored: leases end below
		s.bgMu.Unlock()
		s.stopDrainTimer()
		s.bg.Wait()
		s.leases.Close()
		s.engine.WaitHalts() // the halt goroutine writes to the journal closed below
		for _, rep := range s.engine.AbortAll("supervisor stopping") {
			s.publishReport(rep)
		}
		_, perr := s.engine.Park("supervisor stopping")
		s.publishStates()
		// The engine last: it waits for its halt goroutine (a halt
		// latched during the stop is journaled before the journal
		// closes) and refuses everything after. rec.Close closes it
		// too (idempotent), then the journal, which drops the lock.
		cerr := s.engine.Close()
		s.closeErr = errors.Join(perr, cerr, s.rec.Close())
	})
	return s.closeErr
}
