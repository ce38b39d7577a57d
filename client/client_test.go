package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/client"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
	"github.com/saga-supervisor/saga-supervisor/supervisor"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

const token = "operator-token-0123456789abcdef-test"

// daemon is a supervisor on the default config (the sim arm) with an
// in-process broker and its MQTT transport, in temporary directories.
type daemon struct{ *daemontest.Daemon }

func startDaemon(t *testing.T) *daemon {
	t.Helper()
	return &daemon{daemontest.Start(t, "", func(c *config.Config) { c.HTTP.ResetToken = token })}
}

func (d *daemon) opts(agent string) client.Options {
	return client.Options{Broker: d.Broker.URL(), Agent: agent, Device: "arm1", Timeout: 10 * time.Second}
}

func (d *daemon) commanded(name string) float64 {
	v, _ := d.Sup.Engine().Commanded(name)
	return v
}

func (d *daemon) hasLease(agent string) bool {
	return slices.ContainsFunc(d.Sup.Status().Leases, func(l supervisor.LeaseJSON) bool { return l.Agent == agent })
}

func dial(t *testing.T, opt client.Options) *client.Client {
	t.Helper()
	c, err := client.Dial(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestClientSagaSteps(t *testing.T) {
	d := startDaemon(t)
	c := dial(t, d.opts("planner"))
	ctx := context.Background()
	l, ok := c.Lease()
	if !ok || l.ID == "" || l.Epoch == 0 || l.TTL != time.Second || l.Heartbeat != 250*time.Millisecond {
		t.Fatalf("lease %+v %v (want the default 1s TTL, heartbeat 250ms)", l, ok)
	}
	saga, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := saga.Step(ctx, "base", 45)
	if err != nil {
		t.Fatal(err)
	}
	if res != (client.StepResult{Step: 1, Value: 45, Prior: 0, Requested: 45}) {
		t.Fatalf("step result %+v", res)
	}
	// Over the limit: refused, nothing moved, the saga goes on.
	_, err = saga.Step(ctx, "elbow", 170)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != "LIMIT_MAX" || ce.Op != "step" || !strings.Contains(ce.Message, "elbow") || ce.Report != nil {
		t.Fatalf("over-limit step: %#v", err)
	}
	if !client.IsRefusal(err) || client.CodeOf(err) != "LIMIT_MAX" || errors.Is(err, client.ErrSagaEnded) || errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("LIMIT_MAX classified wrongly: %v", err)
	}
	if d.commanded("elbow") != 20 {
		t.Fatalf("refused step moved the elbow to %v", d.commanded("elbow"))
	}
	res, err = saga.Step(ctx, "elbow", 90, client.WithDeadline(time.Second))
	if err != nil || res.Step != 2 || res.Prior != 20 {
		t.Fatalf("step after a refusal: %+v %v", res, err)
	}
	if _, err := saga.Step(ctx, "nope", 1); client.CodeOf(err) != "ACTUATOR_UNKNOWN" || !client.IsRefusal(err) {
		t.Fatalf("unknown actuator: %v", err)
	}
	if _, err := saga.Step(ctx, "elbow", 1, client.WithDeadline(0)); client.CodeOf(err) != "BAD_REQUEST" {
		t.Fatalf("deadline 0: %v", err)
	}
	if err := saga.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if d.commanded("base") != 45 || d.commanded("elbow") != 90 {
		t.Fatalf("after commit base=%v elbow=%v", d.commanded("base"), d.commanded("elbow"))
	}
	// The saga is over: the client says so without asking.
	if _, err := saga.Step(ctx, "base", 0); !errors.Is(err, client.ErrSagaEnded) {
		t.Fatalf("step after commit: %v", err)
	}
	if err := saga.Commit(ctx); !errors.Is(err, client.ErrSagaEnded) {
		t.Fatalf("second commit: %v", err)
	}
	// Status over MQTT: ready, nothing open, our lease live.
	raw, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var st supervisor.Status
	if err := json.Unmarshal(raw, &st); err != nil || !st.Ready || len(st.OpenSagas) != 0 || len(st.Leases) != 1 || st.Leases[0].Agent != "planner" {
		t.Fatalf("status %s (%v)", raw, err)
	}
	if c.Err() != nil {
		t.Fatalf("client lost: %v", c.Err())
	}
}

func TestClientAbortReport(t *testing.T) {
	d := startDaemon(t)
	c := dial(t, d.opts("planner"))
	ctx := context.Background()
	saga, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := saga.Step(ctx, "shoulder", 60); err != nil {
		t.Fatal(err)
	}
	if _, err := saga.Step(ctx, "gripper", 30); err != nil {
		t.Fatal(err)
	}
	rep, err := saga.Abort(ctx, "changed my mind")
	if err != nil {
		t.Fatal(err)
	}
	if rep == nil || rep.Verdict != "clean" || rep.Saga != saga.ID() || rep.Agent != "planner" || rep.Reason != "changed my mind" ||
		len(rep.Steps) != 2 || rep.Steps[0].Actuator != "gripper" || rep.Steps[1].Actuator != "shoulder" {
		t.Fatalf("abort report %+v", rep)
	}
	if d.commanded("shoulder") != 10 || d.commanded("gripper") != 0 {
		t.Fatalf("after abort shoulder=%v gripper=%v", d.commanded("shoulder"), d.commanded("gripper"))
	}
	if _, err := saga.Abort(ctx, "again"); !errors.Is(err, client.ErrSagaEnded) {
		t.Fatalf("second abort: %v", err)
	}
	// Two sagas cannot hold one actuator; the second is refused, not lost.
	s1, _ := c.Begin(ctx)
	s2, _ := c.Begin(ctx)
	if _, err := s1.Step(ctx, "base", 10); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Step(ctx, "base", 20); client.CodeOf(err) != "ACTUATOR_BUSY" || !client.IsRefusal(err) {
		t.Fatalf("busy actuator: %v", err)
	}
}

// leaseTTL is the TTL of a test's lease that heartbeats must keep while
// the test does something else. At 200ms a loaded machine sometimes served
// no heartbeat for a whole TTL, and the supervisor rightly let the lease
// go; under qemu (make test-arm) it is stretched further.
func leaseTTL() time.Duration { return testtool.Slow(time.Second).Round(100 * time.Millisecond) }

// Heartbeats keep a lease alive for three TTLs.
func TestClientHeartbeatsKeepLease(t *testing.T) {
	d := startDaemon(t)
	opt := d.opts("planner")
	ttl := leaseTTL()
	opt.TTL = ttl
	c := dial(t, opt)
	ctx := context.Background()
	if l, _ := c.Lease(); l.TTL != ttl || l.Heartbeat != ttl/4 {
		t.Fatalf("lease %+v, want TTL %v, heartbeat %v", l, ttl, ttl/4)
	}
	saga, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := saga.Step(ctx, "base", 30); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * ttl)
	if err := c.Err(); err != nil {
		t.Fatalf("lease lost while heartbeating: %v", err)
	}
	if _, err := saga.Step(ctx, "base", 40); err != nil {
		t.Fatalf("step after 3 TTLs: %v", err)
	}
	if err := saga.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// A controller killed mid-saga without a bye: its will ends the lease long
// before the TTL, the saga is unwound, and the client knows it is lost.
func TestClientKilledUnwinds(t *testing.T) {
	d := startDaemon(t)
	opt := d.opts("planner")
	opt.TTL = time.Minute
	c, kill, err := client.DialKillable(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx := context.Background()
	saga, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := saga.Step(ctx, "elbow", 100); err != nil {
		t.Fatal(err)
	}
	kill()
	select {
	case <-c.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not notice its connection dying")
	}
	if err := c.Err(); !errors.Is(err, client.ErrLeaseLost) || !errors.Is(err, client.ErrConnectionLost) {
		t.Fatalf("Err after kill: %v", err)
	}
	waitFor(t, "the will to unwind the saga", func() bool {
		return d.commanded("elbow") == 20 && len(d.Sup.Engine().OpenSagas()) == 0 && !d.hasLease("planner")
	})
	if _, err := saga.Step(ctx, "elbow", 50); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("step after kill: %v", err)
	}
	if _, err := c.Begin(ctx); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("begin after kill: %v", err)
	}
	if err := c.Halt(ctx, "x"); !errors.Is(err, client.ErrConnectionLost) {
		t.Fatalf("halt without a connection: %v", err)
	}
}

// A controller that hangs (no heartbeats): the lease expires, the saga is
// unwound and reported on events, and the client learns it is lost from
// the next reply — it never takes a new lease on its own.
func TestClientHungLeaseExpires(t *testing.T) {
	d := startDaemon(t)
	w := dial(t, client.Options{Broker: d.Broker.URL(), Agent: "watcher", Device: "arm1", NoLease: true})
	wctx, stop := context.WithCancel(context.Background())
	var (
		mu      sync.Mutex
		reports []*api.ReportJSON
		states  = map[string]float64{}
	)
	watched := make(chan error, 1)
	go func() {
		watched <- w.Watch(wctx, func(u client.Update) {
			mu.Lock()
			defer mu.Unlock()
			if u.Event != nil && u.Event.Kind == api.EventRollback {
				reports = append(reports, u.Event.Report)
			}
			if u.State != nil {
				states[u.State.Actuator] = u.State.Commanded
			}
		})
	}()

	opt := d.opts("planner")
	opt.TTL = leaseTTL() // heartbeats keep it until StopHeartbeats
	c := dial(t, opt)
	ctx := context.Background()
	saga, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := saga.Step(ctx, "base", 45); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the watcher to see base at 45", func() bool { mu.Lock(); defer mu.Unlock(); return states["base"] == 45 })
	client.StopHeartbeats(c)
	waitFor(t, "the lease to expire and the saga to be reported unwound", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(reports) == 1 && states["base"] == 0
	})
	if r := reports[0]; r.Agent != "planner" || r.Saga != saga.ID() || r.Verdict != "clean" || r.Reason != "lease expired" {
		t.Fatalf("rollback event %+v", r)
	}
	_, err = saga.Step(ctx, "base", 10)
	if client.CodeOf(err) != "LEASE_EXPIRED" || !errors.Is(err, client.ErrLeaseLost) || !client.IsRefusal(err) {
		t.Fatalf("step after expiry: %v", err)
	}
	if err := c.Err(); !errors.Is(err, client.ErrLeaseLost) || client.CodeOf(err) != "LEASE_EXPIRED" {
		t.Fatalf("Err after expiry: %v", err)
	}
	// Lost for good: no new hello behind the caller's back.
	if _, err := c.Begin(ctx); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("begin after expiry: %v", err)
	}
	if d.hasLease("planner") {
		t.Fatal("the client took a new lease on its own")
	}
	stop()
	if err := <-watched; err != nil {
		t.Fatalf("watch: %v", err)
	}
}

// Close sends bye: the lease ends at once and the open saga is unwound.
func TestClientCloseSendsBye(t *testing.T) {
	d := startDaemon(t)
	opt := d.opts("planner")
	opt.TTL = time.Minute
	c, err := client.Dial(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	saga, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := saga.Step(ctx, "gripper", 40); err != nil {
		t.Fatal(err)
	}
	if !d.hasLease("planner") {
		t.Fatal("no lease before Close")
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The bye's reply came back before Close returned, so its unwind is done.
	if d.hasLease("planner") || d.commanded("gripper") != 0 || len(d.Sup.Engine().OpenSagas()) != 0 {
		t.Fatalf("after Close: lease %v gripper %v open %v", d.hasLease("planner"), d.commanded("gripper"), d.Sup.Engine().OpenSagas())
	}
	if err := c.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := c.Begin(ctx); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("begin after Close: %v", err)
	}
	if _, err := c.Status(ctx); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("status after Close: %v", err)
	}
}

func TestClientHaltReset(t *testing.T) {
	// Reset over MQTT, as a supervisor with mqtt.allow_reset (which needs
	// TLS in a config file) and an agent given reset allow it.
	d := &daemon{daemontest.Start(t, "", func(c *config.Config) {
		c.HTTP.ResetToken = token
		c.MQTT.AllowReset = true
		c.Agents.Allow = map[string]config.Permission{"planner": {}, "operator": {Ops: []string{"reset", "status"}}}
	})}
	c := dial(t, d.opts("planner"))
	op := dial(t, client.Options{Broker: d.Broker.URL(), Agent: "operator", Device: "arm1", NoLease: true})
	ctx := context.Background()
	if _, ok := op.Lease(); ok {
		t.Fatal("a NoLease client holds a lease")
	}
	if _, err := op.Begin(ctx); !errors.Is(err, client.ErrNoLease) {
		t.Fatalf("begin without a lease: %v", err)
	}
	saga, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Halt(ctx, "person in the cell"); err != nil {
		t.Fatal(err)
	}
	if _, err := saga.Step(ctx, "base", 10); !errors.Is(err, client.ErrHalted) || !client.IsRefusal(err) {
		t.Fatalf("step while halted: %v", err)
	}
	if _, err := c.Begin(ctx); !errors.Is(err, client.ErrHalted) {
		t.Fatalf("begin while halted: %v", err)
	}
	if err := op.Reset(ctx, "wrong"); !errors.Is(err, client.ErrUnauthorized) || client.CodeOf(err) != "UNAUTHORIZED" {
		t.Fatalf("reset with a wrong token: %v", err)
	}
	if err := c.Reset(ctx, token); !errors.Is(err, client.ErrForbidden) || !client.IsRefusal(err) {
		t.Fatalf("reset by an agent not given reset: %v", err)
	}
	if err := op.Reset(ctx, token); err != nil {
		t.Fatal(err)
	}
	// A halt does not end leases: the controller carries on with a new saga.
	saga, err = c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := saga.Step(ctx, "base", 10); err != nil {
		t.Fatal(err)
	}
	if c.Err() != nil {
		t.Fatalf("halt lost the lease: %v", c.Err())
	}
}

func TestClientDialRefusals(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	opt := d.opts("a/b")
	if _, err := client.Dial(ctx, opt); err == nil {
		t.Fatal("agent a/b accepted")
	}
	opt = d.opts("planner")
	opt.Device = ""
	if _, err := client.Dial(ctx, opt); err == nil {
		t.Fatal("no device accepted")
	}
	opt = d.opts("planner")
	opt.TTL = 2 * time.Minute // above the supervisor's max_ttl
	if _, err := client.Dial(ctx, opt); client.CodeOf(err) != "BAD_REQUEST" {
		t.Fatalf("TTL over the bound: %v", err)
	}
	opt = d.opts("planner")
	opt.Broker = "tcp://127.0.0.1:1" // nothing listens there
	opt.Timeout = 2 * time.Second
	if _, err := client.Dial(ctx, opt); err == nil {
		t.Fatal("dialled nothing")
	}
	// A context that ends before the reply.
	opt = d.opts("planner")
	tctx, cancel := context.WithTimeout(ctx, time.Nanosecond)
	defer cancel()
	if _, err := client.Dial(tctx, opt); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("expired context: %v", err)
	}
}

// Replies nobody waits for — garbage, unknown ids, a second reply to a
// request already answered — are ignored; the client carries on.
func TestClientIgnoresUnknownReplies(t *testing.T) {
	d := startDaemon(t)
	c := dial(t, d.opts("planner"))
	ctx := context.Background()
	raw := paho.NewClient(paho.NewClientOptions().AddBroker(d.Broker.URL()).SetClientID("forger"))
	if tok := raw.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer raw.Disconnect(0)
	ids := make(chan string, 16)
	raw.Subscribe(c.Topics().CmdFilter(), 1, func(_ paho.Client, m paho.Message) {
		var req struct{ ID, Op string }
		json.Unmarshal(m.Payload(), &req)
		if req.Op == "begin" {
			ids <- req.ID
		}
	}).WaitTimeout(5 * time.Second)
	saga, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var beginID string
	select {
	case beginID = <-ids:
	case <-time.After(10 * time.Second):
		t.Fatal("the begin request was not seen on cmd")
	}
	if !strings.HasPrefix(beginID, "planner-") {
		t.Fatalf("request id %q does not start with the agent", beginID)
	}
	topic := c.Topics().Reply("planner")
	for _, p := range []string{`not json`, `[]`, `{"id":"","ok":true}`, `{"id":"planner-999","ok":false,"code":"LEASE_EXPIRED","message":"forged"}`,
		`{"id":"` + beginID + `","ok":false,"code":"LEASE_EXPIRED","message":"a late duplicate"}`} {
		raw.Publish(topic, 1, false, p).WaitTimeout(5 * time.Second)
	}
	if _, err := saga.Step(ctx, "base", 5); err != nil {
		t.Fatal(err)
	}
	if err := saga.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Err() != nil {
		t.Fatalf("an unknown reply lost the lease: %v", c.Err())
	}
}

// A supervisor that stops answering: no heartbeat is acknowledged for a
// TTL, and the client gives the lease up rather than trust it.
func TestClientLostWhenSupervisorSilent(t *testing.T) {
	d := startDaemon(t)
	opt := d.opts("planner")
	opt.TTL = 200 * time.Millisecond
	c := dial(t, opt)
	d.Transport.Close() // the supervisor's MQTT link goes away; the broker stays
	select {
	case <-c.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the client kept trusting a lease nobody acknowledged")
	}
	if err := c.Err(); !errors.Is(err, client.ErrLeaseLost) || !strings.Contains(err.Error(), "no heartbeat acknowledged") {
		t.Fatalf("Err: %v", err)
	}
	if _, err := c.Begin(context.Background()); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("begin after the loss: %v", err)
	}
}

// Concurrent steps on one saga wait for each other instead of drawing
// SAGA_BUSY; ids stay unique.
func TestClientConcurrentSteps(t *testing.T) {
	d := startDaemon(t)
	c := dial(t, d.opts("planner"))
	ctx := context.Background()
	saga, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Go(func() {
			_, err := saga.Step(ctx, "base", float64(i))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := saga.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}
