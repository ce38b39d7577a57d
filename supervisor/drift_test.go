package supervisor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

const testToken = "operator-token-0123456789abcdef-test"

func codeOf(err error) string {
	var e *api.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// drifting is a driver whose device moved the output to at (armed), as a
// board's restart or watchdog does.
type drifting struct {
	actuators.Driver
	armed atomic.Bool
	at    atomic.Value // float64
	// hold, if set, holds Set after the device took the value (its answer
	// in transit) until it is closed.
	hold chan struct{}
	// unreachable: Set fails, the effect in doubt (a board out of reach).
	unreachable atomic.Bool
}

func (d *drifting) Drifted(commanded float64) (float64, bool) {
	at, _ := d.at.Load().(float64)
	if !d.armed.Load() || commanded == at {
		return 0, false
	}
	return at, true
}

func (d *drifting) Set(ctx context.Context, v float64) error {
	if d.unreachable.Load() {
		return fmt.Errorf("the board: %w", actuators.ErrLinkLost)
	}
	if err := d.Driver.Set(ctx, v); err != nil {
		return err
	}
	d.at.Store(v)
	if d.hold != nil {
		<-d.hold
	}
	return nil
}

// A supervisor whose device moved an output is not ready until it has
// adopted the device's value: a board's report can arrive between the
// poller's adoption and its readiness check, and until the next round the
// supervisor said ready while it believed the output elsewhere (the AVR
// rig's TestAVRResetMidSaga saw it after an MCU reset).
func TestNotReadyWhileADriftIsNotAdopted(t *testing.T) {
	d := &drifting{}
	d.at.Store(42.0)
	s, _ := newTestSupervisorWith(t, func(c *config.Config) { c.Agents.Allow = nil }, func(o *Options) {
		o.PollEvery = time.Hour // the test runs the rounds
		a := o.Actuators.Get("gripper")
		d.Driver = a.Driver
		a.Driver = d
	})
	if st := s.Status(); !st.Ready {
		t.Fatalf("before the drift: not ready: %v", st.Reasons)
	}
	d.armed.Store(true)
	st := s.Status()
	if st.Ready || !strings.Contains(strings.Join(st.Reasons, "; "), "actuator gripper: its device reports 42") {
		t.Fatalf("the device moved the gripper, not yet adopted: ready %v, reasons %q", st.Ready, st.Reasons)
	}
	s.adoptDrift()
	if c, _ := s.engine.Commanded("gripper"); c != 42 {
		t.Fatalf("after adopting: commanded %g, want 42", c)
	}
	if st := s.Status(); !st.Ready {
		t.Fatalf("after adopting the device's value: not ready: %v", st.Reasons)
	}
}

// A step's own effect is no drift: while its answer is in transit the
// device already reports the new value, and the supervisor stays ready.
func TestAStepInFlightIsNoDrift(t *testing.T) {
	d := &drifting{hold: make(chan struct{})}
	s, _ := newTestSupervisorWith(t, func(c *config.Config) { c.Agents.Allow = nil }, func(o *Options) {
		o.PollEvery = time.Hour
		a := o.Actuators.Get("gripper")
		d.Driver = a.Driver
		a.Driver = d
	})
	c0, _ := s.engine.Commanded("gripper")
	d.at.Store(c0)
	d.armed.Store(true)
	now := time.Now()
	call := func(payload string) api.Reply {
		req, derr := api.DecodeRequest([]byte(payload), 8192)
		got := make(chan api.Reply, 1)
		s.Submit(req.Agent, req, derr, now, func(r api.Reply) { got <- r })
		return <-got
	}
	h := call(`{"id":"h1","agent":"planner","op":"hello","ttl_ms":60000}`)
	lease := fmt.Sprintf(`"lease":%q,"epoch":%d`, h.Lease, h.Epoch)
	saga := call(`{"id":"b1","agent":"planner","op":"begin",` + lease + `}`).Saga
	done := make(chan api.Reply, 1)
	go func() {
		done <- call(fmt.Sprintf(`{"id":"s1","agent":"planner","op":"step",%s,"saga":%d,"actuator":"gripper","value":10}`, lease, saga))
	}()
	deadline := time.Now().Add(10 * time.Second)
	for at, _ := d.at.Load().(float64); at != 10; at, _ = d.at.Load().(float64) {
		if time.Now().After(deadline) {
			t.Fatal("the step never reached the driver")
		}
		time.Sleep(time.Millisecond)
	}
	st := s.Status()
	close(d.hold)
	if r := <-done; !r.OK {
		t.Fatalf("the step: %s %s", r.Code, r.Message)
	}
	if !st.Ready {
		t.Fatalf("with a step's answer in transit: not ready: %q", st.Reasons)
	}
}

// A halt whose safe moves failed (the board out of reach) leaves SAFE
// records in the journal for values the outputs do not hold. A reset must
// not clear it then: it tries the safe policies again and is refused
// (NOT_READY) while they fail, and while an output's read-back is not its
// safe value; once they take, it resets. (With HIL_AVR_NOISE_EVERY=23 on
// the AVR rig, a reset was accepted with the journal saying safe and the
// pins elsewhere.)
func TestResetRefusedWhileTheSafeStateDoesNotHold(t *testing.T) {
	d := &drifting{}
	s, _ := newTestSupervisorWith(t, func(c *config.Config) { c.Agents.Allow = nil }, func(o *Options) {
		o.PollEvery = time.Hour
		a := o.Actuators.Get("elbow") // safe: {value: 45}
		d.Driver = a.Driver
		a.Driver = d
	})
	c0, _ := s.engine.Commanded("elbow")
	d.at.Store(c0)
	d.armed.Store(true)
	d.unreachable.Store(true)
	if _, err := s.engine.Halt("test: e-stop"); err == nil {
		t.Fatal("the halt's safe move on an unreachable board succeeded")
	}
	err := s.Reset(testToken, "operator")
	if codeOf(err) != api.CodeNotReady || !strings.Contains(err.Error(), "safe policies did not all take") {
		t.Fatalf("reset with the elbow's safe move failed: %v, want NOT_READY naming the safe policies", err)
	}
	if h, _ := s.engine.Halted(); !h {
		t.Fatal("the refused reset cleared the halt")
	}
	// The board answers again but holds the elbow elsewhere than safe
	// (its report): the retried move takes, the read-back then agrees.
	d.unreachable.Store(false)
	if err := s.Reset(testToken, "operator"); err != nil {
		t.Fatalf("reset once the safe move takes: %v", err)
	}
	if c, _ := s.engine.Commanded("elbow"); c != 45 {
		t.Fatalf("after the reset: elbow commanded %g, want its safe value 45", c)
	}

	// Halted with every safe move taken, but the device reports the elbow
	// elsewhere: refused, naming it.
	if _, err := s.engine.Halt("test: again"); err != nil {
		t.Fatal(err)
	}
	d.at.Store(30.0)
	err = s.Reset(testToken, "operator")
	if codeOf(err) != api.CodeNotReady || !strings.Contains(err.Error(), "elbow") || !strings.Contains(err.Error(), "30") {
		t.Fatalf("reset with the elbow read back off its safe value: %v, want NOT_READY naming it", err)
	}
	d.at.Store(45.0)
	if err := s.Reset(testToken, "operator"); err != nil {
		t.Fatalf("reset with the read-back at the safe value: %v", err)
	}
}
