package supervisor

import (
	"strings"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/rollback"
)

// drainReason leads the readiness reason of a drain in force. A drain
// makes the supervisor not ready for new work (/readyz 503: a load
// balancer or fleet manager sends none) while the open sagas may still
// step: the motion gate (notReady) passes over this reason alone.
const drainReason = "draining: "

// LeaseReasonQuarantined is the reason a quarantined agent's lease ends
// with.
const LeaseReasonQuarantined = "quarantined"

// DrainJSON is a drain in force, for status.
type DrainJSON struct {
	Why   string    `json:"reason"`
	Since time.Time `json:"since"`
	// Deadline is when open sagas are unwound; after a restart it has
	// passed (recovery unwound every saga the previous process left).
	Deadline  time.Time `json:"deadline"`
	GraceS    float64   `json:"grace_s"`
	Recovered bool      `json:"recovered,omitempty"` // in force since before the last start
}

// QuarantineJSON is a quarantined agent, for status.
type QuarantineJSON struct {
	Agent string    `json:"agent"`
	Why   string    `json:"reason"`
	Since time.Time `json:"since"`
}

// Drain begins a drain (an operator's, already authorized): new sagas are
// refused DRAINING from the instant it is journaled; sagas open now may
// step and commit until grace has passed, then every saga still open is
// unwound as a lease expiry unwinds one. A drain in force is replaced
// (its deadline counted again from now). It never halts and never waits
// on a halt; a halt during a drain latches as ever.
func (s *Supervisor) Drain(grace time.Duration, by, reason string) (rollback.Drain, error) {
	d, err := s.engine.StartDrain(grace, joinWhy(by, reason))
	if err != nil {
		return d, err
	}
	s.log.Warn("drain begun: new sagas refused", "by", by, "reason", reason, "grace", grace)
	s.drainMu.Lock()
	if s.drainTimer != nil {
		s.drainTimer.Stop()
	}
	s.drainTimer = time.AfterFunc(grace, func() { s.drainDeadline(d) })
	s.drainMu.Unlock()
	s.refreshSoon()
	return d, nil
}

// drainDeadline unwinds the sagas still open when d's grace has passed,
// unless d was ended or replaced since.
func (s *Supervisor) drainDeadline(d rollback.Drain) {
	s.bgMu.Lock()
	if s.bgClosed {
		s.bgMu.Unlock()
		return // stopping: Close unwinds every saga itself
	}
	s.bg.Add(1)
	s.bgMu.Unlock()
	defer s.bg.Done()
	reps := s.engine.UnwindDrained(d)
	if len(reps) > 0 {
		s.log.Warn("drain deadline: open sagas unwound", "sagas", len(reps))
	}
	for _, rep := range reps {
		s.publishReport(rep)
	}
	s.publishStates()
	s.refreshSoon()
}

// Undrain ends the drain in force (NOT_DRAINING if none is).
func (s *Supervisor) Undrain(by, reason string) error {
	if err := s.engine.EndDrain(joinWhy(by, reason)); err != nil {
		return err
	}
	s.drainMu.Lock()
	if s.drainTimer != nil {
		s.drainTimer.Stop()
		s.drainTimer = nil
	}
	s.drainMu.Unlock()
	s.log.Warn("drain ended", "by", by, "reason", reason)
	s.refreshSoon()
	return nil
}

// Quarantine bars agent (an operator's decision, already authorized): the
// bar is journaled, then the agent's open sagas are unwound and its lease
// ends; from then on every request of the agent but halt is refused
// QUARANTINED (counted and journaled in aggregate, never one record per
// request). already is true when the agent was quarantined before (nothing
// is journaled again).
func (s *Supervisor) Quarantine(agent, by, reason string) (already bool, err error) {
	if err := api.ValidName(agent); err != nil {
		return false, &api.Error{Code: api.CodeBadRequest, Field: "agent", Message: "agent: " + err.Error()}
	}
	// Barred on the request path first (fail-closed): once the engine
	// shows the quarantine, no request of the agent may get through.
	s.addBarred(agent)
	reps, already, err := s.engine.QuarantineAgent(agent, joinWhy(by, reason))
	if err != nil {
		s.loadBarred()
		return false, err
	}
	for _, rep := range reps {
		s.publishReport(rep)
	}
	if !already {
		s.log.Warn("agent quarantined", "agent", agent, "by", by, "reason", reason, "unwound", len(reps))
	}
	s.leases.EndAgent(agent, LeaseReasonQuarantined)
	s.publishStates()
	s.refreshSoon()
	return already, nil
}

// Release ends agent's quarantine (NOT_QUARANTINED if it has none).
func (s *Supervisor) Release(agent, by, reason string) error {
	if err := api.ValidName(agent); err != nil {
		return &api.Error{Code: api.CodeBadRequest, Field: "agent", Message: "agent: " + err.Error()}
	}
	if err := s.engine.ReleaseAgent(agent, joinWhy(by, reason)); err != nil {
		return err
	}
	s.loadBarred()
	s.log.Warn("agent released from quarantine", "agent", agent, "by", by, "reason", reason)
	s.refreshSoon()
	return nil
}

// loadBarred copies the engine's quarantined agents into the set the
// request path reads without a lock (a heartbeat must never wait on the
// engine).
func (s *Supervisor) loadBarred() {
	s.barredMu.Lock()
	defer s.barredMu.Unlock()
	set := map[string]struct{}{}
	for _, q := range s.engine.Quarantined() {
		set[q.Agent] = struct{}{}
	}
	s.barred.Store(&set)
}

// addBarred adds agent to the request path's set ahead of the engine.
func (s *Supervisor) addBarred(agent string) {
	s.barredMu.Lock()
	defer s.barredMu.Unlock()
	set := map[string]struct{}{agent: {}}
	if p := s.barred.Load(); p != nil {
		for a := range *p {
			set[a] = struct{}{}
		}
	}
	s.barred.Store(&set)
}

// quarantined reports whether agent is barred, without a lock.
func (s *Supervisor) quarantined(agent string) bool {
	p := s.barred.Load()
	if p == nil {
		return false
	}
	_, ok := (*p)[agent]
	return ok
}

// stopDrainTimer stops the deadline's timer (Close).
func (s *Supervisor) stopDrainTimer() {
	s.drainMu.Lock()
	if s.drainTimer != nil {
		s.drainTimer.Stop()
	}
	s.drainMu.Unlock()
}

// barrierStatus fills the status's drain and quarantine, and the
// readiness reason of a drain.
func (s *Supervisor) barrierStatus(st *Status) (reason string) {
	st.Quarantined = []QuarantineJSON{}
	for _, q := range s.engine.Quarantined() {
		st.Quarantined = append(st.Quarantined, QuarantineJSON{Agent: q.Agent, Why: q.Why, Since: q.Since.UTC()})
	}
	d, on := s.engine.Draining()
	if !on {
		return ""
	}
	st.Drain = &DrainJSON{Why: d.Why, Since: d.Since.UTC(), Deadline: d.Deadline.UTC(), GraceS: d.Grace.Seconds(), Recovered: d.Recovered}
	if d.Recovered {
		return drainReason + d.Why + " (since before the last start; new sagas refused until an operator ends it)"
	}
	return drainReason + d.Why + " (new sagas refused; open sagas unwound at " + d.Deadline.UTC().Format(time.RFC3339) + ")"
}

// onlyDrain reports whether every reason is a drain's: the supervisor is
// ready for motion, if not for new sagas.
func onlyDrain(reasons []string) bool {
	for _, r := range reasons {
		if !strings.HasPrefix(r, drainReason) {
			return false
		}
	}
	return true
}

func joinWhy(by, reason string) string {
	if reason == "" {
		return by
	}
	return by + ": " + reason
}
