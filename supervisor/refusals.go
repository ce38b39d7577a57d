package supervisor

import (
	"sync"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/rollback"
)

// Refusals an agent earns one by one — steps the gate refuses, commands on
// a stale lease — are journaled one record each while they are few: the
// audit trail then shows which command was refused and why. An agent
// refused more often than refusalRate a second (after a burst of
// refusalBurst) has the rest journaled in aggregate, one record per agent,
// op and code a second (the lanes' tally), like the refusals the lanes
// decide themselves. Every refusal is still answered and counted in the
// metrics. So junk from one agent costs the journal at most about
// refusalRate records a second, whatever it sends.
const (
	refusalRate  = 10
	refusalBurst = 20
	// refusalAgents bounds the agents tracked; past it the buckets start
	// over (at worst a burst more is journaled one by one).
	refusalAgents = 1024
)

type refusalBudget struct {
	mu      sync.Mutex
	buckets map[string]*refusalBucket
	now     func() time.Time
}

type refusalBucket struct {
	tokens float64
	at     time.Time
}

func newRefusalBudget() *refusalBudget {
	return &refusalBudget{buckets: map[string]*refusalBucket{}, now: time.Now}
}

// allow spends one of agent's tokens: true while it has one (journal this
// refusal on its own), false when it is refused too often.
func (b *refusalBudget) allow(agent string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	k := b.buckets[agent]
	if k == nil {
		if len(b.buckets) >= refusalAgents {
			clear(b.buckets)
		}
		k = &refusalBucket{tokens: refusalBurst, at: now}
		b.buckets[agent] = k
	}
	k.tokens = min(refusalBurst, k.tokens+now.Sub(k.at).Seconds()*refusalRate)
	k.at = now
	if k.tokens < 1 {
		return false
	}
	k.tokens--
	return true
}

// journalGateRefusal is the engine's JournalRefusal: a step refused by the
// gate is journaled on its own while its agent's budget lasts, and counted
// for the aggregate otherwise.
func (s *Supervisor) journalGateRefusal(owner rollback.Owner, code rollback.Code) bool {
	if s.refusals.allow(owner.Agent) {
		return true
	}
	s.lanes.CountJournalOnly(owner.Agent, api.OpStep, string(code))
	return false
}
