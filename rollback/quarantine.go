package rollback

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"
)

// MaxQuarantined bounds how many agents may be quarantined at once, so
// the set (and a snapshot of it) stays small.
const MaxQuarantined = 1024

// Quarantine is one agent barred by an operator: Begin and Step refuse
// its sagas QUARANTINED until it is released.
type Quarantine struct {
	Agent string
	Since time.Time // when the QUARANTINE record was written (wall clock)
	Why   string    // who quarantined it, and why ("source: reason")
}

// QuarantineAgent journals that agent is barred and, once that is durable,
// unwinds its open sagas, newest first (a saga with a step in flight is
// unwound when that step returns). From then on Begin and Step refuse the
// agent QUARANTINED. An agent already quarantined is left as it is:
// already reports it, and nothing is journaled.
func (e *Engine) QuarantineAgent(agent, why string) (reps []*Report, already bool, err error) {
	if agent == "" {
		return nil, false, refusal(CodeBadRequest, "quarantine without an agent")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, false, errClosed()
	}
	if _, ok := e.quarantined[agent]; ok {
		return nil, true, nil
	}
	if len(e.quarantined) >= MaxQuarantined {
		return nil, false, refusal(CodeQuarantineFull, "%d agents are quarantined already: release one first", len(e.quarantined))
	}
	if e.fatal != nil {
		return nil, false, &Error{Code: CodeJournalFailed, Message: e.fatal.Error(), err: e.fatal}
	}
	if err := e.journal(&Record{Type: RecQuarantine, Agent: agent, Message: why}); err != nil {
		return nil, false, &Error{Code: CodeJournalFailed, Message: err.Error(), err: err}
	}
	e.quarantined[agent] = &Quarantine{Agent: agent, Since: e.cfg.Now(), Why: why}
	reps = e.abortWhereLocked(func(o Owner) bool { return o.Agent == agent }, "agent quarantined: "+why)
	return reps, false, nil
}

// ReleaseAgent journals the end of agent's quarantine. It refuses
// NOT_QUARANTINED for an agent that is not quarantined.
func (e *Engine) ReleaseAgent(agent, why string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errClosed()
	}
	if _, ok := e.quarantined[agent]; !ok {
		return refusal(CodeNotQuarantined, "agent %q is not quarantined", agent)
	}
	if e.fatal != nil {
		return &Error{Code: CodeJournalFailed, Message: e.fatal.Error(), err: e.fatal}
	}
	if err := e.journal(&Record{Type: RecRelease, Agent: agent, Message: why}); err != nil {
		return &Error{Code: CodeJournalFailed, Message: err.Error(), err: err}
	}
	delete(e.quarantined, agent)
	return nil
}

// IsQuarantined reports whether agent is quarantined.
func (e *Engine) IsQuarantined(agent string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.quarantined[agent]
	return ok
}

// Quarantined lists the quarantined agents by name.
func (e *Engine) Quarantined() []Quarantine {
	e.mu.Lock()
	out := make([]Quarantine, 0, len(e.quarantined))
	for _, q := range e.quarantined {
		out = append(out, *q)
	}
	e.mu.Unlock()
	slices.SortFunc(out, func(a, b Quarantine) int { return cmp.Compare(a.Agent, b.Agent) })
	return out
}

// quarantineRefusal is the gate's refusal of a quarantined agent. Callers
// hold mu.
func (e *Engine) quarantineRefusal(agent string) *Error {
	q, ok := e.quarantined[agent]
	if !ok {
		return nil
	}
	return refusal(CodeQuarantined, "agent %q is quarantined (%s) until an operator releases it", agent, q.Why)
}

// applyQuarantine rebuilds a QUARANTINE or RELEASE record.
func (e *Engine) applyQuarantine(r *Record) error {
	if r.Agent == "" {
		return fmt.Errorf("%s without an agent", r.Type)
	}
	_, in := e.quarantined[r.Agent]
	if r.Type == RecRelease {
		if !in {
			return fmt.Errorf("agent %q released, but it was not quarantined", r.Agent)
		}
		delete(e.quarantined, r.Agent)
		return nil
	}
	if in {
		return fmt.Errorf("agent %q quarantined twice", r.Agent)
	}
	if len(e.quarantined) >= MaxQuarantined {
		return fmt.Errorf("more than %d agents quarantined", MaxQuarantined)
	}
	e.quarantined[r.Agent] = &Quarantine{Agent: r.Agent, Since: time.Unix(0, r.UnixNano), Why: r.Message}
	return nil
}

// quarantineNames is the quarantined agents' names, sorted. Callers hold mu.
func (e *Engine) quarantineNames() []string {
	return slices.Sorted(maps.Keys(e.quarantined))
}
