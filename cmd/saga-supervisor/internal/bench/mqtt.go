package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/internal/latency"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/ingress"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// bench mqtt measures the front door: what MQTT and the supervisor's
// lanes add to a durable step, how soon a halt is latched while another
// agent floods, and how many durable steps 64 agents get through. Every
// figure is measured beside its baseline in the same run — the bare broker
// round trip, the engine's own step on the same disk, the quiet halt —
// because on a shared machine absolute times drift between runs.
//
// The supervisor runs in this process, started by daemon.Start as `run`
// starts it, so broker, supervisor and agents share the machine's cores
// (with an external broker, the broker has its own process).

// Goals the issue set for the front door; the bench reports whether this
// run met them and never fails on them.
const (
	goalOverheadP50 = 150 * time.Microsecond // step − echo − local step, p50
	goalOverheadP99 = time.Millisecond       // and p99
	goalHaltP99     = 10 * time.Millisecond  // halt under flood, p99
)

const (
	rttWarmup   = 50                    // untimed samples of each kind first
	sagaRoll    = 10_000                // steps a bench saga carries before it is committed and another begun
	leaseTTL    = 60 * time.Second      // the longest lease the configuration allows
	floodWindow = 256                   // the flood's publishes awaiting PUBACK at most
	drainQuiet  = 30 * time.Millisecond // no flood reply this long: its lane has drained
	refusedNear = 20 * time.Millisecond // a lane refusal this close before a halt: the flood was being refused
	// haltTimeout is how long a halt's reply is waited for before the
	// halt is counted lost: five hundred times the goal.
	haltTimeout = 5 * time.Second
)

// frontDoorOptions are the flags of bench mqtt.
type frontDoorOptions struct {
	broker     string        // an external broker's URL; "" the embedded broker
	n          int           // round-trip samples of each kind
	halts      int           // halt samples of each condition
	expiries   int           // lease expiries of each condition
	slowFsync  time.Duration // the fsync delay of the slow-disk expiries; 0 none
	agents     int           // agents of the throughput measurement
	agentsTime time.Duration // length of each throughput round
	floodRate  float64       // the flood's offered requests/s; 0 as fast as the client takes them
	haltTopic  string        // "estop" (estop/<agent>) or "cmd" (cmd/<agent>)
}

// fdRow is one latency measurement of the front door. Ratios are to the
// reference row of its table at the same percentile (echo for round trips,
// the quiet halt for halts); nil where there is none.
type fdRow struct {
	Name    string   `json:"name"`
	Samples int      `json:"samples"`
	P50     int64    `json:"p50_ns"`
	P99     int64    `json:"p99_ns"`
	Max     int64    `json:"max_ns"`
	P50xRef *float64 `json:"p50_x_ref,omitempty"`
	P99xRef *float64 `json:"p99_x_ref,omitempty"`
	Note    string   `json:"note,omitempty"`
}

// fdOverhead is step − echo − local step, percentile by percentile (a
// difference of percentiles, not a percentile of differences).
type fdOverhead struct {
	P50     int64 `json:"p50_ns"`
	P99     int64 `json:"p99_ns"`
	GoalP50 int64 `json:"goal_p50_ns"`
	GoalP99 int64 `json:"goal_p99_ns"`
	MetP50  bool  `json:"met_p50"`
	MetP99  bool  `json:"met_p99"`
}

// fdFlood is what the flooding agent did and what came back.
type fdFlood struct {
	OfferedPerSec  float64           `json:"offered_per_s"` // 0: as fast as the client takes them
	Sent           uint64            `json:"sent"`
	PumpNs         int64             `json:"pump_ns"` // time spent flooding, summed over the flood samples
	AchievedPerSec float64           `json:"achieved_per_s"`
	ServedPerSec   float64           `json:"served_per_s"` // steps answered OK per second of flooding
	Replies        map[string]uint64 `json:"replies"`      // by code; "OK" for served steps
	NoReply        uint64            `json:"no_reply"`     // sent, never answered
	BadReplies     uint64            `json:"bad_replies"`  // not JSON
	// Counted by the supervisor (its refusal metrics, all agents: only the
	// flood is ever over its limits) and its transport.
	SupRateLimited   float64 `json:"supervisor_rate_limited"`
	SupBusy          float64 `json:"supervisor_busy"`
	TransportDropped uint64  `json:"transport_dropped"`
	// RefusalsUnsent is the lane refusals the supervisor counted that never
	// reached the flood; Unaccounted what is left of NoReply after them —
	// requests or replies lost elsewhere (the broker, the transport).
	RefusalsUnsent int64 `json:"refusals_unsent"`
	Unaccounted    int64 `json:"unaccounted"`
	// Samples is the number of halts sent during the flood; RefusedAtHalt
	// how many of them had a lane refusal (RATE_LIMITED or BUSY) reach the
	// flood within 20 ms before the halt was published.
	Samples       int     `json:"samples"`
	RefusedAtHalt int     `json:"refused_at_halt"`
	SettleNs      int64   `json:"settle_ns"`
	Err           *string `json:"error,omitempty"`
}

// fdThroughput is one side of the many-agents measurement.
type fdThroughput struct {
	Name           string  `json:"name"`
	Agents         int     `json:"agents"`
	Steps          int     `json:"steps"`
	WallNs         int64   `json:"wall_ns"`
	StepsPerSec    float64 `json:"steps_per_s"`
	P50            int64   `json:"p50_ns"`
	P99            int64   `json:"p99_ns"`
	FsyncsPerStep  float64 `json:"fsyncs_per_step"`
	RecordsPerSync float64 `json:"records_per_fsync"`
}

// FrontDoorResult is everything bench mqtt reports (its JSON).
type FrontDoorResult struct {
	Broker      string            `json:"broker"`
	BrokerKind  string            `json:"broker_kind"`
	Supervisor  string            `json:"supervisor"`
	Dir         string            `json:"dir"`
	Disk        string            `json:"disk,omitempty"`
	Warning     string            `json:"warning,omitempty"`
	Durability  string            `json:"durability"`
	AgentRate   float64           `json:"agent_rate_per_s"`
	AgentBurst  int               `json:"agent_burst"`
	AgentQueue  int               `json:"agent_queue"`
	N           int               `json:"n"`
	Halts       int               `json:"halts"`
	HaltTopic   string            `json:"halt_topic"` // estop (estop/<agent>) or cmd (cmd/<agent>)
	RoundTrips  []fdRow           `json:"round_trips"`
	Overhead    fdOverhead        `json:"overhead"`
	Halt        []fdRow           `json:"halt"`
	HaltGoalP99 int64             `json:"halt_goal_p99_ns"`
	HaltGoalMet bool              `json:"halt_goal_met"`
	Flood       fdFlood           `json:"flood"`
	Throughput  []fdThroughput    `json:"throughput"`
	Expiries    []FrontDoorExpiry `json:"lease_expiries"`
	// Incidents are the warnings the supervisor's transport and the
	// embedded broker logged during the run (a lost connection, a packet
	// refused), counted; none in a clean run.
	Incidents []string `json:"incidents"`
	// StaleHalted counts retained statuses saying halted that arrived
	// after a reset had been seen ready and before the next halt was sent;
	// StaleNotReady begins refused NOT_READY (retried) in such a window.
	StaleHalted   int   `json:"stale_halted_statuses"`
	StaleNotReady int64 `json:"stale_not_ready_begins"`
	// Halts not answered within HaltTimeout, counted in the percentiles as
	// that timeout: HaltsLate reached the supervisor once the flood had
	// stopped, HaltsDropped never did (lost on the way).
	HaltTimeoutNs int64 `json:"halt_timeout_ns"`
	HaltsLate     int   `json:"halts_late"`
	HaltsDropped  int   `json:"halts_dropped"`
	// LargestEvent is the largest event the supervisor published, in bytes
	// (a rollback event carries a saga's whole report), with the steps of
	// its report; MaxPacket the embedded broker's packet limit (0: an
	// external broker's own).
	LargestEvent      int    `json:"largest_event_bytes"`
	LargestEventKind  string `json:"largest_event_kind,omitempty"`
	LargestEventSteps int    `json:"largest_event_steps"`
	MaxPacket         uint32 `json:"broker_max_packet_bytes,omitempty"`
	TookNs            int64  `json:"took_ns"`
}

// measureFrontDoor runs the three front-door measurements against one
// supervisor, its journal under res.Dir.
func measureFrontDoor(ctx context.Context, res *FrontDoorResult, opt frontDoorOptions, prog func(string)) (err error) {
	names := []string{"rtt", "flood", "expiry"}
	for i := range opt.agents {
		names = append(names, agentName(i))
	}
	for i := range expiryBusy {
		names = append(names, busyName(i))
	}
	prog("starting the supervisor")
	d, err := startDoor(res.Dir, opt.broker, names)
	if err != nil {
		return err
	}
	d.haltTopic, res.HaltTopic = opt.haltTopic, opt.haltTopic
	defer func() {
		res.Incidents = append([]string{}, d.incidents()...) // [] rather than null in JSON
		d.pub.mu.Lock()
		res.LargestEvent, res.LargestEventKind, res.LargestEventSteps = d.pub.largest, d.pub.largestKind, d.pub.largestSteps
		d.pub.mu.Unlock()
		res.MaxPacket = d.maxPacket
		if err != nil && len(res.Incidents) > 0 {
			// Say what the transport and the broker saw: a lost
			// connection explains a reply that never came.
			err = fmt.Errorf("%w\nduring the run: %s; largest event %d bytes (%s, %d steps)",
				err, strings.Join(res.Incidents, "; "), res.LargestEvent, res.LargestEventKind, res.LargestEventSteps)
		}
		if cerr := d.close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("stopping the supervisor: %w", cerr))
		}
	}()
	res.Broker = d.url
	res.BrokerKind = "external"
	if d.broker != nil {
		res.BrokerKind = "embedded (mochi-mqtt, in this process), locked: agents log in, the ACL holds"
	}
	res.Supervisor = "in this process, started by daemon.Start as `run` starts it (no HTTP)"
	res.Durability = d.cfg.Journal.Durability.String()
	res.AgentRate, res.AgentBurst, res.AgentQueue = d.cfg.Agents.Rate, d.cfg.Agents.Burst, d.cfg.Agents.Queue

	prog("fsync floor")
	floor, err := latency.Floor(res.Dir, min(res.N, 2000), recordSize)
	if err != nil {
		return fmt.Errorf("fsync floor: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	prog("round trips: echo, heartbeat, step, local step")
	if err := measureRoundTrips(ctx, d, res, floor); err != nil {
		return fmt.Errorf("round trips: %w", err)
	}
	prog("halt latency, quiet and under a flood")
	if err := measureHalts(ctx, d, res, opt); err != nil {
		return fmt.Errorf("halt latency: %w", err)
	}
	prog(fmt.Sprintf("durable steps/s with %d agents", opt.agents))
	if err := measureManyAgents(ctx, d, res, opt); err != nil {
		return fmt.Errorf("%d agents: %w", opt.agents, err)
	}
	if opt.expiries > 0 {
		prog(fmt.Sprintf("%d lease expiries, quiet, busy and on a slow disk", opt.expiries))
		if err := measureExpiries(ctx, d, res, opt.expiries, expiryBusy, opt.slowFsync); err != nil {
			return fmt.Errorf("lease expiries: %w", err)
		}
	}
	return nil
}

// agentName names the i-th agent of the many-agents measurement and
// its actuator.
func agentName(i int) string { return fmt.Sprintf("a%03d", i) }

// fdRowOf summarises samples; ref, when set, gives the ratio columns.
func fdRowOf(name string, s latency.Samples, ref *fdRow, note string) fdRow {
	r := fdRow{Name: name, Samples: len(s), P50: int64(s.Percentile(0.5)), P99: int64(s.Percentile(0.99)),
		Max: int64(s.Percentile(1)), Note: note}
	if ref != nil && ref.P50 > 0 && ref.P99 > 0 {
		p50, p99 := float64(r.P50)/float64(ref.P50), float64(r.P99)/float64(ref.P99)
		r.P50xRef, r.P99xRef = &p50, &p99
	}
	return r
}

// measureRoundTrips times, interleaved sample by sample (the order rotating),
// four round trips: the bare echo through the broker, a heartbeat and a
// durable step through the supervisor, and the engine's own step on a
// journal of its own on the same disk.
func measureRoundTrips(ctx context.Context, d *door, res *FrontDoorResult, floor latency.Samples) (err error) {
	n := res.N
	echoURL, stopEcho, err := d.echoBroker()
	if err != nil {
		return err
	}
	defer stopEcho()
	base := "saga-bench/" + d.topics.Device + "/echo/"
	responder, err := newEcho(echoURL, login{clientID: d.clientPrefix + "-echo"}, base+"req", base+"rep")
	if err != nil {
		return err
	}
	defer responder.close()
	// The echo's requester, a client of its own: it sends what agent rtt
	// sends, and takes the echo's replies.
	er, err := newClient(echoURL, login{clientID: d.clientPrefix + "-echo-req"}, d.topics, "rtt", base+"rep")
	if err != nil {
		return fmt.Errorf("echo requester: %w", err)
	}
	defer er.close()
	a, saga, err := d.sagaAgent("rtt")
	if err != nil {
		return err
	}
	defer a.close()
	sagaSteps := 0
	local, err := newStepper(filepath.Join(res.Dir, "local-step"), rollback.EveryStep, n+rttWarmup+1)
	if err != nil {
		return fmt.Errorf("local engine: %w", err)
	}
	defer func() {
		if cerr := local.commitAndClose(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("local engine: %w", cerr))
		}
	}()

	value := func(i int) float64 { return float64(10 + 10*(i%2)) }
	kinds := []func(i int) (time.Duration, error){
		func(i int) (time.Duration, error) { // echo: a step-shaped payload, so sizes match
			id := a.nextID("echo")
			b, err := a.request(api.Request{ID: id, Op: api.OpStep, Saga: saga, Actuator: "rtt", Value: value(i)})
			if err != nil {
				return 0, err
			}
			_, took, err := er.send(base+"req", id, b)
			return took, err
		},
		func(int) (time.Duration, error) {
			rep, took, err := a.call(api.Request{Op: api.OpHeartbeat})
			if err == nil && !rep.OK {
				err = fmt.Errorf("heartbeat refused: %s %s", rep.Code, rep.Message)
			}
			return took, err
		},
		func(i int) (time.Duration, error) {
			if sagaSteps == sagaRoll { // untimed: a saga's size is not what is measured
				if _, err := a.must(api.Request{Op: api.OpCommit, Saga: saga}); err != nil {
					return 0, err
				}
				if saga, err = a.begin(); err != nil {
					return 0, err
				}
				sagaSteps = 0
			}
			rep, took, err := a.call(api.Request{Op: api.OpStep, Saga: saga, Actuator: "rtt", Value: value(i)})
			if err == nil && !rep.OK {
				err = fmt.Errorf("step refused: %s %s", rep.Code, rep.Message)
			}
			sagaSteps++
			return took, err
		},
		func(i int) (time.Duration, error) {
			id := "l" + strconv.Itoa(i)
			t0 := time.Now()
			err := local.step(id, value(i))
			return time.Since(t0), err
		},
	}
	for i := range rttWarmup {
		for _, k := range kinds {
			if _, err := k(-1 - i); err != nil {
				return fmt.Errorf("warm-up: %w", err)
			}
		}
	}
	samples := make([]latency.Samples, len(kinds))
	for i := range n {
		if err := ctx.Err(); err != nil {
			return err
		}
		for j := range kinds {
			k := (i + j) % len(kinds)
			took, err := kinds[k](i)
			if err != nil {
				return err
			}
			samples[k] = append(samples[k], took)
		}
	}
	if _, err := a.must(api.Request{Op: api.OpCommit, Saga: saga}); err != nil {
		return err
	}

	echoNote := "another paho client republishes"
	if d.broker != nil {
		echoNote += ", on a broker of its own"
	}
	echoRow := fdRowOf("echo (bare broker, QoS 1 both ways)", samples[0], nil, echoNote)
	res.RoundTrips = []fdRow{
		echoRow,
		fdRowOf("heartbeat (lease only, no journal)", samples[1], &echoRow, "served on the transport's goroutine"),
		fdRowOf("step (durable, every-step)", samples[2], &echoRow, "lane, engine, fdatasync'd INTENT, effect"),
		fdRowOf("local engine step (no MQTT)", samples[3], &echoRow, "Engine.Step in this process, same disk"),
		fdRowOf("fsync floor", floor, &echoRow, "pwrite + fdatasync, measured first"),
	}
	o := &res.Overhead
	o.P50 = res.RoundTrips[2].P50 - echoRow.P50 - res.RoundTrips[3].P50
	o.P99 = res.RoundTrips[2].P99 - echoRow.P99 - res.RoundTrips[3].P99
	o.GoalP50, o.GoalP99 = int64(goalOverheadP50), int64(goalOverheadP99)
	o.MetP50, o.MetP99 = o.P50 <= o.GoalP50, o.P99 <= o.GoalP99
	return nil
}

// measureHalts times halts sent by one agent, alternating sample by sample
// between a quiet supervisor and one that another agent floods with steps
// beyond its rate. Each halt is timed from just before its publish to the
// arrival of its reply — sent only after the halt is latched, so an upper
// bound of the latch as an agent can observe it — and to the arrival of
// the retained status saying halted:true, what a watcher sees. Each sample
// is then reset with the operator token, and the status seen ready again,
// so that every sample is a fresh latch.
func measureHalts(ctx context.Context, d *door, res *FrontDoorResult, opt frontDoorOptions) error {
	h, err := d.agent("halter")
	if err != nil {
		return err
	}
	defer h.close()
	sw, err := watchStatus(h)
	if err != nil {
		return err
	}
	fa, err := d.agent("flood")
	if err != nil {
		return err
	}
	defer fa.close()
	if err := fa.hello(leaseTTL); err != nil {
		return err
	}
	fl := newFlood(fa, "flood", opt.floodRate, d.tap.submitted.Load)
	settle := floodSettle(opt.floodRate, d.cfg.Agents.Rate, d.cfg.Agents.Burst)

	rl0, err := d.metric("saga_refusals_total", map[string]string{"code": api.CodeRateLimited}, false)
	if err != nil {
		return err
	}
	busy0, err := d.metric("saga_refusals_total", map[string]string{"code": api.CodeBusy}, false)
	if err != nil {
		return err
	}
	dropped0 := d.daemon.Transport.Dropped()

	var quietLatch, floodLatch, quietReply, floodReply, quietStatus, floodStatus latency.Samples
	refusedAtHalt := 0
	for i := range 2 * res.Halts {
		if err := ctx.Err(); err != nil {
			return err
		}
		// q f f q q f …: each condition goes first in half of the pairs.
		flooding := i%2 == 1
		if (i/2)%2 == 1 {
			flooding = !flooding
		}
		if flooding {
			if err := fl.start(); err != nil {
				return err
			}
			time.Sleep(settle)
		}
		refused := flooding && time.Since(fl.lastRefusal()) < refusedNear
		hs, stale, herr := haltOnce(d, h, sw, i)
		res.StaleHalted += stale
		if flooding {
			fl.stop()
		}
		if herr != nil {
			return herr
		}
		needReset := true
		if hs.lost {
			// The flood has stopped and its backlog drained: a halt that
			// was only queued has reached the supervisor by now, one that
			// was dropped on the way never will.
			time.Sleep(500 * time.Millisecond)
			if at, ok := d.tap.latched(hs.id); ok {
				res.HaltsLate++
				hs.latched = at.Sub(hs.t0) // its true latch, even if its reply never came
			} else {
				res.HaltsDropped++
			}
			needReset, _ = d.daemon.Sup.Engine().Halted()
			if flooding {
				// The halt did not end the flood's saga: close it now,
				// not at the next halt, which would report every step.
				if err := fl.closeSaga(); err != nil {
					return err
				}
			}
		}
		if needReset {
			if err := resetOnce(h, sw, d.token); err != nil {
				return err
			}
		}
		if flooding {
			floodLatch, floodReply, floodStatus = append(floodLatch, hs.latched), append(floodReply, hs.reply), append(floodStatus, hs.status)
			if refused {
				refusedAtHalt++
			}
		} else {
			quietLatch, quietReply, quietStatus = append(quietLatch, hs.latched), append(quietReply, hs.reply), append(quietStatus, hs.status)
		}
	}
	if err := fl.err(); err != nil {
		return fmt.Errorf("flood: %w", err)
	}
	if err := fl.closeSaga(); err != nil {
		return err
	}
	// The lanes report refusals to the metrics once a TallyEvery.
	time.Sleep(ingress.DefaultTallyEvery + 200*time.Millisecond)
	rl1, err := d.metric("saga_refusals_total", map[string]string{"code": api.CodeRateLimited}, false)
	if err != nil {
		return err
	}
	busy1, err := d.metric("saga_refusals_total", map[string]string{"code": api.CodeBusy}, false)
	if err != nil {
		return err
	}

	res.HaltTimeoutNs = int64(haltTimeout)
	res.StaleNotReady = d.staleNotReady.Load()
	qr := fdRowOf("halt reply, quiet", quietReply, nil, "what the halting agent sees")
	qs := fdRowOf("status halted:true, quiet", quietStatus, nil, "what a watcher sees")
	ql := fdRowOf("latched in the supervisor, quiet", quietLatch, nil, "diagnostic: the halt reaching Submit")
	res.Halt = []fdRow{
		qr,
		fdRowOf("halt reply, flood", floodReply, &qr, "what the halting agent sees"),
		qs,
		fdRowOf("status halted:true, flood", floodStatus, &qs, "what a watcher sees"),
		ql,
		fdRowOf("latched in the supervisor, flood", floodLatch, &ql, "diagnostic: the halt reaching Submit"),
	}
	res.HaltGoalP99 = int64(goalHaltP99)
	res.HaltGoalMet = res.Halt[1].P99 <= res.HaltGoalP99
	f := fl.summary()
	f.SupRateLimited, f.SupBusy = rl1-rl0, busy1-busy0
	f.TransportDropped = d.daemon.Transport.Dropped() - dropped0
	f.RefusalsUnsent = int64(f.SupRateLimited+f.SupBusy) - int64(f.Replies[api.CodeRateLimited]+f.Replies[api.CodeBusy])
	f.Unaccounted = int64(f.NoReply) - f.RefusalsUnsent
	f.Samples, f.RefusedAtHalt, f.SettleNs = len(floodReply), refusedAtHalt, int64(settle)
	res.Flood = f
	return nil
}

// floodSettle is how long the flood runs before a halt: long enough
// to spend the burst its lane saved up while it was stopped, twice over,
// so that the halt meets an agent being refused.
func floodSettle(offered, rate float64, burst int) time.Duration {
	const least, most = 50 * time.Millisecond, time.Second
	if offered <= 0 || offered <= rate {
		return 100 * time.Millisecond
	}
	d := time.Duration(2 * float64(burst) / (offered - rate) * float64(time.Second))
	return min(most, max(least, d))
}

// haltSample is one halt: from its publish to the latch (in the
// supervisor, diagnostic), to its reply, and to the halted status. A halt
// not answered within haltTimeout is lost: its times are that
// timeout.
type haltSample struct {
	latched, reply, status time.Duration
	lost                   bool
	id                     string
	t0                     time.Time
}

// haltOnce publishes a halt and times its latch, its reply and the status
// that says halted.
//
// Every halt has a reason of its own, and the status awaited is the one
// that gives it: a status saying halted that arrives after the reset was
// seen ready, before this halt was sent, is stale — an older refresh
// published after the reset's — and is counted, not taken for this one.
func haltOnce(d *door, h *agent, sw *statusWatch, i int) (s haltSample, stale int, err error) {
	stale = sw.drain() // the supervisor was seen ready since the last halt
	id := h.nextID("halt")
	reason := "bench halt " + strconv.Itoa(i)
	b, err := h.request(api.Request{ID: id, Op: api.OpHalt, Reason: reason})
	if err != nil {
		return s, stale, err
	}
	topic := h.topics.EstopAgent(h.name)
	if d.haltTopic == "cmd" {
		topic = h.topics.AgentCmd(h.name)
	}
	rep, t0, at, err := h.sendAt(topic, id, b, haltTimeout)
	if errors.Is(err, errNoAnswer) {
		return haltSample{latched: haltTimeout, reply: haltTimeout, status: haltTimeout, lost: true, id: id, t0: t0}, stale, nil
	}
	if err != nil {
		return s, stale, err
	}
	if !rep.OK {
		return s, stale, fmt.Errorf("halt refused: %s %s", rep.Code, rep.Message)
	}
	seen, err := sw.await(replyTimeout, func(st api.Status) bool {
		return st.Halted && strings.HasSuffix(st.HaltReason, ": "+reason)
	})
	if err != nil {
		return s, stale, fmt.Errorf("after halt %q: %w", reason, err)
	}
	latched, ok := d.tap.latched(id)
	if !ok {
		return s, stale, fmt.Errorf("halt %s was answered but never reached the supervisor's Submit", id)
	}
	return haltSample{latched: latched.Sub(t0), reply: at.Sub(t0), status: seen.Sub(t0), id: id, t0: t0}, stale, nil
}

// resetOnce resets the halt with the operator token — retrying while the
// supervisor is not ready yet — and waits for the status to say ready.
func resetOnce(h *agent, sw *statusWatch, token string) error {
	for try := 0; ; try++ {
		rep, _, err := h.call(api.Request{Op: api.OpReset, Token: token})
		if err != nil {
			return err
		}
		if rep.OK {
			break
		}
		if rep.Code != api.CodeNotReady || try >= 100 {
			return fmt.Errorf("reset refused: %s %s", rep.Code, rep.Message)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := sw.await(replyTimeout, func(st api.Status) bool {
		return st.State == api.StateOnline && st.Ready && !st.Halted
	}); err != nil {
		return fmt.Errorf("after a reset: %w", err)
	}
	return nil
}

// measureManyAgents runs rounds of agents stepping back to back — each its
// own actuator and saga, waiting for each reply — through the supervisor
// and, alternating with them, the same on an engine in this process (one
// goroutine per agent) on a journal of its own on the same disk.
func measureManyAgents(ctx context.Context, d *door, res *FrontDoorResult, opt frontDoorOptions) (err error) {
	k := opt.agents
	names := make([]string, k)
	for i := range names {
		names[i] = agentName(i)
	}
	// Through the supervisor: connect, hello, begin, and take the actuator
	// with an untimed first step, a few agents at a time.
	agents := make([]*agent, k)
	sagas := make([]uint64, k)
	defer func() {
		for _, a := range agents {
			if a != nil {
				a.close()
			}
		}
	}()
	errs := make([]error, k)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range k {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			a, saga, err := d.sagaAgent(names[i])
			if err != nil {
				errs[i] = err
				return
			}
			agents[i], sagas[i] = a, saga
			_, errs[i] = a.must(api.Request{Op: api.OpStep, Saga: saga, Actuator: names[i], Value: 1})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	mqttStep := func(g, i int) error {
		rep, _, err := agents[g].call(api.Request{Op: api.OpStep, Saga: sagas[g], Actuator: names[g], Value: float64(10 + 10*(i%2))})
		if err == nil && !rep.OK {
			err = fmt.Errorf("step refused: %s %s", rep.Code, rep.Message)
		}
		return err
	}

	// In this process: the same, on an engine of its own.
	reg, world, err := servos(names...)
	if err != nil {
		return err
	}
	defer world.Close()
	dir := filepath.Join(res.Dir, "local-agents")
	log, err := wal.Open(dir, wal.Options{})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := log.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	e, err := rollback.New(rollback.Config{Journal: log, Actuators: reg, Durability: rollback.EveryStep, MaxSagaCommands: 1_000_000})
	if err != nil {
		return err
	}
	owners := make([]rollback.Owner, k)
	local := make([]uint64, k)
	for i := range k {
		owners[i] = rollback.Owner{Agent: names[i], Lease: names[i], Epoch: 1}
		if local[i], err = e.Begin(owners[i]); err != nil {
			return err
		}
		if _, err := e.Step(local[i], owners[i], rollback.Command{ID: "take", Actuator: names[i], Value: 1}); err != nil {
			return err
		}
	}
	localSeq := make([]int, k) // each worker's own: ids stay unique across rounds
	localStep := func(g, i int) error {
		localSeq[g]++
		j := localSeq[g]
		_, err := e.Step(local[g], owners[g], rollback.Command{ID: "s" + strconv.Itoa(j), Actuator: names[g], Value: float64(10 + 10*(j%2))})
		return err
	}

	const rounds = 2
	var mq, lo fdThroughput
	var mqLat, loLat latency.Samples
	var mqBatches, mqRecords, loBatches, loRecords float64
	for r := range rounds * 2 {
		if err := ctx.Err(); err != nil {
			return err
		}
		if (r%2 == 0) == (r/2%2 == 0) { // local, mqtt, mqtt, local
			st0 := log.Stats()
			n, lat, err := round(k, opt.agentsTime, localStep)
			if err != nil {
				return fmt.Errorf("in-process: %w", err)
			}
			st := log.Stats()
			lo.Steps += n
			loLat = append(loLat, lat...)
			loBatches += float64(st.Batches - st0.Batches)
			loRecords += float64(st.Records - st0.Records)
			continue
		}
		b0, r0, err := d.journalStats()
		if err != nil {
			return err
		}
		n, lat, err := round(k, opt.agentsTime, mqttStep)
		if err != nil {
			return fmt.Errorf("through the supervisor: %w", err)
		}
		b1, r1, err := d.journalStats()
		if err != nil {
			return err
		}
		mq.Steps += n
		mqLat = append(mqLat, lat...)
		mqBatches += b1 - b0
		mqRecords += r1 - r0
	}
	wall := time.Duration(rounds) * opt.agentsTime
	fill := func(t *fdThroughput, name string, lat latency.Samples, batches, records float64) {
		t.Name, t.Agents, t.WallNs = name, k, int64(wall)
		t.StepsPerSec = float64(t.Steps) / wall.Seconds()
		t.P50, t.P99 = int64(lat.Percentile(0.5)), int64(lat.Percentile(0.99))
		if t.Steps > 0 {
			t.FsyncsPerStep = batches / float64(t.Steps)
		}
		if batches > 0 {
			t.RecordsPerSync = records / batches
		}
	}
	fill(&mq, fmt.Sprintf("MQTT, %d agents", k), mqLat, mqBatches, mqRecords)
	fill(&lo, fmt.Sprintf("in-process, %d goroutines", k), loLat, loBatches, loRecords)
	res.Throughput = []fdThroughput{mq, lo}
	for i := range k {
		if err := e.Commit(local[i], owners[i]); err != nil {
			return err
		}
	}
	// Commit the agents' sagas too: left open, the supervisor's stop
	// would unwind every step of them.
	for i := range k {
		wg.Go(func() {
			_, errs[i] = agents[i].must(api.Request{Op: api.OpCommit, Saga: sagas[i]})
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// round starts k workers at once; each calls step(worker, i) back to
// back for d. It returns the steps that finished within d and their
// latencies.
func round(k int, d time.Duration, step func(g, i int) error) (int, latency.Samples, error) {
	start := make(chan struct{})
	var t0 time.Time
	lats := make([]latency.Samples, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	for g := range k {
		wg.Go(func() {
			<-start
			end := t0.Add(d)
			for i := 0; ; i++ {
				s := time.Now()
				if !s.Before(end) {
					return
				}
				if err := step(g, i); err != nil {
					errs[g] = err
					return
				}
				if f := time.Now(); f.Before(end) {
					lats[g] = append(lats[g], f.Sub(s))
				}
			}
		})
	}
	t0 = time.Now()
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, nil, err
	}
	var all latency.Samples
	for _, l := range lats {
		all = append(all, l...)
	}
	return len(all), all, nil
}

// printFrontDoor writes bench mqtt's results as tables.
func printFrontDoor(w io.Writer, res *FrontDoorResult) {
	fmt.Fprintf(w, "front door over MQTT: broker %s, %s\n", res.Broker, res.BrokerKind)
	fmt.Fprintf(w, "supervisor %s\n", res.Supervisor)
	fmt.Fprintf(w, "agents: raw API v1 on paho clients in this process, TCP_NODELAY, QoS 1; lanes at the defaults (%g requests/s, burst %d, queue %d per agent)\n",
		res.AgentRate, res.AgentBurst, res.AgentQueue)
	where := res.Dir
	if res.Disk != "" {
		where += " (" + res.Disk + ")"
	}
	fmt.Fprintf(w, "journal %s, in %s, removed afterwards\n", res.Durability, where)
	if res.Warning != "" {
		fmt.Fprintf(w, "WARNING: %s\n", res.Warning)
	}

	fmt.Fprintf(w, "\n1. round trips, interleaved sample by sample, n=%d each; ratios to the echo's p50 and p99\n\n", res.N)
	fdTable(w, "p50/echo\tp99/echo", res.RoundTrips)
	o := res.Overhead
	fmt.Fprintf(w, "\noverhead = step − echo − local step (percentile by percentile): p50 %s (goal ≤ %s: %s), p99 %s (goal ≤ %s: %s)\n",
		fmtSignedDur(o.P50), fmtDur(time.Duration(o.GoalP50)), fmtMet(o.MetP50),
		fmtSignedDur(o.P99), fmtDur(time.Duration(o.GoalP99)), fmtMet(o.MetP99))

	fmt.Fprintf(w, "\n2. halt, from publishing {\"op\":\"halt\"} on %s/<agent> to its reply on reply/<agent> (sent once the halt is latched) and to the\n", res.HaltTopic)
	fmt.Fprintf(w, "retained status showing halted:true; n=%d each, quiet and flood alternating, reset between samples\n\n", res.Halts)
	fdTable(w, "p50/quiet\tp99/quiet", res.Halt)
	fmt.Fprintf(w, "\nhalt reply under the flood, p99 %s (goal ≤ %s: %s)\n", fmtDur(time.Duration(res.Halt[1].P99)),
		fmtDur(time.Duration(res.HaltGoalP99)), fmtMet(res.HaltGoalMet))
	if lost := res.HaltsLate + res.HaltsDropped; lost > 0 {
		fmt.Fprintf(w, "HALTS LOST: %d not answered within %s (counted as %s above): %d reached the supervisor only after the flood\n",
			lost, fmtDur(time.Duration(res.HaltTimeoutNs)), fmtDur(time.Duration(res.HaltTimeoutNs)), res.HaltsLate)
		fmt.Fprintf(w, "stopped, %d never reached it (dropped on the way; an external broker's log says why)\n", res.HaltsDropped)
	} else {
		fmt.Fprintf(w, "every halt was answered (within %s)\n", fmtDur(time.Duration(res.HaltTimeoutNs)))
	}
	f := res.Flood
	offered := "as fast as the client takes them"
	if f.OfferedPerSec > 0 {
		offered = fmt.Sprintf("offered %s/s", fmtCount(f.OfferedPerSec))
	}
	fmt.Fprintf(w, "flood: steps pipelined on one saga, %s (%d unacknowledged at most); achieved %s/s over %s of flooding,\n",
		offered, floodWindow, fmtCount(f.AchievedPerSec), fmtDur(time.Duration(f.PumpNs)))
	fmt.Fprintf(w, "  %d sent, %s/s served; replies: %s; never answered %d (%.1f%%)\n",
		f.Sent, fmtCount(f.ServedPerSec), fmtCodes(f.Replies), f.NoReply, 100*float64(f.NoReply)/float64(max(1, f.Sent)))
	fmt.Fprintf(w, "  supervisor counted RATE_LIMITED %.0f, BUSY %.0f: %d refusal replies not received (the lanes drop those of an agent\n",
		f.SupRateLimited, f.SupBusy, f.RefusalsUnsent)
	fmt.Fprintf(w, "  flooding faster than they leave); never answered and not so accounted for: %d; transport queue dropped %d\n",
		f.Unaccounted, f.TransportDropped)
	fmt.Fprintf(w, "  %d of %d halts met the flood being refused (a lane refusal reached it within %s before the halt; settle %s)\n",
		f.RefusedAtHalt, f.Samples, fmtDur(refusedNear), fmtDur(time.Duration(f.SettleNs)))

	if len(res.Throughput) == 2 {
		mq, lo := res.Throughput[0], res.Throughput[1]
		fmt.Fprintf(w, "\n3. durable steps/s: %d agents back to back, each its own actuator and saga, waiting for each reply;\n", mq.Agents)
		fmt.Fprintf(w, "rounds of %s alternating in-process, MQTT, MQTT, in-process\n\n", fmtDur(time.Duration(mq.WallNs/2)))
		var table strings.Builder
		tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "\tsteps/s\tp50\tp99\tfsyncs/step\trecords/fsync")
		for _, t := range res.Throughput {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.3f\t%.1f\n", t.Name, fmtCount(t.StepsPerSec), fmtDur(time.Duration(t.P50)),
				fmtDur(time.Duration(t.P99)), t.FsyncsPerStep, t.RecordsPerSync)
		}
		tw.Flush()
		writeTrimmed(w, table.String())
		if lo.StepsPerSec > 0 {
			fmt.Fprintf(w, "\nMQTT/in-process: %.2f\n", mq.StepsPerSec/lo.StepsPerSec)
		}
	}
	if len(res.Expiries) > 0 {
		fmt.Fprintf(w, "\n4. lease expiry: hello (TTL %s), a step of a servo from 0 to 10, one heartbeat, silence; how long after the\n",
			fmtDur(time.Duration(res.Expiries[0].TTL)))
		fmt.Fprintf(w, "heartbeat's publish + TTL the servo read back 0 (its prior), polled every %s\n\n", fmtDur(expiryPoll))
		var table strings.Builder
		tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "\tn\tp50 late\tmax late\tgoal max\tmet\tbackground steps")
		for _, e := range res.Expiries {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%d\n", e.Name, e.Samples, fmtSignedDur(e.P50Late), fmtSignedDur(e.MaxLate),
				fmtDur(time.Duration(e.Goal)), fmtMet(e.Met), e.BackgroundSteps)
		}
		tw.Flush()
		writeTrimmed(w, table.String())
	}
	limit := "the broker's own packet limit"
	if res.MaxPacket > 0 {
		limit = fmt.Sprintf("the embedded broker's packet limit %s", fmtBytes(float64(res.MaxPacket)))
	}
	fmt.Fprintf(w, "\nlargest event published: %s (%s, a report of %d steps); %s\n",
		fmtBytes(float64(res.LargestEvent)), res.LargestEventKind, res.LargestEventSteps, limit)
	if res.StaleHalted > 0 || res.StaleNotReady > 0 {
		fmt.Fprintf(w, "stale after reset: %d times the retained status said halted:true again after a reset had been seen ready, with no\n", res.StaleHalted)
		fmt.Fprintf(w, "halt sent; %d begins refused NOT_READY (retried) after the reset had been answered\n", res.StaleNotReady)
	}
	if len(res.Incidents) == 0 {
		fmt.Fprintf(w, "incidents: none (no warning logged by the supervisor's transport%s)\n", map[bool]string{true: " or the embedded broker"}[res.MaxPacket > 0])
	} else {
		fmt.Fprintf(w, "incidents (warnings logged by the supervisor's transport%s):\n", map[bool]string{true: " and the embedded broker"}[res.MaxPacket > 0])
		for _, s := range res.Incidents {
			fmt.Fprintf(w, "  %s\n", s)
		}
	}
	fmt.Fprintf(w, "\nTook %s.\n", time.Duration(res.TookNs).Round(100*time.Millisecond))
}

// fdTable writes latency rows with p50, p99, max and two ratio columns.
func fdTable(w io.Writer, ratioHead string, rows []fdRow) {
	var table strings.Builder
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\tp50\tp99\tmax\t%s\tnote\n", ratioHead)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, fmtDur(time.Duration(r.P50)), fmtDur(time.Duration(r.P99)),
			fmtDur(time.Duration(r.Max)), fmtRatio(r.P50xRef), fmtRatio(r.P99xRef), r.Note)
	}
	tw.Flush()
	writeTrimmed(w, table.String())
}

// writeTrimmed writes a tabwriter's output without trailing blanks.
func writeTrimmed(w io.Writer, s string) {
	for line := range strings.Lines(s) {
		fmt.Fprintln(w, strings.TrimRight(line, " \n"))
	}
}

func fmtSignedDur(ns int64) string {
	if ns < 0 {
		return "−" + fmtDur(time.Duration(-ns))
	}
	return fmtDur(time.Duration(ns))
}

func fmtMet(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// fmtCodes lists reply counts, OK first, then by code.
func fmtCodes(m map[string]uint64) string {
	var parts []string
	if n, ok := m["OK"]; ok {
		parts = append(parts, fmt.Sprintf("OK %d", n))
	}
	var codes []string
	for c := range m {
		if c != "OK" {
			codes = append(codes, c)
		}
	}
	slices.Sort(codes)
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%s %d", c, m[c]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
