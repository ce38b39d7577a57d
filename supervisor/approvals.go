package supervisor

import (
	"container/heap"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/approval"
	"github.com/saga-supervisor/saga-supervisor/rollback"
)

// MaxSpentApprovals bounds the used approvals remembered at once. Each is
// forgotten when its approval expires, so the set holds at most the
// approvals admitted within one max_ttl; when it is full a new approval is
// refused APPROVALS_FULL rather than an old one forgotten early (which
// would let it be replayed).
const MaxSpentApprovals = 65536

// Approvals configures operator approvals (package approval).
type Approvals struct {
	// Device is the device name approvals must carry.
	Device string
	// Verifier checks signatures and validity; nil: no key is configured,
	// so every approval sent is refused APPROVAL_INVALID, and no actuator
	// may require one (the config refuses that).
	Verifier *approval.Verifier
	// Required names the actuators that move only with approvals, and how
	// many each needs, from as many distinct keys (1 or more; an actuator
	// not listed, or listed with 0, needs none).
	Required map[string]int
	// Now is the wall clock approvals are checked against (nil: time.Now).
	Now func() time.Time
}

// approvalGate holds what approvals need at run time.
type approvalGate struct {
	cfg   Approvals
	spent *spentSet
}

func newApprovalGate(cfg *Approvals) *approvalGate {
	g := &approvalGate{spent: newSpentSet(MaxSpentApprovals)}
	if cfg != nil {
		g.cfg = *cfg
	}
	if g.cfg.Now == nil {
		g.cfg.Now = time.Now
	}
	return g
}

func approvalRefusal(err error) *api.Reply {
	code, msg := approval.CodeOf(err), err.Error()
	if code == "" {
		code = approval.CodeInvalid
	}
	if e, ok := err.(*approval.Error); ok {
		msg = e.Msg
	}
	return &api.Reply{Code: string(code), Message: "approval: " + msg}
}

// check decides a step's approvals before the engine sees it. It returns a
// refusal, or the hook the engine's gate calls last (Command.Admit) to
// spend the approvals' nonces — nil when the step carries no approval.
// note names the keys whose approvals admitted the step, for its INTENT.
func (g *approvalGate) check(req api.Request) (admit func() *rollback.Error, note string, refused *api.Reply) {
	tokens := req.Approvals()
	need := g.cfg.Required[req.Actuator]
	switch {
	case len(tokens) == 0 && need == 0:
		return nil, "", nil
	case len(tokens) == 0:
		return nil, "", &api.Reply{Code: string(approval.CodeRequired),
			Message: fmt.Sprintf("%s moves only with %s of this step (field %s)", req.Actuator, approvalsNeeded(need), approvalField(need))}
	case len(tokens) < need:
		// Counted before any signature is checked: too few is too few.
		return nil, "", &api.Reply{Code: string(approval.CodeTooFew),
			Message: fmt.Sprintf("%s moves only with %s of this step; the step carries %d", req.Actuator, approvalsNeeded(need), len(tokens))}
	}
	// Approvals that are sent are checked, required or not: a bad one is
	// refused, never ignored.
	if g.cfg.Verifier == nil {
		return nil, "", &api.Reply{Code: string(approval.CodeInvalid), Message: "approval: this supervisor trusts no approval key (approvals.public_keys)"}
	}
	cs, err := g.cfg.Verifier.Step(tokens, g.cfg.Now(), g.cfg.Device, req.Actuator, req.Value, req.Saga)
	if err != nil {
		return nil, "", approvalRefusal(err)
	}
	skew := g.cfg.Verifier.Skew()
	uses := make([]spent, len(cs))
	ids := make([]string, len(cs))
	for i, c := range cs {
		uses[i] = spent{nonce: c.Nonce, expires: c.NotAfter.Add(skew)}
		ids[i] = c.KeyID + "/" + c.NonceHex()
	}
	return func() *rollback.Error {
		return g.spent.spend(uses, g.cfg.Now())
	}, "approved by key/nonce " + strings.Join(ids, " "), nil
}

// approvalsNeeded says what an actuator needing n approvals needs.
func approvalsNeeded(n int) string {
	if n <= 1 {
		return "an operator's signed approval"
	}
	return fmt.Sprintf("%d operators' signed approvals, from %d distinct keys,", n, n)
}

func approvalField(n int) string {
	if n <= 1 {
		return "approval"
	}
	return "approvals"
}

// spentSet remembers the nonces of admitted approvals until they expire.
type spentSet struct {
	mu    sync.Mutex
	max   int
	nonce map[[approval.NonceLen]byte]struct{}
	order spentHeap
}

func newSpentSet(max int) *spentSet {
	return &spentSet{max: max, nonce: map[[approval.NonceLen]byte]struct{}{}}
}

// spent is one remembered nonce. It is forgotten when both clocks say its
// approval expired: the wall clock (expires) and the monotonic one (due,
// the same instant measured from when it was spent), so neither a wall
// clock stepped back nor one jumping ahead brings it back early.
type spent struct {
	nonce   [approval.NonceLen]byte
	expires time.Time // wall
	due     time.Time // monotonic
}

type spentHeap []spent

func (h spentHeap) Len() int           { return len(h) }
func (h spentHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h spentHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *spentHeap) Push(x any)        { *h = append(*h, x.(spent)) }
func (h *spentHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// spend marks the nonces of uses used until their expiry (wall clock), or
// refuses them all: APPROVAL_REPLAYED if any was used, APPROVALS_FULL if
// the set cannot hold them all. Either every nonce is spent or none is.
// now must carry a monotonic reading (time.Now's). The nonces of uses are
// distinct (approval.Verifier.Step refuses a repeated one).
func (s *spentSet) spend(uses []spent, now time.Time) *rollback.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneLocked(now)
	for _, u := range uses {
		if _, used := s.nonce[u.nonce]; used {
			return &rollback.Error{Code: rollback.Code(approval.CodeReplayed), Message: fmt.Sprintf("approval %x was already used", u.nonce)}
		}
	}
	if len(s.nonce)+len(uses) > s.max {
		return &rollback.Error{Code: rollback.Code(approval.CodeFull),
			Message: fmt.Sprintf("%d unexpired approvals are remembered, the most this supervisor holds: retry when some expire", len(s.nonce))}
	}
	for _, u := range uses {
		s.nonce[u.nonce] = struct{}{}
		heap.Push(&s.order, spent{nonce: u.nonce, expires: u.expires, due: now.Add(u.expires.Sub(now.Round(0)))})
	}
	return nil
}

func (s *spentSet) pruneLocked(now time.Time) {
	wall := now.Round(0)
	for s.order.Len() > 0 && !now.Before(s.order[0].due) {
		e := heap.Pop(&s.order).(spent)
		if wall.After(e.expires) {
			delete(s.nonce, e.nonce)
			continue
		}
		// The wall clock went back: wait for it as well.
		e.due = now.Add(e.expires.Sub(wall))
		heap.Push(&s.order, e)
		if !now.Before(e.due) { // cannot happen (expires >= wall); never spin
			break
		}
	}
}

// len is how many nonces are remembered (tests).
func (s *spentSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.nonce)
}
