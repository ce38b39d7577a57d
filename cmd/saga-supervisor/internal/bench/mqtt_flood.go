package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/rollback"
)

// flood is an agent that pipelines valid step requests — its own
// lease, its own saga, alternating values on its own actuator — without
// waiting for their replies, at an offered rate (or as fast as its client
// takes them), so that its lane refuses it RATE_LIMITED and BUSY. It
// counts the replies by code as they come back. Each start begins a new
// saga (a halt ends the last one); stop stops publishing and waits until
// the replies have stopped coming.
type flood struct {
	a        *agent
	actuator string
	rate     float64 // offered requests/s; 0 as fast as the client takes them

	mu      sync.Mutex
	replies map[string]uint64
	sent    uint64
	pumped  time.Duration
	failed  error

	lastMsg     atomic.Int64 // unix ns of the last reply
	lastRefused atomic.Int64 // unix ns of the last RATE_LIMITED or BUSY

	stopCh chan struct{}
	done   chan struct{}
	begun  time.Time
	saga   uint64 // the saga flooded last; a halt normally ended it

	// submitted counts the requests the supervisor has taken from the
	// transport, all agents together: stop waits for it to settle.
	submitted func() uint64
}

func newFlood(a *agent, actuator string, rate float64, submitted func() uint64) *flood {
	f := &flood{a: a, actuator: actuator, rate: rate, replies: map[string]uint64{}, submitted: submitted}
	a.mu.Lock()
	a.other = f.onReply
	a.mu.Unlock()
	return f
}

// onReply counts one reply to a flooded step (on paho's goroutine).
func (f *flood) onReply(rep api.Reply, at time.Time) {
	code := rep.Code
	if rep.OK {
		code = "OK"
	}
	f.mu.Lock()
	f.replies[code]++
	f.mu.Unlock()
	f.lastMsg.Store(at.UnixNano())
	if code == api.CodeRateLimited || code == api.CodeBusy {
		f.lastRefused.Store(at.UnixNano())
	}
}

// lastRefusal is when a lane refusal last reached the flood.
func (f *flood) lastRefusal() time.Time { return time.Unix(0, f.lastRefused.Load()) }

// start keeps the lease alive, begins a saga and starts flooding it.
func (f *flood) start() error {
	if _, err := f.a.must(api.Request{Op: api.OpHeartbeat}); err != nil {
		return fmt.Errorf("flood: %w", err)
	}
	if err := f.closeSaga(); err != nil {
		return err
	}
	saga, err := f.a.begin()
	if err != nil {
		return fmt.Errorf("flood: %w", err)
	}
	f.saga = saga
	// The requests are assembled from a template around id and value,
	// checked once against the API's own decoder: encoding each one with
	// api.EncodeRequest would cost more than the flood can afford.
	lease, _ := json.Marshal(f.a.lease)
	head := `{"agent":"` + f.a.name + `","op":"step","lease":` + string(lease) + `,"epoch":` + strconv.FormatUint(f.a.epoch, 10) +
		`,"saga":` + strconv.FormatUint(saga, 10) + `,"actuator":"` + f.actuator + `","id":"`
	build := func(buf []byte, id uint64, v int) []byte {
		buf = append(buf[:0], head...)
		buf = append(buf, f.a.name...)
		buf = append(buf, "-f"...)
		buf = strconv.AppendUint(buf, id, 10)
		buf = append(buf, `","value":`...)
		buf = strconv.AppendInt(buf, int64(v), 10)
		return append(buf, '}')
	}
	probe := build(nil, 0, 10)
	if req, derr := api.DecodeRequest(probe, 0); derr != nil || req.Saga != saga || req.Value != 10 {
		return fmt.Errorf("flood: the request template %s does not decode as meant: %v", probe, derr)
	}
	f.stopCh, f.done = make(chan struct{}), make(chan struct{})
	f.begun = time.Now()
	go f.pump(build)
	return nil
}

// closeSaga commits the saga flooded last, if a halt did not end it: a
// lost halt leaves it open, holding the actuator against the next saga.
// It is refused SAGA_UNKNOWN when the halt did end it (HALTED while a
// late halt is still latched: the reset that follows ends it).
func (f *flood) closeSaga() error {
	if f.saga == 0 {
		return nil
	}
	rep, _, err := f.a.call(api.Request{Op: api.OpCommit, Saga: f.saga})
	if err != nil {
		return fmt.Errorf("flood: %w", err)
	}
	if !rep.OK && rep.Code != string(rollback.CodeSagaUnknown) && rep.Code != string(rollback.CodeHalted) {
		return fmt.Errorf("flood: commit of saga %d refused: %s %s", f.saga, rep.Code, rep.Message)
	}
	f.saga = 0
	return nil
}

// pump publishes until stopped: paced to the offered rate (a stall is
// caught up by at most 10 ms worth, not saved up), with at most
// floodWindow publishes awaiting their PUBACK.
func (f *flood) pump(build func([]byte, uint64, int) []byte) {
	defer close(f.done)
	topic := f.a.topics.AgentCmd(f.a.name)
	toks := make([]paho.Token, floodWindow)
	var interval time.Duration
	if f.rate > 0 {
		interval = time.Duration(float64(time.Second) / f.rate)
	}
	next := time.Now()
	var sent uint64
	defer func() {
		f.mu.Lock()
		f.sent += sent
		f.mu.Unlock()
	}()
	for {
		select {
		case <-f.stopCh:
			return
		default:
		}
		if interval > 0 {
			now := time.Now()
			if now.Before(next) {
				time.Sleep(next.Sub(now))
				continue
			}
			if next = next.Add(interval); now.Sub(next) > 10*time.Millisecond {
				next = now
			}
		}
		slot := sent % floodWindow
		if t := toks[slot]; t != nil {
			if !t.WaitTimeout(replyTimeout) {
				f.fail(errors.New("a publish was not acknowledged by the broker within " + replyTimeout.String()))
				return
			}
			if err := t.Error(); err != nil {
				f.fail(fmt.Errorf("publish: %w", err))
				return
			}
		}
		// A new buffer each time: paho keeps the payload until it is sent.
		id := f.a.seq.Add(1)
		toks[slot] = f.a.c.Publish(topic, 1, false, build(nil, id, 10+10*int(id%2)))
		sent++
	}
}

func (f *flood) fail(err error) {
	f.mu.Lock()
	if f.failed == nil {
		f.failed = err
	}
	f.mu.Unlock()
}

// err is the first publishing error.
func (f *flood) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

// stop stops publishing and waits (up to replyTimeout) until, for
// drainQuiet, no reply has come and the supervisor has taken no
// request: the broker's backlog has reached the supervisor (or was
// dropped), and what the lane held has been answered (or its reply
// dropped). Replies alone would not tell: the lanes drop most refusal
// replies of a flood, so a backlog can be chewed through in silence.
func (f *flood) stop() {
	close(f.stopCh)
	<-f.done
	stopped := time.Now()
	f.mu.Lock()
	f.pumped += stopped.Sub(f.begun)
	f.mu.Unlock()
	seen, still := f.submitted(), stopped
	for time.Since(stopped) < replyTimeout {
		if n := f.submitted(); n != seen {
			seen, still = n, time.Now()
		}
		last := max(still.UnixNano(), f.lastMsg.Load())
		if time.Since(time.Unix(0, last)) >= drainQuiet {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// summary reports what the flood sent and got back.
func (f *flood) summary() fdFlood {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := fdFlood{OfferedPerSec: f.rate, Sent: f.sent, PumpNs: int64(f.pumped), Replies: map[string]uint64{}, BadReplies: f.a.bad.Load()}
	var answered uint64
	for c, n := range f.replies {
		r.Replies[c] = n
		answered += n
	}
	if f.sent > answered {
		r.NoReply = f.sent - answered
	}
	if s := f.pumped.Seconds(); s > 0 {
		r.AchievedPerSec = float64(f.sent) / s
		r.ServedPerSec = float64(f.replies["OK"]) / s
	}
	if f.failed != nil {
		msg := f.failed.Error()
		r.Err = &msg
	}
	return r
}
