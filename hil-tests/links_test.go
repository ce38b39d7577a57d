//go:build !saga_lean

package hil

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/rollback"
)

// waitLinkLost waits until the supervisor is not ready because the board's
// link is lost.
func (r *rig) waitLinkLost() {
	r.t.Helper()
	waitFor(r.t, "/readyz to report the lost link", r.file.ReadBack.Settle, func() bool {
		ready, why := r.readyz()
		return !ready && strings.Contains(why, "link lost")
	})
}

// waitWatchdog waits until the board's own watchdog has sent every output
// safe (docs/SERIAL.md §6) and, where the read-back says so, ended the
// session.
func (r *rig) waitWatchdog() {
	r.t.Helper()
	r.waitOutputs("the board's watchdog", r.poses(safe))
	st := r.state()
	if st.Faults != "" && !st.HasFault("watchdog") {
		r.t.Fatalf("outputs safe but the board reports faults %q, want watchdog", st.Faults)
	}
	if st.InSession != nil && *st.InSession {
		r.t.Fatal("the board still has a session after its watchdog fired")
	}
}

// replug puts the cable back and waits for a session and readiness (a
// halt aside).
func (r *rig) replug(halted bool) {
	r.t.Helper()
	r.check(r.rb.Replug(context.Background()))
	waitFor(r.t, "a new session after the replug", r.file.ReadBack.Settle, func() bool {
		st := r.state()
		return st.InSession == nil || *st.InSession
	})
	waitFor(r.t, "the link to come back", r.file.ReadBack.Settle, func() bool {
		ready, why := r.readyz()
		if halted {
			return !ready && !strings.Contains(why, "link lost") && !strings.Contains(why, "input mcu")
		}
		return ready
	})
}

// Scenario 7. The serial cable is pulled, first between two steps of a
// saga, then while a step is in flight.
//
// Between steps: the link is lost, the supervisor is not ready, the next
// step is refused NOT_READY and nothing moves; the board's watchdog sends
// its outputs safe. Replugged, the session comes back and the supervisor is
// ready again. The saga's fate: it is still open (the journal says its step
// was applied), and aborting it drives the output back to its prior:
// clean.
//
// In flight: the step is in doubt (STEP_IN_DOUBT); its unwind cannot reach
// the board, so the report is partial (nothing compensated) and, with
// on_compensation_failure: halt, the supervisor halts. Replugged, it stays
// halted until an operator resets it.
func TestSerialUnplug(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.need(CapUnplug)
	ctx := context.Background()
	t.Cleanup(func() { r.rb.Replug(context.Background()) })
	a, b := r.plan.Actuators[0], r.plan.Actuators[1]
	ctl := r.newAgent(r.agentName("unplug"))
	ctl.hello(60 * time.Second)

	t.Log("between steps")
	r.setup()
	saga := ctl.begin()
	r.stepTo(ctl, saga, a, a.Move)
	moved := r.poses(setupPose)
	moved[a.Name] = at(a.Move)
	r.waitOutputs("the first step", moved)
	r.check(r.rb.Unplug(ctx))
	r.waitLinkLost()
	ctl.refused("NOT_READY", map[string]any{"op": "step", "saga": saga, "actuator": b.Name, "value": b.Move})
	r.waitWatchdog()
	r.replug(false)
	st := r.status()
	if len(st.OpenSagas) != 1 || st.OpenSagas[0] != saga {
		t.Fatalf("after the replug: open sagas %v, want [%d]", st.OpenSagas, saga)
	}
	r.checkBelief("after the replug")
	rep := ctl.must(map[string]any{"op": "abort", "saga": saga, "reason": "hil: the cable came back"})
	r.checkCleanReport("abort after the replug", rep.Report, saga, []string{a.Name})
	afterAbort := r.poses(safe)
	afterAbort[a.Name] = at(a.Setup)
	r.waitOutputs("the abort puts the stepped output back at its prior", afterAbort)
	t.Logf("between steps: the saga stayed open through the outage; its abort was clean")

	t.Log("in flight")
	r.setup()
	saga = ctl.begin()
	r.stepTo(ctl, saga, a, a.Move)
	r.waitOutputs("the first step", moved)
	pace(b, b.Setup, b.Move) // before the cable goes: the step must follow it at once
	r.check(r.rb.Unplug(ctx))
	// Sent at once, this step reaches a supervisor that does not yet know
	// (the link times out after link_timeout): it goes out and is never
	// answered.
	rep = ctl.step(saga, b.Name, b.Move)
	onFailure := r.plan.Config.Unwind.OnCompensationFailure
	switch {
	case rep.Code == "STEP_IN_DOUBT":
		if rep.Report == nil || rep.Report.Verdict != "partial" {
			t.Fatalf("in-doubt step's report: %+v, want partial (nothing can reach the board)", rep.Report)
		}
		var buckets []string
		for _, s := range rep.Report.Steps {
			if s.Bucket == "compensated" {
				t.Fatalf("step %d (%s) reported compensated while the cable is out: %+v", s.Step, s.Actuator, rep.Report)
			}
			buckets = append(buckets, fmt.Sprintf("%s:%s/%s", s.Actuator, s.Outcome, s.Bucket))
		}
		if first := rep.Report.Steps[0]; first.Actuator != b.Name || first.Outcome != "in_doubt" {
			t.Fatalf("the in-doubt step is not first in the report: %+v", rep.Report)
		}
		t.Logf("in flight: STEP_IN_DOUBT, unwind partial: %s", strings.Join(buckets, " "))
		if onFailure == rollback.HaltOnFailure {
			if !r.status().Halted {
				t.Fatal("a failed compensation did not halt (on_compensation_failure: halt)")
			}
		}
	case rep.Code == "NOT_READY":
		// The link loss was noticed first (a heartbeat went unanswered
		// just before the step): refused, nothing sent.
		t.Logf("in flight: the supervisor saw the link go before the step arrived: NOT_READY")
	default:
		t.Fatalf("a step sent as the cable is pulled: ok=%v %s %q, want STEP_IN_DOUBT (or NOT_READY)", rep.OK, rep.Code, rep.Message)
	}
	r.waitLinkLost()
	r.waitWatchdog()
	halted := r.status().Halted
	r.replug(halted)
	if halted {
		r.resetUntilReady()
		r.waitReady()
	} else {
		ctl.must(map[string]any{"op": "abort", "saga": saga})
	}
	r.checkBelief("after the replug and reset")
}

// stopBroker, crashBroker and startBroker act on the MQTT broker: the sim
// rig's own mosquitto, or the rig file's broker_control commands.
func (r *rig) stopBroker() {
	r.t.Helper()
	if r.sim {
		r.mosq.stop()
		return
	}
	r.runBrokerControl(r.file.BrokerControl.Stop)
}

func (r *rig) crashBroker() {
	r.t.Helper()
	if r.sim {
		r.mosq.crash()
		return
	}
	r.runBrokerControl(r.file.BrokerControl.Kill)
}

func (r *rig) startBroker() {
	r.t.Helper()
	if r.sim {
		r.mosq.start()
		return
	}
	r.runBrokerControl(r.file.BrokerControl.Start)
}

func (r *rig) runBrokerControl(argv []string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		r.t.Fatalf("broker_control %q: %v\n%s", argv, err, out)
	}
}

// Scenario 8, the broker dies. The MQTT broker (an external mosquitto) is
// killed mid-saga and started again. What a user should expect:
//
//   - the supervisor itself goes on: leases are timed on its own clock, so
//     a controller whose lease runs out during the outage has its saga
//     unwound — at the board, no broker needed — and its next command is
//     refused LEASE_EXPIRED, nothing of it replayed;
//   - a controller whose lease outlasts the outage reconnects and continues
//     its saga under the same lease;
//   - the supervisor reconnects and republishes its retained status and
//     actuator states, which a broker without persistence has forgotten.
//
// The TTLs make it deterministic: 1 s for the short lease (the outage is
// held until its unwind is seen at the board), 30 s for the long one.
func TestBrokerCrash(t *testing.T) {
	r := newRig(t, rigOptions{mosquitto: true})
	r.need(CapBrokerCrash)
	r.brokerOutage(false)
}

// Scenario 8, the broker restarts gracefully. mosquitto publishes the will
// of every client still connected when it shuts down (seen with 2.0.x), so
// a graceful restart ends every controller's lease at once and unwinds its
// saga, whatever its TTL. A broker that sends no wills leaves each lease
// to its TTL instead; the scenario asserts whichever happened, consistently:
// an ended lease's saga is unwound and refused after the restart, a live
// one continues.
func TestBrokerRestart(t *testing.T) {
	r := newRig(t, rigOptions{mosquitto: true})
	r.need(CapBrokerRestart)
	r.brokerOutage(true)
}

// brokerOutage runs the broker scenario: two controllers, a long and a
// short lease, each with a saga holding one output moved; the broker goes
// away (gracefully or not) and comes back.
func (r *rig) brokerOutage(graceful bool) {
	t := r.t
	if r.usesEmbeddedBroker() {
		if r.sim {
			t.Fatal("the sim rig must run its own mosquitto for the broker scenarios")
		}
		t.Skipf("rig %s: the config uses the embedded broker, which cannot restart without the supervisor", *rigFlag)
	}
	r.setup()
	a, b := r.plan.Actuators[0], r.plan.Actuators[1]
	steady := r.newAgent(r.agentName("steady"))
	steady.hello(30 * time.Second)
	steady.heartbeat()
	brief := r.newAgent(r.agentName("brief"))
	brief.hello(time.Second)
	brief.heartbeat()
	s1, s2 := steady.begin(), brief.begin()
	r.stepTo(steady, s1, a, a.Move)
	r.stepTo(brief, s2, b, b.Move)
	both := r.poses(setupPose)
	both[a.Name], both[b.Name] = at(a.Move), at(b.Move)
	r.waitOutputs("both sagas' steps", both)

	outage := time.Now()
	if graceful {
		r.stopBroker()
	} else {
		r.crashBroker()
	}
	// The short lease ends (its will, or its TTL on the supervisor's
	// clock); its saga is unwound at the board while the broker is down.
	ended := func(st supStatus, agent string, saga uint64) bool {
		return !st.hasLease(agent) && !slices.Contains(st.OpenSagas, saga)
	}
	waitFor(t, "the short lease to end and its saga to be unwound", 10*time.Second, func() bool {
		return ended(r.status(), brief.name, s2)
	})
	if graceful {
		// Wills come in one burst as the broker shuts down: if the short
		// lease ended by its will, the long one's is right behind it.
		// Give it the short TTL to show up (a window, not a speed test).
		until := time.Now().Add(time.Second)
		for time.Now().Before(until) && !ended(r.status(), steady.name, s1) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	st := r.status()
	if st.Ready || !strings.Contains(strings.Join(st.Reasons, "; "), "input mqtt: ") {
		t.Errorf("with the broker down the supervisor says ready %v (reasons %q): the link is part of readiness", st.Ready, st.Reasons)
	}
	steadyLives := st.hasLease(steady.name)
	switch {
	case !graceful && !steadyLives:
		t.Fatalf("the broker died without wills, yet the 30 s lease ended within the outage: leases %+v", st.Leases)
	case graceful && !steadyLives:
		t.Logf("graceful stop: the broker published the wills; both leases ended at once")
	case graceful:
		t.Logf("graceful stop: the broker published no wills; the leases run on their TTLs")
	}
	want := r.poses(setupPose)
	if steadyLives {
		want[a.Name] = at(a.Move)
		if len(st.OpenSagas) != 1 || st.OpenSagas[0] != s1 {
			t.Fatalf("during the outage: open sagas %v, want [%d]", st.OpenSagas, s1)
		}
	}
	r.waitOutputs("the ended leases' sagas unwound during the outage", want)

	r.startBroker()
	// A new connection sees the retained status and states again: the
	// restarted broker kept nothing, so the supervisor republished them.
	// The supervisor is ready again only once both its connections (its
	// commands' and its e-stop's) are back: the status says when.
	watcher := r.newAgent(r.agentName("watch"))
	waitFor(t, "the supervisor's retained status after the restart, ready", 30*time.Second, func() bool {
		s, n := watcher.lastStatus()
		return n > 0 && s.State == "online" && s.Ready
	})
	waitFor(t, "the retained actuator states after the restart", 30*time.Second, func() bool {
		for _, act := range r.plan.Actuators {
			if v, ok := watcher.state(act.Name); !ok || v != want[act.Name].value {
				return false
			}
		}
		return true
	})
	waitFor(t, "both controllers to reconnect", 30*time.Second, func() bool {
		return steady.connects() >= 2 && brief.connects() >= 2
	})
	t.Logf("broker back, status republished, both controllers reconnected %v after the broker went", time.Since(outage).Round(time.Millisecond))

	brief.stopHeartbeat()
	brief.refused("LEASE_EXPIRED", map[string]any{"op": "step", "saga": s2, "actuator": b.Name, "value": b.Move})
	if steadyLives {
		// The long lease survived: the saga goes on and commits.
		r.stepTo(steady, s1, b, b.Move)
		r.waitOutputs("the steady saga goes on", both)
		steady.must(map[string]any{"op": "commit", "saga": s1})
		want = both
	} else {
		steady.stopHeartbeat()
		steady.refused("LEASE_EXPIRED", map[string]any{"op": "step", "saga": s1, "actuator": b.Name, "value": b.Move})
	}
	r.assertOutputs("nothing of an ended lease was replayed", want)
}
