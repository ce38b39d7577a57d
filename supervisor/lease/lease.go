package lease

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Defaults and bounds (DESIGN §6).
const (
	DefaultTTL       = time.Second           // Hello's TTL when it asks for 0
	DefaultMinTTL    = 50 * time.Millisecond // shortest TTL granted
	DefaultMaxTTL    = 60 * time.Second      // longest TTL granted
	DefaultMaxLeases = 1024                  // live leases at once

	// RememberEnded is how many ended lease ids are remembered by id.
	// Older ones are still refused as LEASE_EXPIRED when the request
	// carries their epoch; with neither, LEASE_UNKNOWN (still a refusal).
	RememberEnded = 4096
	// SeenPerLease is how many command ids Seen remembers per lease. The
	// oldest is forgotten first: a replay of a command that 1024 newer
	// commands of the same lease have followed is reported as new. The
	// engine's own per-saga de-duplication is the second line behind it.
	SeenPerLease = 1024
)

// Reasons a lease ends, as passed to OnEnd. End and EndAgent pass the
// caller's reason (ReasonBye and ReasonWill when it is empty).
const (
	ReasonExpired    = "expired"    // the TTL passed without a heartbeat
	ReasonSuperseded = "superseded" // the agent said hello again
	ReasonShutdown   = "shutdown"   // Close
	ReasonBye        = "bye"        // End with no reason
	ReasonWill       = "will"       // EndAgent with no reason
)

// Lease is one agent's permission to act.
type Lease struct {
	ID    string // unique across restarts: it embeds the epoch
	Agent string
	Epoch uint64 // fencing token: strictly increasing over all leases
	TTL   time.Duration
	// Expires is on the manager's clock (Options.Now, monotonic): compare
	// it only with that clock's readings, never with wall time.
	Expires time.Time
	// Will is what the agent's MQTT last will carries, as it said in its
	// hello ("": it did not say). A will ends this lease only if it
	// carries the same: a late will of an earlier connection (a process
	// that died and was restarted) must not end the new one's lease.
	Will string
}

// Options configure a Manager. Zero values take the defaults.
type Options struct {
	// Now is the clock; time.Now by default (its monotonic reading is what
	// expiry compares). It must tick with the clock the runtime's timers
	// use — time.Now, or inside a testing/synctest bubble the bubble's.
	// Check always decides on Now; the expiry timer re-arms until Now has
	// passed Expires, so a lease never ends early by Now.
	Now func() time.Time
	// DefaultTTL is granted to a Hello asking for 0; MinTTL and MaxTTL
	// bound what a Hello may ask for.
	DefaultTTL, MinTTL, MaxTTL time.Duration
	// FirstEpoch is the highest epoch granted before this manager (the
	// supervisor reads it from the journal). Epochs start above it, and
	// every epoch up to it counts as retired.
	FirstEpoch uint64
	// OnEnd is called exactly once for every lease that ends, with the
	// reason, without the manager's lock held (see the package doc for the
	// goroutine). It must not call Close, nor Hello for the same agent.
	OnEnd func(l Lease, reason string)
	// MaxLeases bounds the live leases (DefaultMaxLeases by default), so a
	// flood of hellos under made-up agent ids cannot exhaust memory.
	MaxLeases int
}

// Manager grants and tracks leases. It is safe for concurrent use; each
// lease has one timer, armed at grant and re-armed only when it fires
// early, so a heartbeat touches no timer.
type Manager struct {
	now                        func() time.Time
	defaultTTL, minTTL, maxTTL time.Duration
	maxLeases                  int
	onEnd                      func(Lease, string)
	seed                       maphash.Seed // for command-id hashes

	mu      sync.Mutex
	epoch   uint64 // the highest epoch granted (FirstEpoch before the first)
	byID    map[string]*entry
	byAgent map[string]*entry
	byEpoch map[uint64]*entry
	// ending holds, per agent, a channel closed when OnEnd for the agent's
	// last lease has returned; Hello waits on it before granting.
	ending map[string]chan struct{}
	ended  *endedIDs
	closed bool
	// calls counts OnEnd calls begun or about to begin, so Close can wait
	// for them: after Close returns, OnEnd is neither running nor called.
	calls sync.WaitGroup
}

// entry is a live lease. Once ended it is out of every map and its fields
// are no longer written.
type entry struct {
	l     Lease
	timer *time.Timer
	ended bool
	done  chan struct{} // closed when OnEnd for this lease has returned
	seen  seenIDs
}

// New returns a manager with no leases. It refuses options that are out
// of order, and a FirstEpoch so large that epochs could wrap: a journal
// claiming one is corrupt, and a wrapped fencing token would let a stale
// agent act again.
func New(o Options) (*Manager, error) {
	m := &Manager{
		now:        o.Now,
		defaultTTL: cmp.Or(o.DefaultTTL, DefaultTTL),
		minTTL:     cmp.Or(o.MinTTL, DefaultMinTTL),
		maxTTL:     cmp.Or(o.MaxTTL, DefaultMaxTTL),
		maxLeases:  cmp.Or(o.MaxLeases, DefaultMaxLeases),
		onEnd:      o.OnEnd,
		seed:       maphash.MakeSeed(),
		epoch:      o.FirstEpoch,
		byID:       map[string]*entry{},
		byAgent:    map[string]*entry{},
		byEpoch:    map[uint64]*entry{},
		ending:     map[string]chan struct{}{},
		ended:      newEndedIDs(RememberEnded),
	}
	if m.now == nil {
		m.now = time.Now
	}
	switch {
	case m.minTTL < 0 || m.maxTTL < m.minTTL:
		return nil, fmt.Errorf("lease: TTL bounds [%v, %v] out of order", m.minTTL, m.maxTTL)
	case m.defaultTTL < m.minTTL || m.defaultTTL > m.maxTTL:
		return nil, fmt.Errorf("lease: default TTL %v outside [%v, %v]", m.defaultTTL, m.minTTL, m.maxTTL)
	case m.maxLeases < 0:
		return nil, errors.New("lease: negative MaxLeases")
	case o.FirstEpoch >= 1<<63:
		// 2^63 epochs of headroom: no runtime overflow check is needed.
		return nil, fmt.Errorf("lease: first epoch %d is implausibly large", o.FirstEpoch)
	}
	return m, nil
}

// Hello grants agent a new lease with the given TTL (0: the default). If
// the agent holds a lease, that lease ends first ("superseded") and OnEnd
// for it returns before Hello does; if the agent's previous lease is still
// ending on another goroutine, Hello waits for its OnEnd. Refusals:
// BAD_REQUEST (empty agent, TTL out of bounds), TOO_MANY_LEASES,
// SHUTTING_DOWN.
func (m *Manager) Hello(agent string, ttl time.Duration) (Lease, error) {
	return m.HelloWill(agent, ttl, "")
}

// HelloWill is Hello for an agent whose MQTT last will carries will: only
// a will carrying the same ends the lease (EndAgentWill).
func (m *Manager) HelloWill(agent string, ttl time.Duration, will string) (Lease, error) {
	if agent == "" {
		return Lease{}, refuse(CodeBadRequest, "empty agent id")
	}
	if ttl == 0 {
		ttl = m.defaultTTL
	}
	if ttl < m.minTTL || ttl > m.maxTTL {
		return Lease{}, refuse(CodeBadRequest, "ttl %v outside [%v, %v]", ttl, m.minTTL, m.maxTTL)
	}
	m.mu.Lock()
	// Loop until the agent has neither a live lease nor one still ending:
	// another Hello of the same agent may slip in whenever the lock is
	// dropped, and it is simply superseded in turn.
	for {
		if m.closed {
			m.mu.Unlock()
			return Lease{}, refuse(CodeShutdown, "the supervisor is shutting down")
		}
		if done := m.ending[agent]; done != nil {
			m.mu.Unlock()
			<-done
			m.mu.Lock()
			continue
		}
		if old := m.byAgent[agent]; old != nil {
			reason := honest(old, m.now(), ReasonSuperseded)
			l := m.endLocked(old, reason)
			m.mu.Unlock()
			m.fire(l, old.done, reason)
			m.mu.Lock()
			continue
		}
		break
	}
	defer m.mu.Unlock()
	if len(m.byID) >= m.maxLeases {
		return Lease{}, refuse(CodeTooManyLeases, "%d leases are live", len(m.byID))
	}
	m.epoch++
	e := &entry{
		l: Lease{
			ID:      newID(m.epoch),
			Agent:   agent,
			Epoch:   m.epoch,
			TTL:     ttl,
			Expires: m.now().Add(ttl),
			Will:    will,
		},
		done: make(chan struct{}),
	}
	e.timer = time.AfterFunc(ttl, func() { m.expire(e) })
	m.byID[e.l.ID] = e
	m.byAgent[agent] = e
	m.byEpoch[e.l.Epoch] = e
	return e.l, nil
}

// newID names a lease. The epoch makes it unique across restarts without
// any record of past ids; the random part keeps it from being guessed from
// the epoch, so knowing an agent's id and epoch is not enough to act as it.
func newID(epoch uint64) string {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	return "L" + strconv.FormatUint(epoch, 10) + "-" + hex.EncodeToString(b[:])
}

// Heartbeat renews a live lease: it now expires TTL from now. It refuses
// exactly as Check does; a lease whose TTL has passed cannot be revived,
// even if its timer has not run yet.
func (m *Manager) Heartbeat(agent, leaseID string, epoch uint64) (Lease, error) {
	return m.HeartbeatAt(agent, leaseID, epoch, time.Time{})
}

// HeartbeatAt is Heartbeat for a heartbeat received at received (zero:
// now): the lease is renewed for its TTL from then, not from when it was
// served. A heartbeat that waited in the agent's queue behind its own
// steps must not stretch the lease by that wait — a controller that died
// right after sending it is unwound TTL after the heartbeat reached the
// supervisor. A received time outside [now - TTL, now] is not trusted
// (another clock): the renewal is from now.
func (m *Manager) HeartbeatAt(agent, leaseID string, epoch uint64, received time.Time) (Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	e, err := m.findLocked(agent, leaseID, epoch, now)
	if err != nil {
		return Lease{}, err
	}
	from := now
	if !received.IsZero() && received.Before(now) && received.After(now.Add(-e.l.TTL)) {
		from = received
	}
	// The timer is left alone: when it fires before the new expiry it
	// re-arms for the rest, so a heartbeat costs no timer operation. A
	// renewal never shortens the lease.
	if exp := from.Add(e.l.TTL); exp.After(e.l.Expires) {
		e.l.Expires = exp
	}
	return e.l, nil
}

// Ending reports whether agent holds a live lease with less than half its
// TTL left: a heartbeat it sent may be on its way, and nothing should hold
// it back (the broker's door, see the supervisor's Enter).
func (m *Manager) Ending(agent string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.byAgent[agent]
	return e != nil && e.l.Expires.Sub(m.now()) < e.l.TTL/2
}

// Check answers whether agent may act now under leaseID and epoch: nil only
// if that lease is live by the clock, held by agent, with that epoch.
// Refusals: LEASE_EXPIRED (ended, TTL passed, or a stale epoch),
// LEASE_NOT_HOLDER, LEASE_UNKNOWN.
func (m *Manager) Check(agent, leaseID string, epoch uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, err := m.findLocked(agent, leaseID, epoch, m.now())
	return err
}

// findLocked returns the live lease, or the refusal. Ids that came from
// the wire are quoted and cut to 64 runes in messages, which are journaled.
func (m *Manager) findLocked(agent, id string, epoch uint64, now time.Time) (*entry, error) {
	e := m.byID[id]
	if e == nil {
		if reason, ok := m.ended.lookup(id); ok {
			return nil, refuse(CodeExpired, "lease %.64q ended (%s)", id, reason)
		}
		// Epochs only increase, so an epoch no higher than the highest
		// granted that no live lease holds has ended, here or before a
		// restart: no id needs remembering to refuse it.
		if epoch != 0 && epoch <= m.epoch && m.byEpoch[epoch] == nil {
			return nil, refuse(CodeExpired, "epoch %d is retired", epoch)
		}
		return nil, refuse(CodeUnknown, "no lease %.64q", id)
	}
	if e.l.Agent != agent {
		return nil, refuse(CodeNotHolder, "lease %.64q is another agent's", id)
	}
	if epoch != e.l.Epoch {
		return nil, refuse(CodeExpired, "epoch %d is not lease %s's epoch", epoch, id)
	}
	if !now.Before(e.l.Expires) {
		return nil, refuse(CodeExpired, "lease %s expired", id)
	}
	return e, nil
}

// Seen records cmdID as carried by leaseID and reports whether it was
// already recorded: a QoS 1 redelivery to refuse. It remembers the last
// SeenPerLease ids of each lease. For a lease that is not live it reports
// true without recording — fail closed: a command racing its lease's end
// is refused, never run. An empty cmdID is never recorded (false).
func (m *Manager) Seen(leaseID, cmdID string) bool {
	if cmdID == "" {
		return false
	}
	h := maphash.String(m.seed, cmdID)
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.byID[leaseID]
	if e == nil || !m.now().Before(e.l.Expires) {
		return true
	}
	return e.seen.record(h, SeenPerLease)
}

// End ends the agent's lease at once — a clean bye — and calls OnEnd on
// the caller's goroutine before returning. reason defaults to "bye"; a
// lease whose TTL had already passed ends as "expired", which is the
// truth. It refuses (and ends nothing) for a lease that is not live
// (LEASE_EXPIRED, LEASE_UNKNOWN) or is another agent's (LEASE_NOT_HOLDER).
func (m *Manager) End(agent, leaseID, reason string) error {
	if reason == "" {
		reason = ReasonBye
	}
	m.mu.Lock()
	e := m.byID[leaseID]
	if e == nil {
		_, err := m.findLocked(agent, leaseID, 0, m.now())
		m.mu.Unlock()
		return err
	}
	if e.l.Agent != agent {
		m.mu.Unlock()
		return refuse(CodeNotHolder, "lease %.64q is another agent's", leaseID)
	}
	reason = honest(e, m.now(), reason)
	l := m.endLocked(e, reason)
	m.mu.Unlock()
	m.fire(l, e.done, reason)
	return nil
}

// EndAgent ends whatever lease agent holds — for an MQTT last will or a
// lost serial link, which name no lease — and calls OnEnd on the caller's
// goroutine before returning. reason defaults to "will". It reports the
// lease it ended, or false if the agent held none.
func (m *Manager) EndAgent(agent, reason string) (Lease, bool) {
	return m.end(agent, reason, func(*entry) bool { return true })
}

// EndAgentWill ends agent's lease for an MQTT last will carrying will —
// unless the lease's hello named another will: then the will is stale (of
// an earlier connection) and the lease lives on. A lease whose hello named
// none is ended by any will.
func (m *Manager) EndAgentWill(agent, will string) (Lease, bool) {
	return m.end(agent, ReasonWill, func(e *entry) bool { return e.l.Will == "" || e.l.Will == will })
}

func (m *Manager) end(agent, reason string, ok func(*entry) bool) (Lease, bool) {
	if reason == "" {
		reason = ReasonWill
	}
	m.mu.Lock()
	e := m.byAgent[agent]
	if e == nil || !ok(e) {
		m.mu.Unlock()
		return Lease{}, false
	}
	reason = honest(e, m.now(), reason)
	l := m.endLocked(e, reason)
	m.mu.Unlock()
	m.fire(l, e.done, reason)
	return l, true
}

// Close ends every live lease with reason "shutdown", newest epoch first,
// calling OnEnd for each on the caller's goroutine; then it waits for OnEnd
// calls already under way on other goroutines. After Close returns no timer
// is armed, OnEnd is neither running nor called again, Hello is refused
// (SHUTTING_DOWN) and every lease is refused as LEASE_EXPIRED. Close may be
// called more than once; later calls only wait.
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		m.calls.Wait()
		return
	}
	m.closed = true
	live := make([]*entry, 0, len(m.byID))
	for _, e := range m.byID {
		live = append(live, e)
	}
	slices.SortFunc(live, func(a, b *entry) int { return cmp.Compare(b.l.Epoch, a.l.Epoch) })
	now := m.now()
	ended := make([]Lease, len(live))
	reasons := make([]string, len(live))
	for i, e := range live {
		reasons[i] = honest(e, now, ReasonShutdown)
		ended[i] = m.endLocked(e, reasons[i])
	}
	m.mu.Unlock()
	for i, e := range live {
		m.fire(ended[i], e.done, reasons[i])
	}
	m.calls.Wait()
}

// Snapshot returns the live leases, oldest epoch first (for status pages).
// A lease whose TTL has passed is not live, even before its timer runs.
func (m *Manager) Snapshot() []Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	out := make([]Lease, 0, len(m.byID))
	for _, e := range m.byID {
		if now.Before(e.l.Expires) {
			out = append(out, e.l)
		}
	}
	slices.SortFunc(out, func(a, b Lease) int { return cmp.Compare(a.Epoch, b.Epoch) })
	return out
}

// Count returns the number of live leases, as Snapshot counts them.
func (m *Manager) Count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	n := 0
	for _, e := range m.byID {
		if now.Before(e.l.Expires) {
			n++
		}
	}
	return n
}

// expire runs on the lease's timer goroutine. The timer may fire for a
// lease that a heartbeat has since extended (it is never reset on
// heartbeat) or that has already ended; only a lease whose TTL has passed
// by the clock ends here.
func (m *Manager) expire(e *entry) {
	m.mu.Lock()
	if e.ended {
		m.mu.Unlock()
		return
	}
	if left := e.l.Expires.Sub(m.now()); left > 0 {
		e.timer.Reset(left)
		m.mu.Unlock()
		return
	}
	l := m.endLocked(e, ReasonExpired)
	m.mu.Unlock()
	m.fire(l, e.done, ReasonExpired)
}

// endLocked takes e out of service: after it, no call finds e live, its id
// and epoch are retired, and a Hello of its agent waits until fire has run.
// Exactly one caller gets to end e (the others see it gone or ended), which
// is what makes OnEnd exactly-once. The caller must then call fire.
func (m *Manager) endLocked(e *entry, reason string) Lease {
	e.ended = true
	e.timer.Stop()
	e.seen = seenIDs{}
	delete(m.byID, e.l.ID)
	delete(m.byEpoch, e.l.Epoch)
	if m.byAgent[e.l.Agent] == e {
		delete(m.byAgent, e.l.Agent)
	}
	m.ended.add(e.l.ID, reason)
	m.ending[e.l.Agent] = e.done
	m.calls.Add(1)
	return e.l
}

// fire calls OnEnd without the lock, then lets the agent's next Hello
// proceed. The release is deferred so that an OnEnd that panics on a
// caller's goroutine does not leave the agent locked out for good.
func (m *Manager) fire(l Lease, done chan struct{}, reason string) {
	defer func() {
		m.mu.Lock()
		if m.ending[l.Agent] == done {
			delete(m.ending, l.Agent)
		}
		m.mu.Unlock()
		close(done)
		m.calls.Done()
	}()
	if m.onEnd != nil {
		m.onEnd(l, reason)
	}
}

// honest returns the reason a lease ends with: the caller's, unless its
// TTL had already passed, in which case it expired whatever ended it.
func honest(e *entry, now time.Time, reason string) string {
	if !now.Before(e.l.Expires) {
		return ReasonExpired
	}
	return reason
}
