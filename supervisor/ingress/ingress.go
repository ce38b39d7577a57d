// Package ingress is the supervisor's front door, whatever the transport:
// one lane per agent, so that no agent can starve another, and a halt that
// never waits.
//
// Each agent has its own bounded queue, served by a goroutine of its own
// (started when the agent has work, gone when it has none), and a token
// bucket that bounds how fast its requests are admitted. An agent over its
// rate is answered RATE_LIMITED and one whose queue is full BUSY; neither
// delays or drops another agent's requests, since no queue and no worker
// is shared. Replies to one agent leave in the order its requests arrived,
// except for the two ops served the moment they arrive, ahead of anything
// the agent has queued:
//
//   - halt: latched at once on the transport's goroutine (Handler.Halt must
//     not block). A halt is never rate-limited, queued or refused, and it
//     needs no lane, so neither a full queue nor the cap on agents can drop
//     it.
//   - heartbeat: renewing a lease is O(1) and does no I/O, and an agent
//     whose own steps fill its queue must still be able to keep its lease.
//
// A halt is never de-duplicated: a replayed halt halts (and is journaled)
// again, which can only make the robot safer.
//
// A request id seen before from the same agent gets the first reply again
// and is not served twice (MQTT QoS 1 redelivers; clients retry). The
// replies remembered are bounded per agent and forgotten when the agent
// takes a new lease. Refusals decided here, and requests a transport could
// not decode, are reported to the Handler in aggregate — counts per agent
// and code every TallyEvery — so that a flood of junk costs the journal one
// record per interval, not one per message.
package ingress

import (
	"cmp"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
)

// Defaults fit a Raspberry Pi: a few agents, each allowed more than a
// controller waiting for each reply can send, far less than a flood.
const (
	DefaultMaxAgents  = 16
	DefaultQueueLen   = 32
	DefaultRate       = 1000 // requests per second, sustained, per agent
	DefaultBurst      = 200
	DefaultReplyCache = 256
	DefaultTallyEvery = time.Second
	DefaultIdleAfter  = 2 * time.Minute
)

// Handler serves what the lanes admit. It must be safe for concurrent use:
// each agent's lane calls Handle from its own goroutine, and the fast ops
// arrive on the transport's.
type Handler interface {
	// Handle answers one request. Calls for one agent come one at a time,
	// in arrival order, except heartbeats, which come at once.
	Handle(req api.Request, received time.Time) api.Reply
	// Halt latches the halt and returns at once; it must not block. A
	// non-nil error is the reply (the halt was latched all the same, or
	// wider: see the supervisor's zone halts).
	Halt(req api.Request) *api.Error
	// Refusals receives the refusals decided by the lanes and the requests
	// a transport could not decode, counted per agent and code since the
	// last call. Nothing of them reached Handle; nothing moved.
	Refusals([]Tally)
}

// Tally is a count of refusals of one code to one agent ("" when the
// request named none that could be read).
type Tally struct {
	Agent string
	Op    api.Op // the requests' op; "" when they were not decoded
	Code  string
	Count uint64
	// JournalOnly: refusals already answered and counted in the
	// metrics one by one, whose journaling was left to the aggregate
	// (see CountJournalOnly).
	JournalOnly bool
}

// Options configure the lanes. Zero values take the defaults.
type Options struct {
	MaxAgents  int           // agents with a lane at once
	QueueLen   int           // requests waiting per agent; more are BUSY
	Rate       float64       // requests admitted per second per agent, sustained
	Burst      int           // requests admitted at once after a quiet spell
	ReplyCache int           // replies remembered per agent, for replays
	TallyEvery time.Duration // how often refusals are reported
	IdleAfter  time.Duration // a lane idle this long may be given to a new agent
	Now        func() time.Time
}

func (o *Options) defaults() error {
	if o.MaxAgents < 0 || o.QueueLen < 0 || o.Rate < 0 || o.Burst < 0 || o.ReplyCache < 0 || o.TallyEvery < 0 || o.IdleAfter < 0 {
		return fmt.Errorf("ingress: negative option in %+v", *o)
	}
	o.MaxAgents = cmp.Or(o.MaxAgents, DefaultMaxAgents)
	o.QueueLen = cmp.Or(o.QueueLen, DefaultQueueLen)
	o.Rate = cmp.Or(o.Rate, DefaultRate)
	o.Burst = cmp.Or(o.Burst, DefaultBurst)
	o.ReplyCache = cmp.Or(o.ReplyCache, DefaultReplyCache)
	o.TallyEvery = cmp.Or(o.TallyEvery, DefaultTallyEvery)
	o.IdleAfter = cmp.Or(o.IdleAfter, DefaultIdleAfter)
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}

// Stats are counters since the lanes were made.
type Stats struct {
	Served         uint64 // requests handed to Handle (or Halt)
	Replayed       uint64 // replays answered from the reply cache
	RateLimited    uint64
	Busy           uint64
	TooManyAgents  uint64
	Undecodable    uint64 // requests a transport could not decode
	RepliesDropped uint64 // refusal replies not sent: the agent's queue was full of them
	Held           uint64 // times the door (Enter) held a request: its agent's lane was full
	Lanes          int    // agents with a lane now
	InFlight       int    // requests queued or being served now, over every lane
}

// Lanes route requests to per-agent lanes.
type Lanes struct {
	opt Options
	h   Handler

	mu     sync.Mutex // never held across I/O or a Handler call
	lanes  map[string]*lane
	tally  map[tallyKey]uint64
	stats  Stats
	closed bool

	workers sync.WaitGroup
	stop    chan struct{}
	ticker  sync.WaitGroup
}

type tallyKey struct {
	agent, op, code string
	journalOnly     bool
}

// item is one queued request, or a reply already decided (a refusal, a
// replay) that must leave after the agent's earlier replies.
type item struct {
	req      api.Request
	received time.Time
	reply    func(api.Reply)
	answered *api.Reply
	replay   bool // answered from the reply cache when reached
}

type lane struct {
	agent   string
	q       []item // FIFO; q[:work] are not all work — work counts requests to serve
	work    int    // requests in q waiting for Handle
	running bool
	tokens  float64
	refill  time.Time // when tokens was last brought up to date
	used    time.Time // last request
	cache   replyCache
	pending map[string]api.Request // queued requests by key, not yet in the cache
	// The door (Enter): requests let through towards the lane that have
	// not reached it yet, when that count last changed, and the channel
	// closed when the lane next has room for one more.
	transit   int
	transitAt time.Time
	room      chan struct{}
}

// New makes the lanes and starts the goroutine that reports refusals.
func New(opt Options, h Handler) (*Lanes, error) {
	if err := opt.defaults(); err != nil {
		return nil, err
	}
	l := &Lanes{opt: opt, h: h, lanes: map[string]*lane{}, tally: map[tallyKey]uint64{}, stop: make(chan struct{})}
	l.ticker.Add(1)
	go l.report()
	return l, nil
}

// Submit takes one request from agent (as the transport knows it: for
// MQTT, the agent of its command topic, or the payload's when it came on
// the shared topic). derr, when not nil, is why the transport could not
// decode it; req then holds at most a salvaged id. reply is called exactly
// once — now, or later from the agent's lane — unless the reply is dropped
// because the agent's queue is full of replies it has not been sent yet
// (Stats.RepliesDropped). Submit never blocks on a Handler call other
// than Halt and heartbeats, and never on I/O.
func (l *Lanes) Submit(agent string, req api.Request, derr *api.Error, received time.Time, reply func(api.Reply)) {
	if derr == nil && req.Op == api.OpHalt {
		herr := l.h.Halt(req) // first, before any lock or check: the halt path
		l.mu.Lock()
		l.stats.Served++
		l.mu.Unlock()
		if herr != nil {
			reply(api.ErrorReply(req.ID, herr))
			return
		}
		reply(api.Reply{ID: req.ID, OK: true})
		return
	}
	if derr == nil && req.Op == api.OpHeartbeat {
		l.mu.Lock()
		ln := l.lanes[agent]
		if ln != nil {
			l.arrivedLocked(ln, l.opt.Now())
			l.roomLocked(ln) // a heartbeat takes no place in the queue
			if rep, k := ln.cache.lookup(req); k != unseen {
				l.countSeenLocked(ln, req, k)
				l.mu.Unlock()
				reply(rep)
				return
			}
		}
		l.stats.Served++
		l.mu.Unlock()
		rep := l.h.Handle(req, received)
		if ln != nil {
			l.mu.Lock()
			ln.cache.store(req, rep)
			l.mu.Unlock()
		}
		reply(rep)
		return
	}
	now := l.opt.Now()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		reply(api.ErrorReply(req.ID, &api.Error{Code: "SHUTTING_DOWN", Message: "the supervisor is shutting down"}))
		return
	}
	if derr != nil {
		l.stats.Undecodable++
		l.tally[tallyKey{agent: agent, code: derr.Code}]++
	}
	ln := l.laneLocked(agent, now)
	if ln == nil {
		code := api.CodeTooManyAgents
		if derr != nil {
			code = derr.Code // already tallied
		} else {
			l.stats.TooManyAgents++
			l.tally[tallyKey{agent: agent, op: string(req.Op), code: code}]++
		}
		l.mu.Unlock()
		if derr != nil {
			reply(api.ErrorReply(req.ID, derr))
			return
		}
		reply(api.ErrorReply(req.ID, &api.Error{Code: code,
			Message: fmt.Sprintf("the supervisor serves %d agents at once; retry later, backing off", l.opt.MaxAgents)}))
		return
	}
	ln.used = now
	// One fewer on its way from the door; once it is queued or answered,
	// the door may let the next one through.
	l.arrivedLocked(ln, now)
	defer func() {
		l.roomLocked(ln)
		l.mu.Unlock()
	}()
	if derr != nil {
		l.answerLocked(ln, item{req: req, reply: reply, answered: ptr(api.ErrorReply(req.ID, derr))})
		return
	}
	if rep, k := ln.cache.lookup(req); k != unseen {
		l.countSeenLocked(ln, req, k)
		l.answerLocked(ln, item{req: req, reply: reply, answered: &rep})
		return
	}
	if first, ok := ln.pending[key(req)]; ok {
		// The first is still queued: the replay is answered from the
		// cache once the first has been served, in order.
		if first == req {
			l.stats.Replayed++
			l.answerLocked(ln, item{req: req, reply: reply, replay: true})
		} else {
			l.tally[tallyKey{agent: ln.agent, op: string(req.Op), code: codeDuplicateID}]++
			l.answerLocked(ln, item{req: req, reply: reply, answered: ptr(api.ErrorReply(req.ID, &api.Error{Code: codeDuplicateID,
				Message: "id " + req.ID + " is already used by a queued " + string(first.Op) + " request; use a new id for every request"}))})
		}
		return
	}
	// Every request spends a token, refused or not: the bucket bounds what
	// an agent costs the supervisor, and a refusal costs too.
	ln.refillLocked(now, l.opt.Rate, float64(l.opt.Burst))
	switch {
	case ln.tokens < 1:
		l.stats.RateLimited++
		l.refuseLocked(ln, req, reply, api.CodeRateLimited,
			fmt.Sprintf("agent %s is over its rate of %g requests/s (burst %d); slow down", agent, l.opt.Rate, l.opt.Burst))
	case ln.work >= l.opt.QueueLen:
		ln.tokens--
		l.stats.Busy++
		l.refuseLocked(ln, req, reply, api.CodeBusy,
			fmt.Sprintf("agent %s has %d requests waiting; wait for their replies", agent, ln.work))
	default:
		ln.tokens--
		ln.q = append(ln.q, item{req: req, received: received, reply: reply})
		ln.work++
		ln.pending[key(req)] = req
		l.startLocked(ln)
	}
}

// Shed reports whether agent's next request may be refused before it is
// even decoded: the agent is over its rate and so many of its refusals
// are waiting to be sent that this one's reply would be dropped anyway.
// The refusal is counted (RATE_LIMITED, a reply dropped). It is for
// transports that know the agent before decoding (an MQTT topic per
// agent): under a flood, decoding is most of what a refused request costs,
// and nothing is lost by skipping it. A request that may be a halt must
// never be shed: the caller decides that. An agent without a lane is never
// shed (its lane, or the cap on agents, decides).
func (l *Lanes) Shed(agent string) bool {
	now := l.opt.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	ln := l.lanes[agent]
	if ln == nil {
		return false
	}
	ln.refillLocked(now, l.opt.Rate, float64(l.opt.Burst))
	if ln.tokens >= 1 || len(ln.q)-ln.work < l.opt.QueueLen {
		return false
	}
	ln.used = now
	l.arrivedLocked(ln, now)
	l.roomLocked(ln)
	l.stats.RateLimited++
	l.stats.RepliesDropped++
	l.tally[tallyKey{agent: agent, op: "", code: api.CodeRateLimited}]++
	return true
}

// DoorTransit bounds how long a request the door let through (Enter) is
// counted as on its way to its lane. One that has not arrived by then was
// lost on the way (a broker's full queue, a connection that went down, a
// retained or malformed publish the transport ignores) or is so late that
// the lane refuses what it cannot take; either way the door stops counting
// it rather than hold the agent for it.
const DoorTransit = time.Second

// Enter is the door in front of agent's lane, for a broker that reads each
// client's packets on a goroutine of its own (the embedded broker's
// SetDoor): it is asked before a request from agent is let through. It
// returns nil when the lane has room for one more — its waiting requests
// and those let through that have not reached it yet (DoorTransit) fewer
// than QueueLen — and then counts the request as on its way. Otherwise it
// returns a channel closed when that may have changed: the broker holds
// the request, unread packets behind it wait in the agent's socket, and
// the flood costs nothing until the lane can serve it. With hold false it
// only counts (an agent whose lease is running out: see the supervisor's
// Enter). An agent without a lane is never held: its first requests make
// one. Halts must never be asked about: the caller lets them through.
func (l *Lanes) Enter(agent string, hold bool) <-chan struct{} {
	now := l.opt.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	ln := l.lanes[agent]
	if l.closed || ln == nil {
		return nil
	}
	if ln.transit > 0 && now.Sub(ln.transitAt) > DoorTransit {
		ln.transit = 0
	}
	if hold && ln.work+ln.transit >= l.opt.QueueLen {
		if ln.room == nil {
			ln.room = make(chan struct{})
		}
		l.stats.Held++
		return ln.room
	}
	ln.transit++
	ln.transitAt = now
	return nil
}

// arrivedLocked notes that a request from ln's agent reached the lanes:
// one fewer on its way from the door. The caller opens the door
// (roomLocked) once the request is queued or answered.
func (l *Lanes) arrivedLocked(ln *lane, now time.Time) {
	if ln.transit > 0 {
		ln.transit--
		ln.transitAt = now
	}
}

// roomLocked opens the door for a request held while ln was full, if it
// has room now.
func (l *Lanes) roomLocked(ln *lane) {
	if ln.room != nil && ln.work+ln.transit < l.opt.QueueLen {
		close(ln.room)
		ln.room = nil
	}
}

func ptr(r api.Reply) *api.Reply { return &r }

func (l *Lanes) countSeenLocked(ln *lane, req api.Request, k seen) {
	if k == replayed {
		l.stats.Replayed++
		return
	}
	l.tally[tallyKey{agent: ln.agent, op: string(req.Op), code: codeDuplicateID}]++
}

// Count adds a refusal decided elsewhere to the tally reported through
// Refusals: for a request served at once (a heartbeat) on a goroutine that
// must not wait on the journal.
func (l *Lanes) Count(agent string, op api.Op, code string) {
	l.mu.Lock()
	l.tally[tallyKey{agent: agent, op: string(op), code: code}]++
	l.mu.Unlock()
}

// CountJournalOnly adds to the tally a refusal the caller has answered and
// counted in its metrics but leaves to the aggregate to journal: an agent
// refused so often that journaling each refusal would let it fill the
// disk. Its Tally has JournalOnly set.
func (l *Lanes) CountJournalOnly(agent string, op api.Op, code string) {
	l.mu.Lock()
	l.tally[tallyKey{agent, string(op), code, true}]++
	l.mu.Unlock()
}

// refuseLocked tallies a lane refusal and queues its reply behind the
// agent's earlier ones.
func (l *Lanes) refuseLocked(ln *lane, req api.Request, reply func(api.Reply), code, msg string) {
	l.tally[tallyKey{agent: ln.agent, op: string(req.Op), code: code}]++
	l.answerLocked(ln, item{req: req, reply: reply, answered: ptr(api.ErrorReply(req.ID, &api.Error{Code: code, Message: msg}))})
}

// answerLocked queues a decided reply. With nothing queued before it, it is
// still sent from the lane's goroutine, never from the caller's: a reply
// may wait on the transport. Decided replies are bounded too (QueueLen on
// top of the requests): past that the agent is flooding faster than its
// replies can leave, and the reply is dropped and counted.
func (l *Lanes) answerLocked(ln *lane, it item) {
	if len(ln.q)-ln.work >= l.opt.QueueLen {
		l.stats.RepliesDropped++
		return
	}
	ln.q = append(ln.q, it)
	l.startLocked(ln)
}

func (l *Lanes) startLocked(ln *lane) {
	if ln.running {
		return
	}
	ln.running = true
	l.workers.Add(1)
	go l.serve(ln)
}

// laneLocked finds or makes agent's lane; nil when MaxAgents lanes exist
// and none has been idle for IdleAfter.
func (l *Lanes) laneLocked(agent string, now time.Time) *lane {
	if ln := l.lanes[agent]; ln != nil {
		return ln
	}
	if len(l.lanes) >= l.opt.MaxAgents {
		var oldest *lane
		for _, ln := range l.lanes {
			if ln.running || len(ln.q) > 0 || now.Sub(ln.used) < l.opt.IdleAfter {
				continue
			}
			if oldest == nil || ln.used.Before(oldest.used) {
				oldest = ln
			}
		}
		if oldest == nil {
			return nil
		}
		if oldest.room != nil {
			close(oldest.room)
		}
		delete(l.lanes, oldest.agent)
	}
	ln := &lane{agent: agent, tokens: float64(l.opt.Burst), refill: now, used: now, cache: newReplyCache(l.opt.ReplyCache),
		pending: map[string]api.Request{}}
	l.lanes[agent] = ln
	return ln
}

func (ln *lane) refillLocked(now time.Time, rate, burst float64) {
	if dt := now.Sub(ln.refill); dt > 0 {
		ln.tokens = min(burst, ln.tokens+dt.Seconds()*rate)
		ln.refill = now
	}
}

// serve is a lane's goroutine: it answers the agent's queue in order and
// ends when the queue is empty.
func (l *Lanes) serve(ln *lane) {
	defer l.workers.Done()
	for {
		l.mu.Lock()
		if len(ln.q) == 0 {
			ln.running = false
			ln.q = nil // let a drained burst's backing array go
			l.mu.Unlock()
			return
		}
		it := ln.q[0]
		ln.q[0] = item{}
		ln.q = ln.q[1:]
		if it.replay {
			rep, _ := ln.cache.lookup(it.req)
			it.answered = &rep
		}
		if it.answered == nil {
			ln.work--
			l.stats.Served++
			l.roomLocked(ln)
		}
		l.mu.Unlock()

		if it.answered != nil {
			it.reply(*it.answered)
			continue
		}
		rep := l.h.Handle(it.req, it.received)
		l.mu.Lock()
		ln.cache.store(it.req, rep)
		delete(ln.pending, key(it.req))
		l.mu.Unlock()
		it.reply(rep)
	}
}

// report hands the tallied refusals to the Handler every TallyEvery.
func (l *Lanes) report() {
	defer l.ticker.Done()
	t := time.NewTicker(l.opt.TallyEvery)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			l.Flush()
			return
		case <-t.C:
			l.Flush()
		}
	}
}

// Flush reports the refusals tallied so far now, rather than at the next
// TallyEvery.
func (l *Lanes) Flush() {
	l.mu.Lock()
	if len(l.tally) == 0 {
		l.mu.Unlock()
		return
	}
	ts := make([]Tally, 0, len(l.tally))
	for k, n := range l.tally {
		ts = append(ts, Tally{Agent: k.agent, Op: api.Op(k.op), Code: k.code, Count: n, JournalOnly: k.journalOnly})
	}
	clear(l.tally)
	l.mu.Unlock()
	sort.Slice(ts, func(i, j int) bool {
		if ts[i].Agent != ts[j].Agent {
			return ts[i].Agent < ts[j].Agent
		}
		if ts[i].Op != ts[j].Op {
			return ts[i].Op < ts[j].Op
		}
		if ts[i].Code != ts[j].Code {
			return ts[i].Code < ts[j].Code
		}
		return !ts[i].JournalOnly && ts[j].JournalOnly
	})
	l.h.Refusals(ts)
}

// Stats returns the counters.
func (l *Lanes) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	s.Lanes = len(l.lanes)
	for _, ln := range l.lanes {
		s.InFlight += ln.work
		if ln.running {
			s.InFlight++
		}
	}
	return s
}

// Close refuses new requests (SHUTTING_DOWN; a halt still halts), waits for
// every lane to finish what it has queued, and reports the last tally.
func (l *Lanes) Close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	for _, ln := range l.lanes {
		if ln.room != nil {
			close(ln.room) // nothing is held at a closed door
			ln.room = nil
		}
	}
	l.mu.Unlock()
	l.workers.Wait()
	close(l.stop)
	l.ticker.Wait()
}
