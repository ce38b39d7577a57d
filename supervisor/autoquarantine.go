package supervisor

import (
	"fmt"
	"sync"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/ingress"
)

// AutoQuarantine quarantines an agent on its own after AfterRefusals of
// its requests were refused within Window (agents.quarantine). Zero
// AfterRefusals: never.
type AutoQuarantine struct {
	AfterRefusals int
	Window        time.Duration
}

// autoSource is who an automatic quarantine is journaled as.
const autoSource = "automatic (agents.quarantine)"

// maxAutoAgents bounds the agents whose refusals are being counted.
const maxAutoAgents = 4096

// countedCodes are the refusals that count towards an automatic
// quarantine: those the agent brought on itself — a malformed or forbidden
// request, a flood, a value beyond a limit, another's lease or saga, a
// bad approval. A refusal the supervisor's own state decides (HALTED,
// NOT_READY, DRAINING, a supply, JOURNAL_FAILED) never counts: a halt
// must not bar every controller that kept trying.
var countedCodes = map[string]bool{
	api.CodeBadRequest: true, api.CodePayloadTooLarge: true, api.CodeNotFinite: true, api.CodeForbidden: true,
	api.CodeRateLimited: true, api.CodeBusy: true, api.CodeUnauthorized: true,
	string(rollback.CodeDuplicateID): true, string(rollback.CodeSagaNotOwner): true, string(rollback.CodeSagaBusy): true,
	string(rollback.CodeActuatorUnknown): true, "LEASE_NOT_HOLDER": true,
	string(limits.LimitMin): true, string(limits.LimitMax): true, string(limits.LimitStep): true, string(limits.LimitSlew): true,
	"APPROVAL_REQUIRED": true, "APPROVAL_INVALID": true, "APPROVAL_MISMATCH": true, "APPROVAL_REPLAYED": true,
}

// refusalWindow counts each agent's refusals in fixed windows.
type refusalWindow struct {
	cfg AutoQuarantine
	mu  sync.Mutex
	by  map[string]*agentWindow
}

type agentWindow struct {
	start time.Time
	n     int
	fired bool
}

func newRefusalWindow(cfg AutoQuarantine) *refusalWindow {
	return &refusalWindow{cfg: cfg, by: map[string]*agentWindow{}}
}

// add counts n refusals of agent with code at now and reports whether
// they take the agent to the threshold (once per window).
func (w *refusalWindow) add(agent, code string, n uint64, now time.Time) bool {
	if w == nil || w.cfg.AfterRefusals <= 0 || agent == "" || !countedCodes[code] {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	a := w.by[agent]
	if a == nil {
		if len(w.by) >= maxAutoAgents {
			for k, v := range w.by {
				if now.Sub(v.start) > w.cfg.Window {
					delete(w.by, k)
				}
			}
			if len(w.by) >= maxAutoAgents {
				return false
			}
		}
		a = &agentWindow{start: now}
		w.by[agent] = a
	}
	if now.Sub(a.start) > w.cfg.Window {
		*a = agentWindow{start: now}
	}
	a.n += int(min(n, uint64(w.cfg.AfterRefusals)))
	if a.fired || a.n < w.cfg.AfterRefusals {
		return false
	}
	a.fired = true
	return true
}

// forget drops an agent's count (it was quarantined or released).
func (w *refusalWindow) forget(agent string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	delete(w.by, agent)
	w.mu.Unlock()
}

// countRefusal counts one refusal towards the agent's automatic
// quarantine, which — once due — runs on a goroutine of its own: the
// caller may be a transport's or a lane's, which must not wait on the
// journal.
func (s *Supervisor) countRefusal(agent, code string, n uint64) {
	if !s.autoQ.add(agent, code, n, time.Now()) {
		return
	}
	s.bgMu.Lock()
	if s.bgClosed {
		s.bgMu.Unlock()
		return
	}
	s.bg.Add(1)
	s.bgMu.Unlock()
	go func() {
		defer s.bg.Done()
		cfg := s.autoQ.cfg
		why := fmt.Sprintf("%d or more refusals within %s", cfg.AfterRefusals, cfg.Window)
		if _, err := s.Quarantine(agent, autoSource, why); err != nil {
			s.log.Error("automatic quarantine failed", "agent", agent, "err", err)
		}
		s.autoQ.forget(agent)
	}()
}

// countTallies counts the lanes' own refusals (floods, undecodable
// requests), which reach the supervisor only in aggregate.
func (s *Supervisor) countTallies(ts []ingress.Tally) {
	for _, t := range ts {
		if t.Op == "" && !t.JournalOnly {
			s.countRefusal(t.Agent, t.Code, t.Count)
		}
	}
}
