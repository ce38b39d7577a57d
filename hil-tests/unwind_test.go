//go:build !saga_lean

package hil

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/api"
)

// checkCleanReport fails the test unless rep is a clean unwind of saga:
// one compensated step per actuator in want, in unwind order (last step
// first), each driven back to its setup pose, the prior the saga found.
func (r *rig) checkCleanReport(what string, rep *api.ReportJSON, saga uint64, want []string) {
	r.t.Helper()
	if rep == nil {
		r.t.Fatalf("%s: no rollback report", what)
	}
	if rep.Saga != saga || rep.Verdict != "clean" {
		r.t.Fatalf("%s: report of saga %d verdict %q, want saga %d clean: %+v", what, rep.Saga, rep.Verdict, saga, rep)
	}
	setup := map[string]float64{}
	for _, a := range r.plan.Actuators {
		setup[a.Name] = a.Setup
	}
	var got []string
	for _, s := range rep.Steps {
		if s.Bucket != "compensated" {
			r.t.Fatalf("%s: step %d (%s) bucket %q in a clean report: %+v", what, s.Step, s.Actuator, s.Bucket, rep)
		}
		if s.Prior == nil || *s.Prior != setup[s.Actuator] {
			r.t.Fatalf("%s: step %d (%s) prior %v, want %v", what, s.Step, s.Actuator, s.Prior, setup[s.Actuator])
		}
		got = append(got, s.Actuator)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		r.t.Fatalf("%s: report steps %v, want %v (last step first)", what, got, want)
	}
}

// reversed returns the names of the actuators under test, last first.
func (r *rig) reversed() []string {
	var names []string
	for i := len(r.plan.Actuators) - 1; i >= 0; i-- {
		names = append(names, r.plan.Actuators[i].Name)
	}
	return names
}

// Scenario 1. An out-of-bounds step is refused with LIMIT_MAX (below the
// minimum: LIMIT_MIN; garbage: BAD_REQUEST) and nothing moves at the
// board; the saga goes on, and a valid step in it does move.
func TestLimitRefusal(t *testing.T) {
	r := newRig(t, rigOptions{})
	var a PlannedActuator
	for _, a = range r.plan.Actuators {
		if !a.Clamp {
			break
		}
	}
	if a.Clamp {
		if r.sim {
			t.Fatal("configs/sim.yaml: every actuator under test has policy clamp; one must reject")
		}
		t.Skipf("rig %s: every actuator under test has policy clamp, so none refuses an over-limit step", *rigFlag)
	}
	r.setup()
	before := r.state()
	ctl := r.newAgent(r.agentName("limits"))
	ctl.hello(30 * time.Second)
	saga := ctl.begin()

	ctl.refused("LIMIT_MAX", map[string]any{"op": "step", "saga": saga, "actuator": a.Name, "value": a.Max + 10})
	ctl.refused("LIMIT_MIN", map[string]any{"op": "step", "saga": saga, "actuator": a.Name, "value": a.Min - 10})
	ctl.refused("LIMIT_MAX", map[string]any{"op": "step", "saga": saga, "actuator": a.Name, "value": 1e308})
	ctl.refused("BAD_REQUEST", map[string]any{"op": "step", "saga": saga, "actuator": a.Name, "value": "90"})
	ctl.refused("ACTUATOR_UNKNOWN", map[string]any{"op": "step", "saga": saga, "actuator": "no-such-actuator", "value": 1})

	// Nothing moved: the outputs, the board's SET count and the
	// supervisor's commanded value are as they were.
	r.assertOutputs("after the refusals", r.poses(setupPose))
	after := r.state()
	if before.Stats != nil && after.Stats != nil && after.Stats.Sets != before.Stats.Sets {
		t.Fatalf("the board applied %d SETs during refused steps", after.Stats.Sets-before.Stats.Sets)
	}
	if v, _ := r.status().commanded(a.Name); v != a.Setup {
		t.Fatalf("%s commanded %v after refusals, want %v", a.Name, v, a.Setup)
	}

	// The saga is still open and the observer sees a real move: this
	// scenario could see one had a refused step leaked through.
	r.stepTo(ctl, saga, a, a.Move)
	want := r.poses(setupPose)
	want[a.Name] = at(a.Move)
	r.waitOutputs("a valid step", want)
	rep := ctl.must(map[string]any{"op": "abort", "saga": saga, "reason": "hil: limits done"})
	r.checkCleanReport("abort", rep.Report, saga, []string{a.Name})
	r.waitOutputs("abort puts it back", r.poses(setupPose))
}

// Scenario 2. A channel NAKed mid-saga: the step fails (the board promises
// nothing changed), the earlier steps are unwound, last first, each to its
// prior, and the reply's report says clean.
func TestFaultUnwind(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.need(CapNak)
	// The NAKed actuator is a board channel, stepped last; the others
	// are stepped before it.
	var naked *PlannedActuator
	var others []PlannedActuator
	for i := len(r.plan.Actuators) - 1; i >= 0; i-- {
		if a := r.plan.Actuators[i]; naked == nil && a.Driver == "mcu" {
			naked = &a
		} else {
			others = append([]PlannedActuator{a}, others...)
		}
	}
	if naked == nil {
		t.Skipf("rig %s lacks capability %q on an actuator: none under test has driver: mcu", *rigFlag, CapNak)
	}
	r.setup()
	ctx := context.Background()
	ctl := r.newAgent(r.agentName("fault"))
	ctl.hello(30 * time.Second)
	saga := ctl.begin()
	want := r.poses(setupPose)
	var order []string // unwind order: last step first
	for _, a := range others {
		r.stepTo(ctl, saga, a, a.Move)
		want[a.Name] = at(a.Move)
		order = append([]string{a.Name}, order...)
	}
	r.waitOutputs("the saga's first steps", want)

	// The board refuses the last actuator's channel (NAK FAULT).
	r.check(r.rb.Nak(ctx, naked.Output, 7))
	t.Cleanup(func() { r.rb.Nak(context.Background(), naked.Output, 0) })
	pace(*naked, naked.Setup, naked.Move)
	rep := ctl.step(saga, naked.Name, naked.Move)
	if rep.OK || rep.Code != "STEP_FAILED" {
		t.Fatalf("step on the NAKed channel: ok=%v %s %q, want STEP_FAILED", rep.OK, rep.Code, rep.Message)
	}
	r.checkCleanReport("STEP_FAILED reply", rep.Report, saga, append([]string{naked.Name}, order...))
	if s := rep.Report.Steps[0]; s.Outcome != "failed" {
		t.Fatalf("the NAKed step's outcome %q, want failed: %+v", s.Outcome, rep.Report)
	}
	r.waitOutputs("every output back at its prior", r.poses(setupPose))
	// The saga is over.
	ctl.refused("SAGA_UNKNOWN", map[string]any{"op": "step", "saga": saga, "actuator": naked.Name, "value": naked.Move})
}

// Scenario 3. A controller process dies mid-saga. Killed with SIGKILL, its
// MQTT will ends its lease at once; hung (SIGSTOP: the connection stays up,
// the heartbeats stop), its lease runs out. Either way its saga is unwound
// and the outputs return to their priors.
func TestControllerDeath(t *testing.T) {
	r := newRig(t, rigOptions{})
	watcher := r.newAgent(r.agentName("watch"))
	for _, c := range []struct {
		name string
		sig  syscall.Signal
		ttl  time.Duration
	}{
		// A TTL far longer than the test: only the will can end it in time.
		{"killed", syscall.SIGKILL, 60 * time.Second},
		// The connection stays open: only the TTL can end it.
		{"hung", syscall.SIGSTOP, 1500 * time.Millisecond},
	} {
		// Not subtests: the rig's helpers fail the scenario's own t.
		t.Logf("case %s: the controller gets %v mid-saga (lease TTL %v)", c.name, c.sig, c.ttl)
		r.setup()
		agent := r.agentName("ctl-" + c.name)
		p, saga := r.startController(agent, c.ttl)
		r.waitOutputs("the controller's steps", r.poses(func(a PlannedActuator) expect { return at(a.Move) }))
		if !r.status().hasLease(agent) {
			t.Fatalf("the controller %s holds no lease", agent)
		}
		p.cmd.Process.Signal(c.sig)
		if c.sig == syscall.SIGSTOP {
			t.Cleanup(func() { p.cmd.Process.Signal(syscall.SIGCONT) })
		}
		r.waitOutputs("outputs back at their priors after the controller died", r.poses(setupPose))
		waitFor(t, "the unwind's report on the events topic", 10*time.Second, func() bool {
			_, ok := watcher.rollbackFor(saga)
			return ok
		})
		rep, _ := watcher.rollbackFor(saga)
		r.checkCleanReport("rollback event", rep, saga, r.reversed())
		st := r.status()
		if st.hasLease(agent) || len(st.OpenSagas) != 0 {
			t.Fatalf("after the controller died: leases %+v, open sagas %v", st.Leases, st.OpenSagas)
		}
		t.Logf("case %s: saga %d unwound clean (%s)", c.name, saga, rep.Reason)
	}
}

// Scenario 4. The supervisor is killed with SIGKILL mid-saga. The board's
// watchdog sends its outputs safe; the restarted supervisor recovers the
// journal and unwinds the saga before /readyz first answers 200: at that
// moment the saga's outputs are already back at their priors and no saga is
// open. One actuator stays out of the saga (a bystander): the watchdog moved
// it too, and no saga's unwind puts it back.
func TestSupervisorKillRecovery(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.setup()
	bystander := ""
	for _, a := range r.plan.Actuators {
		if a.Safe.Mode == actuators.SafeValue {
			bystander = a.Name
			break
		}
	}
	ctl := r.newAgent(r.agentName("doomed"))
	ctl.hello(60 * time.Second)
	saga := ctl.begin()
	moved := r.poses(setupPose)
	var inSaga []PlannedActuator
	for _, a := range r.plan.Actuators {
		if a.Name != bystander {
			r.stepTo(ctl, saga, a, a.Move)
			moved[a.Name] = at(a.Move)
			inSaga = append(inSaga, a)
		}
	}
	r.waitOutputs("the saga's steps", moved)

	r.sup.kill(syscall.SIGKILL)
	// Nobody talks to the board now: its own watchdog puts it safe
	// (docs/SERIAL.md §6).
	r.waitOutputs("the board's watchdog after the supervisor died", r.poses(safe))

	r.startSupervisor()
	// The board moved the saga's outputs where the journal never saw them
	// go. The restart reads them back before anything moves, adopts what
	// it finds (journaled), and stays halted for an operator: no unwind
	// runs on a belief the journal got wrong (docs/DESIGN.md, reconcile).
	// The read-back waits for the board's first report: before it, the read
	// fails, and recovery would unwind from the journal's stale belief.
	var body string
	waitFor(t, "the restarted supervisor to answer, halted", 30*time.Second, func() bool {
		if r.sup.exited() {
			t.Fatalf("the restarted supervisor exited: %v", r.sup.cmd.ProcessState)
		}
		_, body = r.readyz()
		return strings.HasPrefix(body, "halted")
	})
	st := r.status()
	if !st.Halted || !strings.Contains(st.HaltReason, "do not read back as the journal says") {
		t.Fatalf("restarted after the board's watchdog parked the saga's outputs: halted %v (%q), want the reconcile's halt", st.Halted, st.HaltReason)
	}
	for _, a := range inSaga {
		if e := safe(a); !e.detached && !e.any && e.value != a.Move && !strings.Contains(st.HaltReason, a.Name+" reads") {
			t.Errorf("the halt reason %q does not name %s (the board moved it from %g to %g)", st.HaltReason, a.Name, a.Move, e.value)
		}
	}
	if len(st.OpenSagas) != 0 {
		t.Fatalf("halted with open sagas %v: the halt ends them", st.OpenSagas)
	}
	r.assertOutputs("the outputs after the halted restart (nothing moved)", r.poses(safe))
	if out := r.sup.out.String(); strings.Contains(out, "recovered: clean") {
		t.Fatalf("the restart reported a clean recovery: it compensated on a stale belief\n%s", out)
	}
	// The operator looks, and resets: the supervisor believes the world.
	// HTTP answers before the broker link is up: the reset waits for it
	// (409 until then).
	r.resetUntilReady()
	r.waitReady()
	r.checkBelief("after the reset")
	// The lease died with the old process: its saga cannot be continued.
	waitFor(t, "the agent to reconnect", 30*time.Second, func() bool { return ctl.connects() >= 2 || !r.usesEmbeddedBroker() })
	a := inSaga[0]
	ctl.refused("LEASE_EXPIRED", map[string]any{"op": "step", "saga": saga, "actuator": a.Name, "value": a.Move})
}

// usesEmbeddedBroker says whether the broker lives in the supervisor's
// process (and so goes down with it).
func (r *rig) usesEmbeddedBroker() bool { return r.plan.Config.MQTT.Broker == "embedded" }
