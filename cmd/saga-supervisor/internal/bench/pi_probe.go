package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/internal/latency"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// piProbe is bench pi's agents on one daemon: paho clients in the bench's
// process, outside the daemon's cgroup, each logged in as itself.
type piProbe struct {
	d      *piDaemon
	opt    piOptions
	halter *agent
	flood  *agent
	step   *agent
	other  *agent
	expiry *agent
	sw     *statusWatch
	events chan piEvent
	closed bool
}

// piEvent is a rollback event as it arrived.
type piEvent struct {
	saga uint64
	at   time.Time
}

func (p *piProbe) connect() (err error) {
	for _, c := range []struct {
		a    **agent
		name string
	}{{&p.halter, piHalter}, {&p.flood, piFlood}, {&p.step, piStepper}, {&p.other, piOther}, {&p.expiry, piExpiry}} {
		if *c.a, err = p.d.agent(c.name); err != nil {
			return err
		}
	}
	if p.sw, err = watchStatus(p.halter); err != nil {
		return err
	}
	p.events = make(chan piEvent, 256)
	return subscribe(p.expiry.c, p.d.topics.Events(), func(_ paho.Client, m paho.Message) {
		at := time.Now()
		var ev api.Event
		if json.Unmarshal(m.Payload(), &ev) != nil || ev.Kind != api.EventRollback || ev.Report == nil {
			return
		}
		select {
		case p.events <- piEvent{saga: ev.Report.Saga, at: at}:
		default:
		}
	})
}

func (p *piProbe) close() {
	if p.closed {
		return
	}
	p.closed = true
	for _, a := range []*agent{p.halter, p.flood, p.step, p.other, p.expiry} {
		if a != nil {
			a.close()
		}
	}
}

// steps times durable steps one at a time, each waiting for its reply.
func (p *piProbe) steps(ctx context.Context) (PiRow, error) {
	a := p.step
	if err := a.hello(leaseTTL); err != nil {
		return PiRow{}, err
	}
	saga, err := a.begin()
	if err != nil {
		return PiRow{}, err
	}
	var s latency.Samples
	for i := range p.opt.steps + 5 {
		if err := ctx.Err(); err != nil {
			return PiRow{}, err
		}
		rep, took, err := a.call(api.Request{Op: api.OpStep, Saga: saga, Actuator: piStepper, Value: float64(10 + 10*(i%2))})
		if err != nil {
			return PiRow{}, err
		}
		if !rep.OK {
			return PiRow{}, fmt.Errorf("step refused: %s %s", rep.Code, rep.Message)
		}
		if i >= 5 { // the first take the actuator and warm the path
			s = append(s, took)
		}
	}
	if _, err := a.must(api.Request{Op: api.OpCommit, Saga: saga}); err != nil {
		return PiRow{}, err
	}
	return piRowOf(s), nil
}

// piHaltSample is one halt: published on topic at t0, its reply after
// reply (lost: none within piHaltTimeout).
type piHaltSample struct {
	topic  string
	reason string
	t0     time.Time
	reply  time.Duration
	lost   bool
	served int // flood steps answered OK
	sent   int
	codes  map[string]int // the flood's replies by code
}

type piHaltLog []piHaltSample

// summary matches topic's halts with their HALT records.
func (l piHaltLog) summary(topic string, recs *piRecords) PiHalts {
	var h PiHalts
	var reply, latched latency.Samples
	n := 0
	for _, s := range l {
		if s.topic != topic {
			continue
		}
		n++
		reply = append(reply, s.reply)
		if s.lost {
			h.Lost++
		}
		h.FloodServed += s.served
		h.FloodSent += s.sent
		for c, k := range s.codes {
			if h.FloodReplies == nil {
				h.FloodReplies = map[string]int{}
			}
			h.FloodReplies[c] += k
		}
		if at, ok := recs.halts[s.reason]; ok {
			latched = append(latched, at.Sub(s.t0))
		} else {
			h.Unrecorded++
			latched = append(latched, piHaltTimeout)
		}
	}
	h.Reply, h.Latched = piRowOf(reply), piRowOf(latched)
	if n > 0 {
		h.FloodServed /= n
		h.FloodSent /= n
	}
	return h
}

// halts times opt.halts halts on each topic, alternating, each under a
// flood of opt.floodSteps steps that another agent pipelines and halted
// when half of them are sent, while a third agent keeps a short lease
// alive. Each halt is reset afterwards (over HTTP, with the token) and
// the status seen ready again.
func (p *piProbe) halts(ctx context.Context, prog func(string)) (piHaltLog, PiOther, error) {
	var other PiOther
	if err := p.flood.hello(leaseTTL); err != nil {
		return nil, other, err
	}
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- p.bystander(stop, &other) }()
	var log piHaltLog
	var err error
	for i := range 2 * p.opt.halts {
		if err = ctx.Err(); err != nil {
			break
		}
		// c e e c c e …: each topic goes first in half of the pairs.
		topic := "cmd"
		if (i%2 == 1) != ((i/2)%2 == 1) {
			topic = "estop"
		}
		var s piHaltSample
		if s, err = p.haltUnderFlood(i, topic); err != nil {
			break
		}
		log = append(log, s)
	}
	close(stop)
	if berr := <-done; err == nil {
		err = berr
	}
	return log, other, err
}

// bystander keeps agent other's lease of piOtherTTL alive with a
// heartbeat every quarter of it until stop, counting heartbeats refused
// because the lease had ended (it then takes a new one).
func (p *piProbe) bystander(stop <-chan struct{}, o *PiOther) error {
	a := p.other
	if err := a.hello(piOtherTTL); err != nil {
		return err
	}
	tick := time.NewTicker(piOtherTTL / 4)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			_, _, err := a.call(api.Request{Op: api.OpBye})
			return err
		case <-tick.C:
		}
		rep, took, err := a.call(api.Request{Op: api.OpHeartbeat})
		if err != nil {
			return fmt.Errorf("bystander: %w", err)
		}
		o.Heartbeats++
		o.MaxRTT = max(o.MaxRTT, int64(took))
		if !rep.OK {
			o.Expired++
			if err := a.hello(piOtherTTL); err != nil {
				return fmt.Errorf("bystander: %w", err)
			}
		}
	}
}

// ensureReady resets the supervisor if it is not ready (a halt that
// latched after the last reset), and waits for it to say so.
func (p *piProbe) ensureReady() error {
	resp, err := http.Get("http://" + p.d.http + "/readyz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	return p.resetAndWait()
}

func (p *piProbe) resetAndWait() error {
	p.sw.drain()
	if err := p.d.reset(); err != nil {
		return err
	}
	_, err := p.sw.await(replyTimeout, func(st api.Status) bool { return st.State == api.StateOnline && st.Ready && !st.Halted })
	return err
}

// floodTemplate returns a builder of the flood's step requests in saga:
// assembled around id and value, checked once against the API's decoder.
func (p *piProbe) floodTemplate(saga uint64) (func(buf []byte, id uint64, v int) []byte, error) {
	a := p.flood
	lease, _ := json.Marshal(a.lease)
	head := `{"agent":"` + a.name + `","op":"step","lease":` + string(lease) + `,"epoch":` + strconv.FormatUint(a.epoch, 10) +
		`,"saga":` + strconv.FormatUint(saga, 10) + `,"actuator":"` + piFlood + `","id":"`
	build := func(buf []byte, id uint64, v int) []byte {
		buf = append(buf[:0], head...)
		buf = append(buf, a.name...)
		buf = append(buf, "-p"...)
		buf = strconv.AppendUint(buf, a.inst, 10)
		buf = append(buf, '-')
		buf = strconv.AppendUint(buf, id, 10)
		buf = append(buf, `","value":`...)
		buf = strconv.AppendInt(buf, int64(v), 10)
		return append(buf, '}')
	}
	probe := build(nil, 0, 10)
	if req, derr := api.DecodeRequest(probe, 0); derr != nil || req.Saga != saga || req.Value != 10 {
		return nil, fmt.Errorf("flood: the request template %s does not decode as meant: %v", probe, derr)
	}
	return build, nil
}

// haltUnderFlood is one sample: the flood pipelines its steps, at most
// piFloodWindow awaiting PUBACK, and when half are out the halter
// publishes its halt on topic; the flood goes on to the end.
func (p *piProbe) haltUnderFlood(i int, topic string) (s piHaltSample, err error) {
	s.topic = topic
	if err := p.ensureReady(); err != nil {
		return s, err
	}
	fa := p.flood
	if rep, err := callPatiently(fa, api.Request{Op: api.OpHeartbeat}); err != nil {
		return s, err
	} else if !rep.OK {
		return s, fmt.Errorf("flood: heartbeat refused: %s %s", rep.Code, rep.Message)
	}
	saga, err := fa.begin()
	if err != nil {
		return s, err
	}
	build, err := p.floodTemplate(saga)
	if err != nil {
		return s, err
	}
	var served atomic.Int64
	var last atomic.Int64
	var codesMu sync.Mutex
	codes := map[string]int{}
	last.Store(time.Now().UnixNano())
	fa.mu.Lock()
	fa.other = func(rep api.Reply, at time.Time) {
		code := rep.Code
		if rep.OK {
			served.Add(1)
			code = "OK"
		}
		codesMu.Lock()
		codes[code]++
		codesMu.Unlock()
		last.Store(at.UnixNano())
	}
	fa.mu.Unlock()

	h := p.halter
	id := h.nextID("halt")
	s.reason = fmt.Sprintf("pi halt %s %d %s", topic, i, id)
	b, err := h.request(api.Request{ID: id, Op: api.OpHalt, Reason: s.reason})
	if err != nil {
		return s, err
	}
	where := p.d.topics.EstopAgent(h.name)
	if topic == "cmd" {
		where = p.d.topics.AgentCmd(h.name)
	}
	type result struct {
		rep    api.Reply
		t0, at time.Time
		err    error
	}
	halted := make(chan result, 1)
	cmdTopic := p.d.topics.AgentCmd(fa.name)
	toks := make([]paho.Token, piFloodWindow)
	for n := 0; n < p.opt.floodSteps; n++ {
		if n == p.opt.floodSteps/2 {
			go func() {
				rep, t0, at, err := h.sendAt(where, id, b, piHaltTimeout)
				halted <- result{rep, t0, at, err}
			}()
		}
		slot := n % piFloodWindow
		if t := toks[slot]; t != nil {
			if !t.WaitTimeout(replyTimeout) || t.Error() != nil {
				return s, fmt.Errorf("flood: a publish was not acknowledged within %v (%v)", replyTimeout, t.Error())
			}
		}
		v := fa.seq.Add(1)
		toks[slot] = fa.c.Publish(cmdTopic, 1, false, build(nil, v, 10+10*int(v%2)))
		s.sent++
	}
	for _, t := range toks {
		if t != nil && (!t.WaitTimeout(replyTimeout) || t.Error() != nil) {
			return s, fmt.Errorf("flood: a publish was not acknowledged within %v (%v)", replyTimeout, t.Error())
		}
	}
	r := <-halted
	s.t0 = r.t0
	switch {
	case errors.Is(r.err, errNoAnswer):
		s.lost, s.reply = true, piHaltTimeout
	case r.err != nil:
		return s, r.err
	case !r.rep.OK:
		return s, fmt.Errorf("halt refused: %s %s", r.rep.Code, r.rep.Message)
	default:
		s.reply = r.at.Sub(r.t0)
	}
	// Drained: no reply to the flood for a while.
	for t := time.Now(); time.Since(t) < replyTimeout; time.Sleep(10 * time.Millisecond) {
		if time.Since(time.Unix(0, last.Load())) >= piFloodQuiet {
			break
		}
	}
	fa.mu.Lock()
	fa.other = nil
	fa.mu.Unlock()
	s.served = int(served.Load())
	codesMu.Lock() // a reply may still be in the handler
	s.codes = maps.Clone(codes)
	codesMu.Unlock()
	if s.lost {
		time.Sleep(time.Second) // a halt only queued has arrived by now
	}
	// The halt ended the flood's saga; a lost one did not.
	if err := commitFlood(fa, saga); err != nil {
		return s, err
	}
	return s, p.resetAndWait()
}

// commitFlood commits the flood's saga unless a halt ended it.
func commitFlood(fa *agent, saga uint64) error {
	rep, err := callPatiently(fa, api.Request{Op: api.OpCommit, Saga: saga})
	if err != nil {
		return err
	}
	if !rep.OK && rep.Code != string(rollback.CodeSagaUnknown) && rep.Code != string(rollback.CodeHalted) {
		return fmt.Errorf("flood: commit of saga %d refused: %s %s", saga, rep.Code, rep.Message)
	}
	return nil
}

// callPatiently sends req, again with a new id each second without an
// answer, or soon after a BUSY or RATE_LIMITED one, for up to replyTimeout:
// after a flood the supervisor may still be working through the agent's
// backlog at the broker, and sheds (answers nothing to) its requests while
// the agent is over its rate, or refuses them while its queue is full.
func callPatiently(a *agent, req api.Request) (api.Reply, error) {
	deadline := time.Now().Add(replyTimeout)
	for {
		req.ID = a.nextID(string(req.Op))
		b, err := a.request(req)
		if err != nil {
			return api.Reply{}, err
		}
		wait := min(time.Second, time.Until(deadline))
		rep, _, _, err := a.sendAt(a.topics.AgentCmd(a.name), req.ID, b, wait)
		if err == nil && !rep.OK && (rep.Code == api.CodeBusy || rep.Code == api.CodeRateLimited) && time.Now().Before(deadline) {
			// The agent's queue is still full of the flood (or it is over
			// its rate): nothing was served; resend, as the code says.
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err == nil {
			return rep, nil
		}
		if !errors.Is(err, errNoAnswer) || time.Now().After(deadline) {
			return rep, err
		}
	}
}

// piExpirySample is one lease expiry: saga was open on the servo when the
// last heartbeat was published; the lease ends at deadline.
type piExpirySample struct {
	saga     uint64
	deadline time.Time
	event    time.Duration // the rollback event's arrival, past deadline
}

// piExpiryLog is one condition's expiries, the expiring agent's round
// trips, and how often its lease lapsed before its heartbeat.
type piExpiryLog struct {
	samples []piExpirySample
	rtts    latency.Samples
	lapsed  int
}

func (l piExpiryLog) summary(recs *piRecords) PiExpiry {
	var done, abort latency.Samples
	for _, s := range l.samples {
		r := recs.unwinds[s.saga]
		if r.done.IsZero() || r.abort.IsZero() {
			done, abort = append(done, piHaltTimeout), append(abort, piHaltTimeout)
			continue
		}
		done, abort = append(done, r.done.Sub(s.deadline)), append(abort, r.abort.Sub(s.deadline))
	}
	return PiExpiry{Late: piRowOf(done), Abort: piRowOf(abort), RTT: piRowOf(l.rtts), Lapsed: l.lapsed}
}

// expiries lets opt.expiries leases expire: hello with piExpiryTTL, a step
// of the servo from 0 to 10, one heartbeat, silence — quiet, or while the
// flood agent floods steps as fast as its client goes. Under the flood the
// agent's own round trips can be so slow that its lease ends before its
// heartbeat: such a try is counted (lapsed) and made again.
func (p *piProbe) expiries(ctx context.Context, flooded bool) (log piExpiryLog, err error) {
	if flooded {
		if err := p.ensureReady(); err != nil {
			return log, err
		}
		f := newFlood(p.flood, piFlood, 0, func() uint64 { return 0 })
		if err := f.start(); err != nil {
			return log, err
		}
		defer func() {
			f.stop()
			if cerr := commitFlood(p.flood, f.saga); cerr != nil && err == nil {
				err = cerr
			}
			f.saga = 0
		}()
	}
	a := p.expiry
	for tries := 0; len(log.samples) < p.opt.expiries; tries++ {
		if err := ctx.Err(); err != nil {
			return log, err
		}
		if tries >= 5*p.opt.expiries {
			return log, fmt.Errorf("%d tries for %d lease expiries: the agent's lease of %v lapsed before its heartbeat %d times",
				tries, p.opt.expiries, piExpiryTTL, log.lapsed)
		}
		// Each round trip is timed: it is another agent's, beside the flood.
		call := func(req api.Request) (api.Reply, error) {
			rep, took, err := a.call(req)
			log.rtts = append(log.rtts, took)
			// A lease that ended under the agent's feet: LEASE_*, or its saga
			// unwound by the expiry (SAGA_UNKNOWN).
			lapsed := strings.HasPrefix(rep.Code, "LEASE_") || rep.Code == string(rollback.CodeSagaUnknown)
			if err == nil && !rep.OK && !lapsed {
				err = fmt.Errorf("%s refused: %s %s", req.Op, rep.Code, rep.Message)
			}
			return rep, err
		}
		rep, err := call(api.Request{Op: api.OpHello, TTLMS: piExpiryTTL.Milliseconds()})
		if err != nil {
			return log, err
		}
		a.lease, a.epoch = rep.Lease, rep.Epoch
		if rep, err = call(api.Request{Op: api.OpBegin}); err != nil {
			return log, err
		}
		saga := rep.Saga
		if rep.OK {
			rep, err = call(api.Request{Op: api.OpStep, Saga: saga, Actuator: piExpiry, Value: 10})
			if err != nil {
				return log, err
			}
		}
		for len(p.events) > 0 {
			<-p.events
		}
		var t0 time.Time
		if rep.OK {
			id := a.nextID("heartbeat")
			b, err := a.request(api.Request{ID: id, Op: api.OpHeartbeat})
			if err != nil {
				return log, err
			}
			var at time.Time
			if rep, t0, at, err = a.sendAt(p.d.topics.AgentCmd(a.name), id, b, replyTimeout); err != nil {
				return log, err
			}
			log.rtts = append(log.rtts, at.Sub(t0))
		}
		if !rep.OK {
			log.lapsed++ // the lease ended before the heartbeat
			continue
		}
		s := piExpirySample{saga: saga, deadline: t0.Add(piExpiryTTL)}
		timeout := time.After(piExpiryTTL + replyTimeout)
	wait:
		for {
			select {
			case ev := <-p.events:
				if ev.saga == saga {
					s.event = ev.at.Sub(s.deadline)
					break wait
				}
			case <-timeout:
				return log, fmt.Errorf("no rollback event for saga %d within %v of its lease's TTL", saga, replyTimeout)
			}
		}
		log.samples = append(log.samples, s)
	}
	return log, nil
}

// piRecords is what bench pi reads back from a daemon's journal: when
// each halt was journaled (by its reason) and each saga's unwind began
// and put its first step back.
type piRecords struct {
	halts   map[string]time.Time
	unwinds map[uint64]piUnwind
}

type piUnwind struct{ abort, done time.Time }

// scanJournal reads the journal in dir (its daemon stopped).
func scanJournal(dir string) (*piRecords, error) {
	r := &piRecords{halts: map[string]time.Time{}, unwinds: map[uint64]piUnwind{}}
	err := wal.Scan(dir, wal.Options{}, 1, func(w wal.Record) error {
		switch rollback.RecordType(w.Type) {
		case rollback.RecHalt, rollback.RecAbort, rollback.RecCompDone:
		default:
			return nil
		}
		rec, err := rollback.DecodeRecord(w.Type, w.Payload)
		if err != nil {
			return err
		}
		at := time.Unix(0, rec.UnixNano)
		switch rec.Type {
		case rollback.RecHalt:
			// "agent halter: pi halt …": keyed by the reason the bench gave.
			if i := strings.Index(rec.Message, "pi halt "); i >= 0 {
				if _, seen := r.halts[rec.Message[i:]]; !seen {
					r.halts[rec.Message[i:]] = at
				}
			}
		case rollback.RecAbort:
			u := r.unwinds[rec.Saga]
			if u.abort.IsZero() {
				u.abort = at
			}
			r.unwinds[rec.Saga] = u
		case rollback.RecCompDone:
			u := r.unwinds[rec.Saga]
			if u.done.IsZero() {
				u.done = at
			}
			r.unwinds[rec.Saga] = u
		}
		return nil
	})
	return r, err
}
