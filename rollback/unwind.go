package rollback

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

// group is one compensation: an actuator driven to target, settling steps.
// In retrace order a group is one step; in direct order it is every step
// of the saga on one actuator.
type group struct {
	act    *actState
	name   string
	target float64
	steps  []*step
}

// plan lists the saga's compensations in unwind order.
// addGroup reports each step of an unwind group as it now stands.
func (rep *Report) addGroup(g group) {
	for _, sp := range g.steps {
		rep.Steps = append(rep.Steps, StepReport{Step: sp.n, Actuator: sp.actName, Prior: g.target, Target: sp.target,
			Outcome: sp.outcome, Bucket: sp.bucket, Attempts: sp.attempts, Error: sp.err})
	}
}

func (e *Engine) plan(s *saga) []group {
	var gs []group
	if e.cfg.Order == Retrace {
		for i := len(s.steps) - 1; i >= 0; i-- {
			sp := s.steps[i]
			gs = append(gs, group{act: sp.act, name: sp.actName, target: sp.prior, steps: []*step{sp}})
		}
		return gs
	}
	index := map[string]int{}
	for _, sp := range s.steps {
		i, ok := index[sp.actName]
		if !ok {
			i = len(gs)
			index[sp.actName] = i
			gs = append(gs, group{act: sp.act, name: sp.actName, target: sp.prior})
		}
		gs[i].steps = append(gs[i].steps, sp)
	}
	for i, j := 0, len(gs)-1; i < j; i, j = i+1, j-1 {
		gs[i], gs[j] = gs[j], gs[i]
	}
	return gs
}

// unwindLocked drives the saga's actuators back and closes the saga. Callers
// hold mu; it is released during effects, syncs and backoffs. Steps that
// already have a bucket (an unwind resumed after a crash) are not touched
// again: no step is compensated twice.
func (e *Engine) unwindLocked(s *saga, reason string, recovered bool) *Report {
	s.unwinding = true
	if s.abortWhy == "" {
		s.abortWhy = reason
		e.enqueue(&Record{Type: RecAbort, Saga: s.id, Message: reason})
	}
	rep := &Report{Saga: s.id, Agent: s.owner.Agent, Reason: s.abortWhy, Order: e.cfg.Order, Recovered: recovered}
	for _, g := range e.plan(s) {
		e.compensateLocked(s, g)
	}
	for _, g := range e.plan(s) {
		rep.addGroup(g)
	}
	if e.fatal == nil {
		e.journal(&Record{Type: RecEnd, Saga: s.id, Code: rep.Verdict()})
	}
	e.closeLocked(s)
	e.log.Info("unwind finished", "saga", s.id, "verdict", rep.Verdict(), "reason", rep.Reason)
	return rep
}

// settle puts the group's unsettled steps in bucket b and journals each.
func (e *Engine) settle(s *saga, g group, b Bucket, errMsg string) {
	e.settleFlags(s, g, b, errMsg, 0)
}

// settleFlags is settle with flags on each COMP_DONE record.
func (e *Engine) settleFlags(s *saga, g group, b Bucket, errMsg string, flags uint8) {
	for _, sp := range g.steps {
		if sp.bucket != "" {
			continue
		}
		sp.bucket = b
		if errMsg != "" {
			sp.err = errMsg
		}
		if e.fatal == nil {
			e.enqueue(&Record{Type: RecCompDone, Saga: s.id, Step: sp.n, Actuator: g.name, Code: string(b), Attempt: sp.attempts, Message: errMsg, Flags: flags})
		}
	}
}

func (e *Engine) compensateLocked(s *saga, g group) {
	pending, applied := 0, 0
	for _, sp := range g.steps {
		if sp.bucket == "" {
			pending++
			if sp.outcome != Failed {
				applied++
			}
		}
	}
	switch {
	case pending == 0:
		return
	case e.stopped() || e.fatal != nil:
		e.settle(s, g, Unresolved, "not attempted: halted")
		return
	case g.act.zoneHalted():
		e.settle(s, g, Unresolved, "not attempted: zone "+g.act.zone.name+" halted")
		return
	case applied == 0:
		// Every pending step failed without effect (the driver promised the
		// output did not change): the actuator is already at the prior.
		e.settle(s, g, Compensated, "not applied: nothing to undo")
		return
	case g.act == nil:
		e.settle(s, g, CompensationFailed, fmt.Sprintf("actuator %q is no longer configured", g.name))
		return
	case !g.act.a.Kind.Reversible():
		e.settle(s, g, Orphaned, fmt.Sprintf("%s is a %s actuator: no undo exists", g.name, g.act.a.Kind))
		return
	}
	lead := g.steps[0]
	maxAttempts := uint32(1 + e.cfg.Retries)
	backoff := e.cfg.RetryBackoff
	var lastErr error
	for lead.failures < maxAttempts {
		if e.stopped() || e.fatal != nil {
			e.settle(s, g, Unresolved, "not attempted: halted")
			return
		}
		if g.act.zoneHalted() {
			e.settle(s, g, Unresolved, "not attempted: zone "+g.act.zone.name+" halted")
			return
		}
		attempt := lead.attempts + 1
		for _, sp := range g.steps {
			sp.attempts = attempt
		}
		// The compensation intent is durable before its effect, so a crash
		// mid-unwind resumes with the right attempt count.
		if err := e.journal(&Record{Type: RecCompIntent, Saga: s.id, Step: lead.n, Actuator: g.name, Target: g.target, Attempt: attempt}); err != nil {
			e.settle(s, g, Unresolved, "journal failed: "+err.Error())
			return
		}
		if e.stopped() {
			// The intent is durable but its effect was never started:
			// said so in the record, the rebuild must not believe the
			// target (nor leave it open as a second value).
			e.settleFlags(s, g, Unresolved, "not attempted: halted", FlagWithdrawn)
			return
		}
		if g.act.zoneHalted() {
			e.settleFlags(s, g, Unresolved, "not attempted: zone "+g.act.zone.name+" halted", FlagWithdrawn)
			return
		}
		e.inflight.Add(1)
		g.act.moving++
		e.mu.Unlock()
		err := e.effect(g.act.a, g.target)
		e.mu.Lock()
		e.setCommanded(g.act, g.target) // applied or in doubt: the best knowledge
		if err == nil {
			g.act.at = e.cfg.Now()
			e.settle(s, g, Compensated, "")
			e.effectDone(g.act) // the outcome recorded: see effectDone
			return
		}
		lastErr = err
		for _, sp := range g.steps {
			sp.failures++
		}
		e.log.Warn("compensation failed", "saga", s.id, "step", lead.n, "actuator", g.name, "attempt", attempt, "err", err)
		if e.fatal == nil {
			e.enqueue(&Record{Type: RecCompDone, Saga: s.id, Step: lead.n, Actuator: g.name, Attempt: attempt, Message: err.Error()})
		}
		e.effectDone(g.act)
		if lead.failures < maxAttempts {
			e.mu.Unlock()
			time.Sleep(backoff)
			e.mu.Lock()
			backoff *= 2
		}
	}
	msg := "compensation failed"
	if lastErr != nil {
		msg = fmt.Sprintf("compensation to %g failed after %d attempts: %v", g.target, lead.attempts, lastErr)
	}
	e.fallbackLocked(s, g, msg)
}

// fallbackLocked sends the actuator to its safe policy after a failed
// compensation and, by default, halts.
func (e *Engine) fallbackLocked(s *saga, g group, msg string) {
	a := g.act.a
	e.mu.Unlock()
	serr := a.GoSafe(context.Background())
	e.mu.Lock()
	switch {
	case serr != nil:
		e.settle(s, g, CompensationFailed, msg+"; safe policy failed: "+serr.Error())
	case a.Safe.Mode == actuators.SafeValue:
		e.setCommanded(g.act, a.Safe.Value)
		e.settle(s, g, FallbackSafe, msg+"; safe value "+a.Safe.String()+" applied")
	case a.Safe.Mode == actuators.SafeDetach:
		e.settle(s, g, FallbackSafe, msg+"; detached")
	default:
		// hold: nothing moved it anywhere safe; it stays where the failed
		// compensation left it.
		e.settle(s, g, CompensationFailed, msg+"; safe policy is hold")
	}
	if e.cfg.OnCompensationFailure == HaltOnFailure {
		e.mu.Unlock()
		// Applied here, before the unwind goes on (it must find the halt
		// applied); the reports of the sagas it ended go where an async
		// halt's go, or nobody would hear of them.
		reps, err := e.Halt(fmt.Sprintf("compensation failed: saga %d step %d on %s", s.id, g.steps[0].n, g.name))
		if e.cfg.OnHalt != nil && (len(reps) > 0 || err != nil) {
			e.cfg.OnHalt(reps, err)
		}
		e.mu.Lock()
	}
}

// sagasNewestFirst lists open sagas, newest first. Callers hold mu.
func (e *Engine) sagasNewestFirst() []*saga {
	ss := make([]*saga, 0, len(e.sagas))
	for _, s := range e.sagas {
		ss = append(ss, s)
	}
	sort.Slice(ss, func(i, j int) bool { return ss[i].id > ss[j].id })
	return ss
}
