//go:build !saga_lean

package hil

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// Bounds on the soak's waits. They are hang guards: a supervisor that
// needs longer than these to come back from one fault is reported.
const (
	settleBound = 60 * time.Second // from the fault's removal to ready, or halted awaiting an operator
	agreeBound  = 20 * time.Second // for the four views to agree once the workers are paused
	pauseBound  = 90 * time.Second // for the workers to reach a saga boundary
)

// runFault runs one fault and the checks after it.
func (s *soak) runFault(k *faultKind) {
	st := s.stats[k.name]
	st.injected++
	s.current = k
	s.work.resume()
	// Let the workers get sagas in flight.
	time.Sleep(s.between(300*time.Millisecond, 1500*time.Millisecond))
	mark := s.journalMark()
	s.logf("#%d %s (journal at record %d)", s.index, k.name, mark)
	removed := k.inject(s, k)
	took, halted, why, ok := s.settle(k, removed)
	if !ok {
		s.suspect = true
		return
	}
	st.recovered = append(st.recovered, took)
	if len(s.mustFind) > 0 && !halted {
		s.violate(k, "the restart did not find what its journal got wrong before moving anything (%s): it came up ready; its log: %s",
			mismatchList(s.mustFind), grepLines(s.r.sup.out.String(), "reconcile", "recovered"))
	}
	s.mustFind = nil
	if s.haltedMissing != "" && !halted {
		s.violate(k, "halted while the part was missing (%s), ready once it was back without a reset: the halt did not latch", s.haltedMissing)
	}
	s.haltedMissing = ""
	outcome := "ready"
	if halted {
		st.halts++
		outcome = "halted (" + why + ")"
		if k.halt == noHalt {
			s.violate(k, "halted after a fault that must not halt: %s", why)
		}
		s.checkHalt(k, mark, true)
		s.reset(k, mark)
	}
	s.logf("  %s %v after the fault was removed", outcome, took.Round(time.Millisecond))
	if err := s.work.pause(pauseBound); err != nil {
		s.violate(k, "%v: is the supervisor answering?", err)
		s.suspect = true
		return
	}
	s.checkInvariants(k)
}

// journalMark is the journal's last durable record now (0 if the status
// cannot be read): records after it were written during the fault. Not
// the last record: a record that rides (APPLIED, REFUSED) is durable only
// at the next sync, and a supervisor killed before it is lost, its number
// given to the next process's first record (a HALT at its start).
func (s *soak) journalMark() uint64 {
	st, err := s.tryStatus()
	if err != nil {
		return 0
	}
	return st.Journal.Durable
}

// tryStatus reads /api/v1/status, returning an error where rig.status
// would fail the test: the supervisor may be down.
func (s *soak) tryStatus() (supStatus, error) {
	var st supStatus
	code, body := s.r.get("/api/v1/status")
	if code != http.StatusOK {
		return st, fmt.Errorf("/api/v1/status: %d %s", code, strings.TrimSpace(body))
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		return st, fmt.Errorf("/api/v1/status %q: %w", body, err)
	}
	return st, nil
}

// settle waits, from the fault's removal, until the supervisor is ready,
// or halted with nothing else in the way (what an operator resets). ok is
// false when it did neither (a violation is recorded).
func (s *soak) settle(k *faultKind, removed time.Time) (took time.Duration, halted bool, why string, ok bool) {
	var last string
	done := waitUntil(settleBound, func() bool {
		if s.r.sup.exited() {
			return true
		}
		st, err := s.tryStatus()
		if err != nil {
			last = err.Error()
			return false
		}
		if st.Ready {
			return true
		}
		if st.Halted && onlyHalted(st.Reasons) {
			halted, why = true, st.HaltReason
			return true
		}
		last = strings.Join(st.Reasons, "; ")
		return false
	})
	took = time.Since(removed)
	switch {
	case s.r.sup.exited():
		s.violate(k, "the supervisor exited on its own: %v", s.r.sup.cmd.ProcessState)
		return took, false, "", false
	case !done:
		s.violate(k, "neither ready nor halted %v after the fault was removed: %s", settleBound, last)
		return took, false, "", false
	}
	return took, halted, why, true
}

// onlyHalted reports whether the halt is all that stands between the
// supervisor and ready.
func onlyHalted(reasons []string) bool {
	for _, r := range reasons {
		if !strings.HasPrefix(r, "halted") {
			return false
		}
	}
	return true
}

// checkHalt checks that a latched halt is honoured: every output at its
// safe policy and staying there while a probe and the workers try to move
// things (no step is admitted, the board applies no SET), the retained
// status says halted, and — journaled — a HALT record was written after
// mark.
func (s *soak) checkHalt(k *faultKind, mark uint64, journaled bool) {
	if m := s.waitWorld(s.r.poses(safe), 10*time.Second); m != "" {
		s.violate(k, "halted, but the outputs are not at their safe policies: %s", m)
		return
	}
	ctx := context.Background()
	before, err := s.r.rb.State(ctx)
	s.check(err)
	s.probeMove(k)
	time.Sleep(300 * time.Millisecond)
	after, err := s.r.rb.State(ctx)
	s.check(err)
	if m := s.r.mismatch(after, s.r.poses(safe)); m != "" || (before.Stats != nil && after.Stats.Sets != before.Stats.Sets) {
		s.violate(k, "something moved while halted: before %v, after %v", before, after)
	}
	if _, rs, err := s.retained(); err == nil && (rs == nil || !rs.Halted) {
		s.violate(k, "halted, but the retained status says %+v", rs)
	}
	if journaled {
		var last string
		if !waitUntil(5*time.Second, func() bool {
			j, err := readJournal(s.cfg, s.disk.JournalDir())
			if err != nil {
				last = err.Error()
				return false
			}
			last = fmt.Sprintf("HALT records at %v", j.halts)
			return j.haltSince(mark)
		}) {
			s.violate(k, "halted, but no HALT was journaled after record %d: %s", mark, last)
		}
	}
}

// probeMove tries to begin a saga and step in it; while halted both must be
// refused.
func (s *soak) probeMove(k *faultKind) {
	a := s.probe
	if rep, err := a.send(map[string]any{"op": "hello", "ttl_ms": workerTTL.Milliseconds()}); err == nil && rep.OK {
		a.holdLease(rep)
		defer a.send(map[string]any{"op": "bye"})
	}
	rep, err := a.send(map[string]any{"op": "begin"})
	if err != nil || !rep.OK {
		return
	}
	s.violate(k, "a saga (%d) was begun while halted", rep.Saga)
	act := s.r.plan.Actuators[0]
	if rep, err := a.send(map[string]any{"op": "step", "saga": rep.Saga, "actuator": act.Name, "value": act.Move}); err == nil && rep.OK {
		s.violate(k, "a step (%s=%g) was admitted while halted", act.Name, act.Move)
	}
}

// holdLease keeps the lease a hello reply granted: later requests carry it.
func (a *agent) holdLease(rep api.Reply) {
	a.mu.Lock()
	a.lease, a.epoch, a.ttl = rep.Lease, rep.Epoch, time.Duration(rep.TTLMS)*time.Millisecond
	a.mu.Unlock()
}

// reset resets the halt as the operator would, once the supervisor takes it
// (409 while the cause is still there), and checks it was journaled and
// the supervisor is ready again.
func (s *soak) reset(k *faultKind, mark uint64) {
	var code int
	var body string
	waitUntil(30*time.Second, func() bool {
		code, body = s.r.post("/api/v1/reset", s.r.plan.Token, `{"operator":"soak"}`)
		if code == http.StatusConflict {
			time.Sleep(80 * time.Millisecond)
			return false
		}
		return true
	})
	if code != http.StatusOK {
		s.violate(k, "the operator's reset was refused: %d %s", code, body)
		return
	}
	if !waitUntil(5*time.Second, func() bool {
		j, err := readJournal(s.cfg, s.disk.JournalDir())
		return err == nil && j.resetSince(mark)
	}) {
		s.violate(k, "reset, but no RESET was journaled after record %d", mark)
	}
	var last string
	if !waitUntil(30*time.Second, func() bool {
		ready, why := s.r.readyz()
		last = why
		return ready
	}) {
		s.violate(k, "not ready 30 s after the reset: %s", last)
	}
}

// soakLook is one look at the four places the arm's position is kept, and
// at what the journal says besides.
type soakLook struct {
	status   supStatus
	world    State
	journal  *journalView
	retained map[string]float64
	retStat  *api.Status
}

// look takes a soakLook and says how the views disagree ("" when they
// agree): the board's outputs, the supervisor's status, an engine rebuilt
// from the journal, and the retained state topics must all put every
// actuator in the same place, and the supervisor must be ready, not halted,
// and say so on its retained status. The journal must not have moved while
// looking.
func (s *soak) look() (soakLook, string) {
	var l soakLook
	st1, err := s.tryStatus()
	if err != nil {
		return l, err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if l.world, err = s.r.rb.State(ctx); err != nil {
		return l, "read-back: " + err.Error()
	}
	if l.journal, err = readJournal(s.cfg, s.disk.JournalDir()); err != nil {
		return l, "journal: " + err.Error()
	}
	if l.retained, l.retStat, err = s.retained(); err != nil {
		return l, "retained: " + err.Error()
	}
	if l.status, err = s.tryStatus(); err != nil {
		return l, err.Error()
	}
	st := l.status
	if st1.Journal.LastSeq != st.Journal.LastSeq || l.journal.lastSeq != st.Journal.LastSeq || st.Journal.Durable != st.Journal.LastSeq {
		return l, fmt.Sprintf("the journal moved while looking (status said record %d, then %d durable %d; read %d)",
			st1.Journal.LastSeq, st.Journal.LastSeq, st.Journal.Durable, l.journal.lastSeq)
	}
	var diffs []string
	if !st.Ready || st.Halted {
		diffs = append(diffs, fmt.Sprintf("not ready: %q", st.Reasons))
	}
	if rs := l.retStat; rs == nil || rs.State != api.StateOnline || !rs.Ready || rs.Halted {
		diffs = append(diffs, fmt.Sprintf("the retained status says %+v", rs))
	}
	for _, a := range s.r.plan.Actuators {
		c, ok := st.commanded(a.Name)
		if !ok || a.Output >= len(l.world.Outputs) {
			diffs = append(diffs, a.Name+": missing from the status or the read-back")
			continue
		}
		w := l.world.Outputs[a.Output]
		j := l.journal.commanded[a.Name]
		r, rok := l.retained[a.Name]
		if math.Abs(w.Value-c) > a.Tolerance || j != c || !rok || r != c {
			diffs = append(diffs, fmt.Sprintf("%s: world %g (detached %v), belief %g, journal %g, retained %v",
				a.Name, w.Value, w.Detached, c, j, map[bool]any{true: r, false: "none"}[rok]))
		}
	}
	return l, strings.Join(diffs, "; ")
}

// checkInvariants runs, with the workers paused at saga boundaries, every
// check after a fault: the views agree; the journal's chain is intact and
// keeps its own rules; every commit acknowledged to a worker is in the
// journal and none was unwound.
func (s *soak) checkInvariants(k *faultKind) {
	var l soakLook
	var last string
	if !waitUntil(agreeBound, func() bool {
		l, last = s.look()
		return last == ""
	}) {
		s.violate(k, "world, belief, journal and retained state never agreed within %v: %s", agreeBound, last)
		s.suspect = true
		if l.journal == nil {
			return
		}
	}
	for _, p := range l.journal.problems {
		if !s.reported[p] {
			s.reported[p] = true
			s.violate(k, "the journal: %s", p)
		}
	}
	if vr, err := wal.Verify(s.disk.JournalDir(), s.cfg.Journal.WALOptions()); err != nil || vr.Broken != nil {
		s.violate(k, "the journal does not verify: %v %v", err, vr.Broken)
	}
	unwound := map[uint64]*api.ReportJSON{}
	for _, a := range append([]*agent{s.probe}, s.workerAgents()...) {
		a.mu.Lock()
		for _, ev := range a.events {
			if ev.Kind == "rollback" && ev.Report != nil {
				unwound[ev.Report.Saga] = ev.Report
			}
		}
		a.mu.Unlock()
	}
	acked := s.work.acked()
	for _, c := range acked {
		if _, ok := l.journal.committed[c.saga]; !ok {
			s.violate(k, "the commit of saga %d (%s=%g) was acknowledged to %s but is not in the journal", c.saga, c.act, c.value, c.agent)
		}
		if rep := unwound[c.saga]; rep != nil {
			s.violate(k, "saga %d of %s committed, yet a rollback report says it was unwound: %+v", c.saga, c.agent, rep)
		}
	}
	s.checkAnswers(k)
	pos := make([]string, 0, len(s.r.plan.Actuators))
	for _, a := range s.r.plan.Actuators {
		c, _ := l.status.commanded(a.Name)
		pos = append(pos, fmt.Sprintf("%s=%g", a.Name, c))
	}
	s.logf("  checked: the four views agree at %s; journal at record %d, %d commits acknowledged, all in it",
		strings.Join(pos, " "), l.journal.lastSeq, len(acked))
}

// checkAnswers checks that the supervisor, ready, answers a command over
// MQTT: ready but deaf (its subscription gone) would pass every other
// check, the workers' requests going unanswered. It asks the probe's
// status for up to agreeBound.
func (s *soak) checkAnswers(k *faultKind) {
	var last error
	if waitUntil(agreeBound, func() bool {
		_, last = s.probe.send(map[string]any{"op": "status"})
		return last == nil
	}) {
		return
	}
	// Deaf: its goroutines show why (SIGQUIT: Go's dump, in its log, and
	// the process ends; the soak stops here anyway).
	s.violate(k, "ready, yet no reply over MQTT for %v: %v; its goroutines are dumped (SIGQUIT) at the end of supervisor-%02d.log",
		agreeBound, last, len(s.daemons))
	s.suspect = true
	if s.r.sup.cmd.Process.Signal(syscall.SIGQUIT) == nil {
		select {
		case <-s.r.sup.done:
		case <-time.After(10 * time.Second):
		}
	}
}

func (s *soak) workerAgents() []*agent {
	var as []*agent
	for _, wk := range s.work.workers {
		as = append(as, wk.a)
	}
	return as
}

// retained reads the retained state topics and status as a client that
// connects now sees them: a fresh connection, only retained messages.
func (s *soak) retained() (map[string]float64, *api.Status, error) {
	id := fmt.Sprintf("soak-look-%d-%d", os.Getpid(), s.looks.Add(1))
	opts := paho.NewClientOptions().AddBroker(s.r.plan.Broker).SetClientID(id).SetCleanSession(true).
		SetAutoReconnect(false).SetConnectTimeout(5 * time.Second)
	c := paho.NewClient(opts)
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		return nil, nil, fmt.Errorf("connect to %s: %v", s.r.plan.Broker, tok.Error())
	}
	defer c.Disconnect(0)
	var mu sync.Mutex
	states := map[string]float64{}
	var status *api.Status
	onState := func(_ paho.Client, m paho.Message) {
		var st struct {
			Actuator  string   `json:"actuator"`
			Commanded *float64 `json:"commanded"`
		}
		if m.Retained() && json.Unmarshal(m.Payload(), &st) == nil && st.Commanded != nil {
			mu.Lock()
			states[st.Actuator] = *st.Commanded
			mu.Unlock()
		}
	}
	onStatus := func(_ paho.Client, m paho.Message) {
		var st api.Status
		if m.Retained() && json.Unmarshal(m.Payload(), &st) == nil {
			mu.Lock()
			status = &st
			mu.Unlock()
		}
	}
	topics := s.r.plan.Topics
	for topic, h := range map[string]paho.MessageHandler{topics.State("+"): onState, topics.Status(): onStatus} {
		if tok := c.Subscribe(topic, 1, h); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			return nil, nil, fmt.Errorf("subscribe %s: %v", topic, tok.Error())
		}
	}
	// Retained messages come right after the subscription: wait until
	// every actuator's has, or a moment has passed.
	waitUntil(time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return status != nil && len(states) >= len(s.r.plan.Actuators)
	})
	mu.Lock()
	defer mu.Unlock()
	out := make(map[string]float64, len(states))
	for k, v := range states {
		out[k] = v
	}
	if status == nil {
		return out, nil, nil
	}
	st := *status
	return out, &st, nil
}

func mismatchList(ms []rollback.Mismatch) string {
	var parts []string
	for _, m := range ms {
		parts = append(parts, m.String())
	}
	return strings.Join(parts, "; ")
}

// grepLines returns the lines of log that contain any of words, joined.
func grepLines(log string, words ...string) string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		for _, w := range words {
			if strings.Contains(line, w) {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
