//go:build !saga_lean

package hil

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
)

// haltRule says whether a fault must, may or must not leave the
// supervisor halted.
type haltRule int

const (
	// noHalt: nothing the supervisor cannot account for happened; a
	// halt is a violation (an orderly restart needs no operator, and a
	// broker or an agent is not the robot).
	noHalt haltRule = iota
	// mayHalt: whether it halts depends on timing the soak does not
	// control (a step in flight when the cable goes cannot be unwound; a
	// board whose watchdog moved its outputs while the supervisor was
	// dead is found elsewhere than the journal says at the restart).
	mayHalt
	// mustHalt: the fault itself must halt the supervisor (the journal
	// failed, the rail sagged with action halt); not halting is a
	// violation, and the fault checks it.
	mustHalt
)

// faultKind is one kind of fault the soak injects.
type faultKind struct {
	name string
	halt haltRule
	// inject makes the fault happen to the running supervisor and takes
	// it away again, checking what must hold while it lasts. It returns
	// when the cause was removed: the recovery is timed from there.
	inject func(s *soak, k *faultKind) time.Time
	// unavailable says why this machine cannot inject it ("" if it can).
	unavailable func(s *soak) string
}

func always(*soak) string { return "" }

// daemonKeepAlive is the supervisor's MQTT keepalive (transport/mqtt): a
// broker drops a client silent for one and a half of it.
const daemonKeepAlive = 10 * time.Second

// faultKinds is every fault the soak knows.
func faultKinds() []*faultKind {
	return []*faultKind{
		{name: "broker-restart", halt: noHalt, inject: brokerFault(true), unavailable: always},
		{name: "broker-crash", halt: noHalt, inject: brokerFault(false), unavailable: always},
		{name: "serial-unplug", halt: mayHalt, inject: serialUnplug, unavailable: always},
		{name: "enospc", halt: mustHalt, inject: diskFault(false), unavailable: func(s *soak) string { return s.disk.noENOSPC }},
		{name: "eio", halt: mustHalt, inject: diskFault(true), unavailable: func(s *soak) string { return s.disk.noEIO }},
		{name: "supply-sag", halt: mustHalt, inject: supplySagFault, unavailable: always},
		{name: "sigstop", halt: mayHalt, inject: sigstopFault, unavailable: always},
		{name: "sigterm", halt: noHalt, inject: restartFault(syscall.SIGTERM), unavailable: always},
		{name: "sigkill", halt: mayHalt, inject: restartFault(syscall.SIGKILL), unavailable: always},
		{name: "agent-kill", halt: noHalt, inject: agentFault(syscall.SIGKILL), unavailable: always},
		{name: "agent-hang", halt: noHalt, inject: agentFault(syscall.SIGSTOP), unavailable: always},
		{name: "boot-no-broker", halt: mayHalt, inject: brokerDownAtBoot, unavailable: always},
		{name: "boot-no-mcu", halt: mayHalt, inject: mcuAbsentAtBoot, unavailable: always},
	}
}

// between returns a random duration in [lo, hi).
func (s *soak) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)))
}

// brokerFault stops the broker (gracefully: mosquitto sends every client's
// will, so every lease ends; or with SIGKILL: none does, the leases run on
// their TTLs) for a while and starts it again.
func brokerFault(graceful bool) func(*soak, *faultKind) time.Time {
	return func(s *soak, k *faultKind) time.Time {
		if graceful {
			s.r.mosq.stop()
		} else {
			s.r.mosq.crash()
		}
		t0 := time.Now()
		// docs/HIL.md: not ready within 2 s of losing the broker.
		if why := s.waitReasons("input mqtt", 5*time.Second); why != "" {
			s.violate(k, "the broker is down, but after %v the supervisor does not say so: %s", time.Since(t0).Round(time.Millisecond), why)
		}
		time.Sleep(s.between(0, 3*time.Second))
		removed := time.Now()
		s.r.mosq.start()
		s.keep(s.r.mosq.p)
		return removed
	}
}

// serialUnplug pulls the cable for a while: the link is lost, the board's
// watchdog sends its outputs safe; replugged, the session comes back.
func serialUnplug(s *soak, k *faultKind) time.Time {
	ctx := context.Background()
	s.check(s.r.rb.Unplug(ctx))
	if why := s.waitReasons("link lost", 10*time.Second); why != "" {
		s.violate(k, "the cable is out but the supervisor does not say the link is lost: %s", why)
	}
	if m := s.waitWorld(s.r.poses(safe), 10*time.Second); m != "" {
		s.violate(k, "the board's watchdog did not send its outputs safe: %s", m)
	}
	time.Sleep(s.between(0, 2*time.Second))
	removed := time.Now()
	s.check(s.r.rb.Replug(ctx))
	return removed
}

// diskFault fills the journal's file system (ENOSPC) or fails it (EIO)
// while the workers step. The supervisor must stop (JOURNAL_FAILED: a
// journal that cannot record an intent cannot permit an effect), halt and
// send the outputs safe, and keep them there; only a restart on a working
// journal brings it back. The operator frees the disk (or remounts it)
// and restarts the supervisor.
func diskFault(eio bool) func(*soak, *faultKind) time.Time {
	return func(s *soak, k *faultKind) time.Time {
		if eio {
			s.check(s.disk.shutdown())
		} else {
			s.check(s.disk.fill())
		}
		var why string
		waitUntil(30*time.Second, func() bool {
			st, err := s.tryStatus()
			why = fmt.Sprint(err)
			if err == nil {
				why = fmt.Sprintf("journal error %q, halted %v (%s)", st.Journal.Error, st.Halted, st.HaltReason)
			}
			return err == nil && st.Journal.Error != "" && st.Halted
		})
		st, err := s.tryStatus()
		if err != nil || st.Journal.Error == "" || !st.Halted {
			s.violate(k, "30 s of steps on a failed journal, and the supervisor has not stopped: %s", why)
		} else {
			s.stats[k.name].halts++
			s.logf("  the journal failed: %s", st.Journal.Error)
			s.checkHalt(k, 0, false)
		}
		if code, body := s.r.post("/api/v1/reset", s.r.plan.Token, ""); code == http.StatusOK {
			s.violate(k, "reset accepted on a failed journal: %s", body)
		}
		// It ends with an error (the journal failed): not a clean stop.
		s.stopDaemon(k, syscall.SIGTERM, false)
		if eio {
			s.check(s.disk.remount())
		} else {
			s.check(s.disk.free())
		}
		return s.startDaemon()
	}
}

// supplySagFault drops the rail below its minimum for longer than its
// debounce: the supervisor halts (action halt) no sooner than the
// debounce, refuses a reset while the rail is low, and stays halted after
// it is restored until an operator resets.
func supplySagFault(s *soak, k *faultKind) time.Time {
	ctx := context.Background()
	sup := s.r.plan.Supply
	nominal := (sup.Min + sup.Max) / 2
	t0 := time.Now()
	s.check(s.r.rb.Volts(ctx, sup.Index, sup.Min-1))
	tripped := waitUntil(sup.Debounce+10*time.Second, func() bool {
		st, err := s.tryStatus()
		return err == nil && st.Halted
	})
	took := time.Since(t0)
	switch {
	case !tripped:
		s.violate(k, "the rail has been at %g V (min %g) for %v and the supervisor has not halted", sup.Min-1, sup.Min, took.Round(time.Millisecond))
	case took < sup.Debounce:
		s.violate(k, "halted %v after the sag began, before the debounce of %v", took, sup.Debounce)
	default:
		s.checkHalt(k, 0, true)
		if code, body := s.r.post("/api/v1/reset", s.r.plan.Token, ""); code != http.StatusConflict {
			s.violate(k, "reset while the rail is low: %d %s, want 409", code, body)
		}
	}
	time.Sleep(s.between(0, time.Second))
	removed := time.Now()
	s.check(s.r.rb.Volts(ctx, sup.Index, nominal))
	return removed
}

// sigstopFault stops the supervisor past its MQTT keepalive: the broker
// drops it and publishes its will (the status says offline), the board's
// watchdog sends the outputs safe, and the leases run out on its clock.
// Continued, it must notice all of that.
func sigstopFault(s *soak, k *faultKind) time.Time {
	t0 := time.Now()
	s.signal(syscall.SIGSTOP)
	// mosquitto drops a client silent for 1.5 keepalives, checked every
	// second or two.
	if !waitUntil(daemonKeepAlive*3/2+10*time.Second, func() bool {
		st, _ := s.probe.lastStatus()
		return st.State == api.StateOffline
	}) {
		st, _ := s.probe.lastStatus()
		s.violate(k, "the supervisor has been stopped for %v, past its keepalive, yet its status says %+v (want its will, offline)",
			time.Since(t0).Round(time.Second), st)
	}
	time.Sleep(s.between(0, 2*time.Second))
	s.logf("  stopped for %v", time.Since(t0).Round(100*time.Millisecond))
	removed := time.Now()
	s.signal(syscall.SIGCONT)
	return removed
}

// restartFault ends the supervisor with sig and starts it again: SIGTERM
// is the orderly stop (open sagas unwound, outputs parked, exit 0),
// SIGKILL a crash. After a crash the board's watchdog sends the outputs
// safe, a move the journal cannot know of: the restart must find it
// before anything moves (startDaemon).
func restartFault(sig syscall.Signal) func(*soak, *faultKind) time.Time {
	return func(s *soak, k *faultKind) time.Time {
		s.stopDaemon(k, sig, true)
		if sig == syscall.SIGKILL {
			s.waitSessionEnd(k)
		}
		return s.startDaemon()
	}
}

// waitSessionEnd checks that the board ends its session once the
// supervisor is dead (its watchdog).
func (s *soak) waitSessionEnd(k *faultKind) {
	var last string
	if !waitUntil(10*time.Second, func() bool {
		st, err := s.r.rb.State(context.Background())
		last = fmt.Sprint(st, err)
		return err == nil && st.InSession != nil && !*st.InSession
	}) {
		s.violate(k, "the board kept its session 10 s after the supervisor died: %s", last)
	}
}

// agentFault takes one worker's actuator for a controller process (the
// project's Go client) that steps it in a saga and holds the saga open,
// then kills it (SIGKILL: its will ends the lease at once) or hangs it
// (SIGSTOP with a short TTL: the connection stays, the heartbeats stop,
// the lease runs out). Its saga must be unwound clean: the actuator back
// where the saga found it. The other workers go on meanwhile.
func agentFault(sig syscall.Signal) func(*soak, *faultKind) time.Time {
	return func(s *soak, k *faultKind) time.Time {
		wk := s.work.workers[s.rng.IntN(len(s.work.workers))]
		if err := s.work.pause(90*time.Second, wk); err != nil {
			s.violate(k, "%v", err)
			return time.Now()
		}
		defer s.work.resume()
		act := wk.act
		st, err := s.tryStatus()
		s.check(err)
		prior, _ := st.commanded(act.Name)
		var steps []controllerStep
		for range 1 + s.rng.IntN(3) {
			steps = append(steps, controllerStep{Actuator: act.Name, Value: float64(int(act.Min) + s.rng.IntN(int(act.Max-act.Min)+1))})
		}
		ttl := 60 * time.Second // only the will can end it in time
		if sig == syscall.SIGSTOP {
			ttl = 1500 * time.Millisecond // only the TTL can end it
		}
		s.controllers++
		name := fmt.Sprintf("soak-controller-%d", s.controllers)
		p, saga, err := s.r.tryStartControllerSteps(name, ttl, steps)
		if err != nil && strings.Contains(err.Error(), "STEP_IN_DOUBT") && strings.Contains(err.Error(), "unwound: clean") {
			// One of its steps went in doubt (a serial SET unanswered
			// under load, say) and the supervisor unwound its saga clean:
			// the honest answer, nothing lost. The four views are checked
			// after the fault as after any; the controller starts again.
			s.logf("  the controller's step went in doubt and its saga was unwound clean (%v): it starts again", err)
			s.startInDoubt++
			p, saga, err = s.r.tryStartControllerSteps(name, ttl, steps)
		}
		if err != nil {
			// Refused at its start: the supervisor halted by something
			// else meanwhile (a serial link lost under load, say). That
			// halt is the supervisor's to keep, and an operator's to
			// reset; then the controller starts again.
			st, serr := s.tryStatus()
			if serr != nil || !st.Halted {
				s.violate(k, "a controller could not start, the supervisor not halted: %v (status: %v)", err, serr)
				return time.Now()
			}
			s.logf("  halted before the fault (%s): the operator resets, the controller starts again", st.HaltReason)
			s.betweenHalts++
			s.reset(k, s.journalMark())
			if p, saga, err = s.r.tryStartControllerSteps(name, ttl, steps); err != nil {
				s.violate(k, "a controller could not start after the reset: %v", err)
				return time.Now()
			}
		}
		s.logf("  controller %s holds saga %d: %s %g → %g", name, saga, act.Name, prior, steps[len(steps)-1].Value)
		p.cmd.Process.Signal(sig)
		removed := time.Now()
		defer p.kill(syscall.SIGKILL)
		var last string
		if !waitUntil(15*time.Second, func() bool {
			st, err := s.tryStatus()
			if err != nil {
				last = err.Error()
				return false
			}
			v, _ := st.commanded(act.Name)
			last = fmt.Sprintf("lease held %v, open sagas %v, %s commanded %g", st.hasLease(name), st.OpenSagas, act.Name, v)
			return !st.hasLease(name) && !slices.Contains(st.OpenSagas, saga) && v == prior
		}) {
			s.violate(k, "the controller's saga %d was not unwound to %s=%g within 15 s: %s", saga, act.Name, prior, last)
			return removed
		}
		if !waitUntil(10*time.Second, func() bool { _, ok := wk.a.rollbackFor(saga); return ok }) {
			s.violate(k, "no rollback event for the controller's saga %d", saga)
		} else if rep, _ := wk.a.rollbackFor(saga); rep.Verdict != "clean" {
			s.violate(k, "the controller's saga %d was unwound %s: %+v", saga, rep.Verdict, rep)
		}
		return removed
	}
}

// signal sends sig to the running supervisor.
func (s *soak) signal(sig syscall.Signal) {
	s.t.Helper()
	if err := s.r.sup.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("signalling the supervisor %v: %v", sig, err)
	}
}

// stopDaemon ends the supervisor with sig and waits for it, up to 20 s.
// On a working journal SIGTERM must end it in an orderly way (clean: exit
// 0).
func (s *soak) stopDaemon(k *faultKind, sig syscall.Signal, clean bool) {
	s.t.Helper()
	p := s.r.sup
	t0 := time.Now()
	s.signal(sig)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		s.violate(k, "the supervisor did not exit within 20 s of %v: killed", sig)
		p.cmd.Process.Kill()
		<-p.done
		return
	}
	if sig == syscall.SIGTERM && clean && !p.cmd.ProcessState.Success() {
		s.violate(k, "the supervisor ended %v on SIGTERM, want exit 0", p.cmd.ProcessState)
	}
	s.logf("  the supervisor ended in %v: %v", time.Since(t0).Round(time.Millisecond), p.cmd.ProcessState)
}

// startDaemon starts the supervisor again (it does not wait) and returns
// when. First it works out, from the journal and the board's outputs as
// they are now, which actuators the restart must find elsewhere than the
// journal says (mustFind): it must then come up halted before anything
// moves.
func (s *soak) startDaemon() time.Time {
	s.t.Helper()
	world, err := s.r.rb.State(context.Background())
	s.check(err)
	s.mustFind, err = mustReconcile(s.cfg, s.r.plan, s.disk.JournalDir(), world)
	s.check(err)
	start := time.Now()
	s.r.startSupervisor()
	s.keep(s.r.sup)
	return start
}

// check fails the soak on a harness error (not the supervisor's): the
// soak cannot go on, and says what it found so far.
func (s *soak) check(err error) {
	s.t.Helper()
	if err != nil {
		where := "before the first fault"
		if s.current != nil {
			where = fmt.Sprintf("in fault #%d (%s)", s.index, s.current.name)
		}
		s.harness = append(s.harness, fmt.Sprintf("%s, %.1fs: %v", where, time.Since(s.began).Seconds(), err))
		s.t.Fatalf("soak harness: %v\n(%s, %.0f s into the soak, %d violations so far; not the supervisor's failure: the soak cannot go on)\nthe figures so far:\n%s",
			err, where, time.Since(s.began).Seconds(), len(s.violations), s.report())
	}
}

// waitUntil polls cond every 20 ms for up to d and reports whether it held.
func waitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitReasons waits until the supervisor is not ready for a reason
// containing want, and returns "" or what it said instead.
func (s *soak) waitReasons(want string, d time.Duration) string {
	var last string
	if waitUntil(d, func() bool {
		st, err := s.tryStatus()
		if err != nil {
			last = err.Error()
			return false
		}
		last = strings.Join(st.Reasons, "; ")
		return !st.Ready && strings.Contains(last, want)
	}) {
		return ""
	}
	return last
}

// waitWorld waits until the read-back shows want, and returns "" or the
// last difference.
func (s *soak) waitWorld(want map[string]expect, d time.Duration) string {
	last := "no read-back"
	if waitUntil(d, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := s.r.rb.State(ctx)
		if err != nil {
			last = err.Error()
			return false
		}
		last = s.r.mismatch(st, want)
		return last == ""
	}) {
		return ""
	}
	return last
}
