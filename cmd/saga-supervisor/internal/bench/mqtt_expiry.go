package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/internal/latency"
)

// Lease expiry: a controller that stops heartbeating must have its
// actuators back at their priors no later than TTL + goalExpiryLate
// after its last heartbeat, also while other agents keep the journal's
// fsync busy (issue 13).
const (
	expiryTTL      = 500 * time.Millisecond
	goalExpiryLate = 20 * time.Millisecond
	expiryPoll     = 200 * time.Microsecond // how often the servo is read back
	expiryBusy     = 8                      // agents stepping durably during the busy expiries
)

// busyName names the i-th busy agent of the expiry measurement and
// its actuator.
func busyName(i int) string { return fmt.Sprintf("busy%d", i) }

// FrontDoorExpiry is one condition of the lease-expiry measurement: how late, past
// the TTL, the servo was back at its prior, counted from the moment the
// agent published its last heartbeat.
type FrontDoorExpiry struct {
	Name    string `json:"name"`
	Samples int    `json:"samples"`
	TTL     int64  `json:"ttl_ns"`
	P50Late int64  `json:"p50_late_ns"`
	MaxLate int64  `json:"max_late_ns"`
	Goal    int64  `json:"goal_late_ns"`
	Met     bool   `json:"met"`
	// Background is what else ran: the steps other agents got durable
	// meanwhile.
	BackgroundSteps int `json:"background_steps"`
}

// measureExpiries measures n lease expiries quiet, n while busy agents step
// durably (every step an fsync) the whole time, and — unless slow is 0 — n
// more while they do on a slow disk, every journal fsync taking slow
// longer. The unwind's own intents are durable before each move, so on the
// slow disk an expiry pays for at least one slow fsync, and may queue
// behind a batch of the busy agents' for another.
func measureExpiries(ctx context.Context, d *door, res *FrontDoorResult, n, busy int, slow time.Duration) error {
	exp, err := d.agent("expiry")
	if err != nil {
		return err
	}
	defer exp.close()
	servo, ok := d.daemon.Built.Options.Actuators.Get("expiry").Driver.(actuators.ReadBacker)
	if !ok {
		return errors.New("the expiry servo cannot be read back")
	}
	conds := []struct {
		name string
		busy int
		slow time.Duration
	}{{"quiet", 0, 0}, {fmt.Sprintf("%d agents stepping durably", busy), busy, 0}}
	if slow > 0 {
		conds = append(conds, struct {
			name string
			busy int
			slow time.Duration
		}{fmt.Sprintf("%d agents stepping durably, every fsync %v slower", busy, slow), busy, slow})
	}
	for _, cond := range conds {
		if err := ctx.Err(); err != nil {
			return err
		}
		d.syncDelay.Store(int64(cond.slow))
		stop, steps, berr := d.backgroundSteps(cond.busy)
		late, err := expiryRound(exp, servo, n)
		stop()
		d.syncDelay.Store(0)
		if err == nil {
			err = <-berr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", cond.name, err)
		}
		row := FrontDoorExpiry{Name: cond.name, Samples: len(late), TTL: int64(expiryTTL),
			P50Late: int64(late.Percentile(0.5)), MaxLate: int64(late.Percentile(1)), Goal: int64(goalExpiryLate), BackgroundSteps: int(steps.Load())}
		row.Met = row.MaxLate <= row.Goal
		res.Expiries = append(res.Expiries, row)
	}
	return nil
}

// expiryRound lets n leases expire: each time hello, begin, a step from 0
// to 10, one heartbeat, then silence. It returns, per expiry, how long
// after last heartbeat's publish + TTL the servo read back 0 again.
func expiryRound(a *agent, servo actuators.ReadBacker, n int) (latency.Samples, error) {
	var late latency.Samples
	for i := range n {
		if err := a.hello(expiryTTL); err != nil {
			return nil, err
		}
		saga, err := a.begin()
		if err != nil {
			return nil, err
		}
		if _, err := a.must(api.Request{Op: api.OpStep, Saga: saga, Actuator: "expiry", Value: 10}); err != nil {
			return nil, err
		}
		id := a.nextID("heartbeat")
		b, err := a.request(api.Request{ID: id, Op: api.OpHeartbeat})
		if err != nil {
			return nil, err
		}
		rep, t0, _, err := a.sendAt(a.topics.AgentCmd(a.name), id, b, replyTimeout)
		if err != nil {
			return nil, err
		}
		if !rep.OK {
			return nil, fmt.Errorf("heartbeat %d refused: %s %s", i, rep.Code, rep.Message)
		}
		deadline := t0.Add(expiryTTL)
		for {
			v, err := servo.ReadBack(context.Background())
			now := time.Now()
			if err == nil && v == 0 {
				late = append(late, now.Sub(deadline))
				break
			}
			if now.Sub(deadline) > 5*time.Second {
				return nil, fmt.Errorf("expiry %d: the servo still reads %v (%v) 5 s after the lease's TTL", i, v, err)
			}
			time.Sleep(expiryPoll)
		}
	}
	return late, nil
}

// backgroundSteps has k busy agents step durably, each
// in a saga of its own, until stop is called; steps counts the steps
// answered OK, and the error channel says how the work ended.
func (d *door) backgroundSteps(k int) (stop func(), steps *atomic.Int64, errc <-chan error) {
	steps = new(atomic.Int64)
	done := make(chan struct{})
	out := make(chan error, 1)
	if k == 0 {
		out <- nil
		return func() {}, steps, out
	}
	var wg sync.WaitGroup
	errs := make(chan error, k)
	for g := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- d.stepUntil(busyName(g), done, steps)
		}()
	}
	go func() {
		wg.Wait()
		close(errs)
		var all []error
		for err := range errs {
			all = append(all, err)
		}
		out <- errors.Join(all...)
	}()
	return func() { close(done) }, steps, out
}

// stepUntil has agent name step its own servo back and forth until done.
func (d *door) stepUntil(name string, done <-chan struct{}, steps *atomic.Int64) error {
	a, saga, err := d.sagaAgent(name)
	if err != nil {
		return err
	}
	defer a.close()
	for i := 0; ; i++ {
		select {
		case <-done:
			_, err := a.must(api.Request{Op: api.OpCommit, Saga: saga})
			return err
		default:
		}
		if _, err := a.must(api.Request{Op: api.OpStep, Saga: saga, Actuator: name, Value: float64(i % 2)}); err != nil {
			return err
		}
		steps.Add(1)
	}
}
