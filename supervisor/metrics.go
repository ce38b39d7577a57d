package supervisor

import (
	"errors"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/internal/buildinfo"
	"github.com/saga-supervisor/saga-supervisor/internal/promtext"
	"github.com/saga-supervisor/saga-supervisor/recovery"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/lease"
	"github.com/saga-supervisor/saga-supervisor/supervisor/wiring"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// Command results, the result label of saga_commands_total.
const (
	resultOK      = "ok"      // the command did what it asked
	resultRefused = "refused" // refused with a code; nothing moved
	resultFailed  = "failed"  // the effect failed or is in doubt (the saga was unwound), or a bug
)

// opInvalid labels requests the MQTT decoder refused: their op is not known
// to be one of ours, and label values must stay a small fixed set.
const opInvalid = "invalid"

// opLane labels requests the per-agent lanes refused (RATE_LIMITED, BUSY,
// TOO_MANY_AGENTS) before they were served: counted in aggregate, by code.
const opLane = "lane"

// labelOther stands for a label value outside the documented set, so that
// cardinality stays bounded whatever a caller passes.
const labelOther = "other"

var (
	knownOps = []string{
		string(api.OpHello), string(api.OpHeartbeat), string(api.OpBegin), string(api.OpStep),
		string(api.OpCommit), string(api.OpAbort), string(api.OpBye), string(api.OpHalt),
		string(api.OpReset), string(api.OpStatus), opInvalid, opLane,
		string(api.OpDrain), string(api.OpUndrain), string(api.OpQuarantine), string(api.OpRelease),
	}
	leaseReasons = []string{lease.ReasonExpired, lease.ReasonBye, lease.ReasonWill, lease.ReasonSuperseded, lease.ReasonShutdown, LeaseReasonQuarantined, labelOther}
	buckets      = []rollback.Bucket{rollback.Compensated, rollback.FallbackSafe, rollback.CompensationFailed, rollback.Orphaned, rollback.Unresolved}
)

// failureCode reports whether a code means the command was attempted and
// failed, rather than refused before anything moved.
func failureCode(code string) bool {
	switch code {
	case string(rollback.CodeStepFailed), string(rollback.CodeStepInDoubt), api.CodeInternal:
		return true
	}
	return false
}

// metrics are a Supervisor's Prometheus metrics, all on its own registry
// (internal/promtext).
// Counters are updated where things happen (hooks in Handle, publishReport,
// leaseEnded and the journal's OnBatch); gauges mirroring state are read
// from Status when scraped (stateCollector), so they are never stale.
type metrics struct {
	reg          *promtext.Registry
	commands     *promtext.CounterVec
	refusals     *promtext.CounterVec
	fsync        *promtext.Histogram
	batchRecords *promtext.Histogram
	journalBytes *promtext.Counter
	unwinds      *promtext.CounterVec
	unwindSteps  *promtext.CounterVec
	leaseEnds    *promtext.CounterVec
	tailCut      *promtext.Gauge
	halts        *promtext.Counter
	state        *stateCollector
	// httpRefused counts what the HTTP guard refused (httpguard.go).
	httpRefused *promtext.CounterVec
	// authRefused and logins count what the listener's login refused and
	// admitted (httplogin.go).
	authRefused *promtext.CounterVec
	logins      *promtext.CounterVec
	// journalVerified is the verdict of the journal's verification pass
	// after start (journalcheck.go).
	journalVerified atomic.Int64
	own             []promtext.Collector // what newMetrics registered, for unregister
}

// newMetrics creates the supervisor's metrics and registers them, with the
// Go runtime and process collectors, on reg (a fresh registry when nil). A
// registry that already holds the Go or process collector is fine; one that
// already holds saga_ metrics (another Supervisor's) is an error.
func newMetrics(reg *promtext.Registry) (*metrics, error) {
	if reg == nil {
		reg = promtext.NewRegistry()
	}
	// Like newStateCollector's d: the options each metric differs in, in one line.
	counter := func(name, help string) *promtext.Counter {
		return promtext.NewCounter(promtext.Opts{Name: name, Help: help})
	}
	counterVec := func(name, help string, labels ...string) *promtext.CounterVec {
		return promtext.NewCounterVec(promtext.Opts{Name: name, Help: help}, labels)
	}
	histogram := func(name, help string, buckets []float64) *promtext.Histogram {
		return promtext.NewHistogram(promtext.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	}
	m := &metrics{
		reg: reg,
		commands: counterVec("saga_commands_total",
			"Commands handled (MQTT requests; HTTP halt, reset and the operator's drain, undrain, quarantine and release), by op and result: ok, refused (nothing moved), failed (the step failed or is in doubt and its saga was unwound, or an internal error).",
			"op", "result"),
		refusals: counterVec("saga_refusals_total",
			"Refused commands by stable refusal code (the codes of docs/API.md).",
			"code"),
		fsync: histogram("saga_journal_fsync_seconds",
			"Latency of each journal batch: one write and fdatasync (plus a segment install at rollover).",
			promtext.ExponentialBuckets(50e-6, 2, 15)), // 50 µs .. 0.8 s
		batchRecords: histogram("saga_journal_batch_records",
			"Records per journal batch (the group-commit factor).",
			promtext.ExponentialBuckets(1, 2, 11)), // 1 .. 1024
		journalBytes: counter("saga_journal_written_bytes_total",
			"Journal frame bytes written and fdatasynced."),
		unwinds: counterVec("saga_unwinds_total",
			"Sagas unwound or ended by a halt, by verdict: clean (every step compensated) or partial.",
			"verdict"),
		unwindSteps: counterVec("saga_unwind_steps_total",
			"Steps of unwound sagas, by bucket: compensated, fallback_safe, compensation_failed, orphaned, unresolved.",
			"bucket"),
		leaseEnds: counterVec("saga_lease_ends_total",
			"Agent leases ended, by reason: expired, bye, will, superseded, shutdown, quarantined (other: any other).",
			"reason"),
		tailCut: promtext.NewGauge(promtext.Opts{
			Name: "saga_journal_tail_cut_bytes",
			Help: "Bytes of torn journal tail cut (and kept in a .broken file) when this process opened the journal; 0 when none.",
		}),
		halts: counter("saga_halts_total",
			"Halts asked for, from every source (agents, HTTP, e-stops, supplies), a second one while halted included."),
		state: newStateCollector(),
		httpRefused: counterVec("saga_http_refused_total",
			"HTTP requests the listener's guard refused, by reason: host (the Host header names none of the supervisor's own addresses: 421), origin (a state-changing request from a page of another origin: 403).",
			"reason"),
		authRefused: counterVec("saga_http_auth_refused_total",
			"HTTP requests the listener's login refused (http.login), by reason: login_required (no session or token: 401), unauthorized (a wrong token: 401), too_many_attempts (past the failed attempts' limit: 429), viewer_reset (the viewer role tried to reset: 403).",
			"reason"),
		logins: counterVec("saga_http_logins_total",
			"Logins to the HTTP listener (sessions started), by role: operator or viewer.",
			"role"),
	}
	// Series that exist from the start read 0 rather than missing, so
	// rates and alerts work before the first event.
	for _, op := range knownOps {
		for _, r := range []string{resultOK, resultRefused, resultFailed} {
			m.commands.WithLabelValues(op, r)
		}
	}
	for _, c := range api.Codes {
		if !failureCode(c.Code) {
			m.refusals.WithLabelValues(c.Code)
		}
	}
	m.unwinds.WithLabelValues("clean")
	m.unwinds.WithLabelValues("partial")
	for _, b := range buckets {
		m.unwindSteps.WithLabelValues(string(b))
	}
	for _, r := range leaseReasons {
		m.leaseEnds.WithLabelValues(r)
	}
	for _, r := range guardReasons {
		m.httpRefused.WithLabelValues(r)
	}
	for _, r := range authReasons {
		m.authRefused.WithLabelValues(r)
	}
	m.logins.WithLabelValues(string(RoleOperator))
	m.logins.WithLabelValues(string(RoleViewer))

	for _, c := range []promtext.Collector{m.commands, m.refusals, m.fsync, m.batchRecords, m.journalBytes,
		m.unwinds, m.unwindSteps, m.leaseEnds, m.tailCut, m.halts, m.state, buildInfo(), m.httpRefused, m.authRefused, m.logins} {
		if err := reg.Register(c); err != nil {
			m.unregister()
			return nil, err
		}
		m.own = append(m.own, c)
	}
	for _, c := range []promtext.Collector{promtext.NewGoCollector(), promtext.NewProcessCollector("")} {
		if err := reg.Register(c); err != nil && !errors.Is(err, promtext.ErrAlreadyRegistered) {
			m.unregister()
			return nil, err
		}
	}
	return m, nil
}

// sessions registers saga_http_sessions, the live sessions of a login
// listener, read from its store at each scrape.
func (m *metrics) sessions(st *sessions) {
	c := promtext.NewGaugeFunc(promtext.Opts{
		Name: "saga_http_sessions",
		Help: "Live sessions of the HTTP listener's login (http.login): logins neither logged out nor expired.",
	}, func() float64 { return float64(st.count()) })
	if err := m.reg.Register(c); err == nil {
		m.own = append(m.own, c)
	}
}

// buildInfo is saga_supervisor_build_info: 1, labelled with what
// `saga-supervisor version` prints, so a dashboard can tell which build
// runs where (the convention of prometheus_build_info and its kin).
func buildInfo() promtext.Collector {
	in := buildinfo.Get()
	return promtext.NewGaugeFunc(promtext.Opts{
		Name: "saga_supervisor_build_info",
		Help: "Always 1; its labels name the running build: version, revision (commit), date (the commit's), goversion, goarch.",
		ConstLabels: map[string]string{"version": in.Version, "revision": in.Commit, "date": in.Date,
			"goversion": in.GoVersion, "goarch": runtime.GOARCH},
	}, func() float64 { return 1 })
}

// journalStats registers the journal's disk and checkpoint gauges, read
// from the Log (and its checkpointer) at every scrape.
func (m *metrics) journalStats(res *recovery.Result) error {
	l := res.Log
	m.journalVerified.Store(journalVerifyPending)
	gauge := func(name, help string, get func(wal.Stats) float64) promtext.Collector {
		return promtext.NewGaugeFunc(promtext.Opts{Name: name, Help: help}, func() float64 { return get(l.Stats()) })
	}
	counter := func(name, help string, get func(wal.Stats) float64) promtext.Collector {
		return promtext.NewCounterFunc(promtext.Opts{Name: name, Help: help}, func() float64 { return get(l.Stats()) })
	}
	cs := []promtext.Collector{
		gauge("saga_journal_segments", "Journal segment files on disk.", func(s wal.Stats) float64 { return float64(s.SegmentFiles) }),
		gauge("saga_journal_disk_bytes", "Size of the journal's segment files (preallocated: their disk use). journal.retention.max_size bounds it.", func(s wal.Stats) float64 { return float64(s.SegmentBytes) }),
		gauge("saga_journal_first_seq", "The first record the journal still holds (retention deletes segments behind the oldest checkpoint).", func(s wal.Stats) float64 { return float64(s.FirstSeq) }),
		gauge("saga_journal_checkpoint_seq", "The record the newest checkpoint covers (0: none); a restart replays only the records after it.", func(s wal.Stats) float64 { return float64(s.CheckpointSeq) }),
		gauge("saga_journal_durable_seq", "The last record fdatasynced.", func(wal.Stats) float64 { return float64(l.DurableSeq()) }),
		counter("saga_journal_checkpoints_total", "Checkpoints written by this process.", func(s wal.Stats) float64 { return float64(s.Checkpoints) }),
		promtext.NewGaugeFunc(promtext.Opts{
			Name: "saga_journal_verified",
			Help: "The verification of every journal record after start (the start itself reads only what follows the newest checkpoint): 1 clean, 0 damage found (see the log), -1 not finished.",
		}, func() float64 { return float64(m.journalVerified.Load()) }),
		counter("saga_journal_segments_deleted_total", "Segments retention deleted (archived first if journal.retention.archive_dir is set).", func(s wal.Stats) float64 { return float64(s.SegmentsDeleted) }),
	}
	if ck := res.Checkpointer; ck != nil {
		cs = append(cs, promtext.NewGaugeFunc(promtext.Opts{
			Name: "saga_journal_checkpointer_up",
			Help: "1 while checkpoints are kept; 0 once the checkpointer stopped (its replay could not follow the journal: see the log). Restarts then replay more, and retention stops.",
		}, func() float64 {
			if ck.Err() != nil {
				return 0
			}
			return 1
		}))
	}
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return err
		}
		m.own = append(m.own, c)
	}
	return nil
}

// unregister removes the saga_ collectors (a New that failed half way
// leaves a caller's registry as it found it, but for the Go and process
// collectors, which any later user wants anyway).
func (m *metrics) unregister() {
	for _, c := range m.own {
		m.reg.Unregister(c)
	}
	m.own = nil
}

// journalObserver measures the journal's batches (wal.Options.OnBatch),
// then tells next, an observer the caller had set, if any.
type journalObserver struct {
	m    *metrics
	next wal.BatchObserver
}

func (o *journalObserver) ObserveBatch(records, bytes int, took time.Duration) {
	o.m.fsync.Observe(took.Seconds())
	o.m.batchRecords.Observe(float64(records))
	o.m.journalBytes.Add(float64(bytes))
	if o.next != nil {
		o.next.ObserveBatch(records, bytes, took)
	}
}

// command counts one handled command. op is an MQTT op (or opInvalid);
// code is the refusal or failure code when !ok.
func (m *metrics) command(op string, ok bool, code string) { m.commandN(op, ok, code, 1) }

// commandN counts n commands of one op and outcome at once (refusals
// reported in aggregate).
func (m *metrics) commandN(op string, ok bool, code string, n float64) {
	if !validOp(op) {
		op = opInvalid
	}
	switch {
	case ok:
		m.commands.WithLabelValues(op, resultOK).Add(n)
	case failureCode(code):
		m.commands.WithLabelValues(op, resultFailed).Add(n)
	default:
		m.commands.WithLabelValues(op, resultRefused).Add(n)
		if _, listed := api.Lookup(code); !listed {
			code = labelOther
		}
		m.refusals.WithLabelValues(code).Add(n)
	}
}

func validOp(op string) bool {
	for _, k := range knownOps {
		if op == k {
			return true
		}
	}
	return false
}

// unwound counts a saga's report: its verdict and every step's bucket.
func (m *metrics) unwound(rep *rollback.Report) {
	m.unwinds.WithLabelValues(rep.Verdict()).Inc()
	for _, st := range rep.Steps {
		b := labelOther
		for _, k := range buckets {
			if st.Bucket == k {
				b = string(k)
			}
		}
		m.unwindSteps.WithLabelValues(b).Inc()
	}
}

// leaseEnded counts a lease's end by reason.
func (m *metrics) leaseEnded(reason string) {
	for _, r := range leaseReasons {
		if reason == r {
			m.leaseEnds.WithLabelValues(r).Inc()
			return
		}
	}
	m.leaseEnds.WithLabelValues(labelOther).Inc()
}

// stateCollector exports the gauges that mirror the supervisor's state,
// read from Status at scrape time. Until the Supervisor is attached (New
// has not returned: recovery is running) it exports nothing but
// saga_ready 0: a scrape during recovery must not say ready.
type stateCollector struct {
	sup atomic.Pointer[Supervisor]

	ready, halted, openSagas, leases   *promtext.Desc
	supplyVolts, supplyTripped, actCmd *promtext.Desc

	serialUp, serialFrames, serialCRC, serialRetx, serialLost *promtext.Desc

	lanes, laneReplays, laneDropped      *promtext.Desc
	draining, drainDeadline, quarantined *promtext.Desc

	zoneHalted *promtext.Desc
}

func newStateCollector() *stateCollector {
	d := func(name, help string, labels ...string) *promtext.Desc {
		return promtext.NewDesc(name, help, promtext.GaugeKind, labels...)
	}
	c := func(name, help string, labels ...string) *promtext.Desc {
		return promtext.NewDesc(name, help, promtext.CounterKind, labels...)
	}
	return &stateCollector{
		ready:         d("saga_ready", "1 when the supervisor admits commands (fail-closed: every not-ready reason is in /readyz), else 0."),
		halted:        d("saga_halted", "1 while the halt (e-stop) is latched, else 0."),
		openSagas:     d("saga_open_sagas", "Sagas open now."),
		leases:        d("saga_leases", "Agent leases live now."),
		supplyVolts:   d("saga_supply_volts", "A supply's last voltage reading, volts (absent until the supply has given a valid reading).", "supply"),
		supplyTripped: d("saga_supply_tripped", "1 while a supply's trip is latched, else 0.", "supply"),
		actCmd:        d("saga_actuator_commanded", "The value last commanded to an actuator, in its own unit (degrees, duty, 0/1).", "actuator"),
		serialUp:      d("saga_serial_link_up", "1 while the serial session with a microcontroller board is up, else 0.", "mcu"),
		serialFrames:  c("saga_serial_frames_received_total", "Valid frames received from a board.", "mcu"),
		serialCRC:     c("saga_serial_crc_errors_total", "Candidate frames from a board dropped for a CRC mismatch (line noise, garbage).", "mcu"),
		serialRetx:    c("saga_serial_retransmits_total", "Requests sent to a board again for want of an answer.", "mcu"),
		serialLost:    c("saga_serial_sessions_lost_total", "Sessions with a board that ended: silence, no answer, port gone, board reset or watchdog.", "mcu"),
		lanes:         d("saga_ingress_lanes", "Agents with a lane (a queue and a rate limit) now."),
		laneReplays:   c("saga_ingress_replays_total", "Requests sent again (same lease, id and fields) and answered with their first reply, not served twice."),
		laneDropped:   c("saga_ingress_replies_dropped_total", "Refusal replies not sent: the agent sent requests faster than their refusals could leave."),
		draining:      d("saga_draining", "1 while an operator's drain is in force (new sagas refused DRAINING), else 0."),
		drainDeadline: d("saga_drain_deadline_timestamp_seconds", "When the drain in force unwinds the sagas still open, Unix time (absent when no drain is in force)."),
		quarantined:   d("saga_quarantined_agents", "Agents an operator has quarantined now."),
		zoneHalted:    d("saga_zone_halted", "1 while a zone's halt is latched (its actuators parked, their steps refused until a zone reset), else 0.", "zone"),
	}
}

func (c *stateCollector) attach(s *Supervisor) { c.sup.Store(s) }

// Describe implements promtext.Collector.
func (c *stateCollector) Describe() []*promtext.Desc {
	return []*promtext.Desc{c.ready, c.halted, c.openSagas, c.leases, c.supplyVolts, c.supplyTripped, c.actCmd,
		c.serialUp, c.serialFrames, c.serialCRC, c.serialRetx, c.serialLost, c.lanes, c.laneReplays, c.laneDropped,
		c.draining, c.drainDeadline, c.quarantined, c.zoneHalted}
}

// Collect implements promtext.Collector.
func (c *stateCollector) Collect(sink *promtext.Sink) {
	s := c.sup.Load()
	if s == nil {
		sink.Value(c.ready, 0)
		return
	}
	st := s.Status()
	sink.Value(c.ready, bit(st.Ready))
	sink.Value(c.halted, bit(st.Halted))
	sink.Value(c.openSagas, float64(len(st.OpenSagas)))
	sink.Value(c.leases, float64(len(st.Leases)))
	sink.Value(c.draining, bit(st.Drain != nil))
	if st.Drain != nil {
		sink.Value(c.drainDeadline, float64(st.Drain.Deadline.UnixNano())/1e9)
	}
	sink.Value(c.quarantined, float64(len(st.Quarantined)))
	for _, sp := range st.Supplies {
		if sp.Known {
			sink.Value(c.supplyVolts, sp.Volts, sp.Name)
		}
		sink.Value(c.supplyTripped, bit(sp.Tripped), sp.Name)
	}
	for _, a := range st.Actuators {
		sink.Value(c.actCmd, a.Commanded, a.Name)
	}
	for _, z := range st.Zones {
		sink.Value(c.zoneHalted, bit(z.Halted), z.Name)
	}
	ls := s.lanes.Stats()
	sink.Value(c.lanes, float64(ls.Lanes))
	sink.Value(c.laneReplays, float64(ls.Replayed))
	sink.Value(c.laneDropped, float64(ls.RepliesDropped))
	for _, in := range s.opt.Inputs {
		m, ok := in.(interface{ Link() wiring.LinkStats })
		if !ok {
			continue
		}
		st := m.Link()
		sink.Value(c.serialUp, bit(in.Ready() == nil), st.Name)
		sink.Value(c.serialFrames, float64(st.Frames), st.Name)
		sink.Value(c.serialCRC, float64(st.BadCRC), st.Name)
		sink.Value(c.serialRetx, float64(st.Retransmits), st.Name)
		sink.Value(c.serialLost, float64(st.SessionsLost), st.Name)
	}
}

func bit(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Registry is the registry the supervisor's metrics are on
// (Options.Registry, or its own): HTTPHandler serves it on /metrics, and
// the daemon adds its own metrics to it.
func (s *Supervisor) Registry() *promtext.Registry { return s.metrics.reg }
