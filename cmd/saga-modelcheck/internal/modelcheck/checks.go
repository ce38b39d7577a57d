package modelcheck

import (
	"fmt"
	"maps"

	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal/crashfs"
)

// checkReports holds for every RollbackReport any process returned: one
// bucket per step, clean exactly when every step is compensated, and an
// in-doubt step compensated unless a halt, an undo-less actuator or its own
// failing compensation excuses it.
func (r *robot) checkReports(label string, reps []*rollback.Report) {
	for _, rep := range reps {
		seen := map[uint32]bool{}
		all := true
		for _, st := range rep.Steps {
			if seen[st.Step] {
				r.violate("%s: saga %d step %d has two buckets", label, rep.Saga, st.Step)
			}
			seen[st.Step] = true
			switch st.Bucket {
			case rollback.Compensated, rollback.FallbackSafe, rollback.CompensationFailed, rollback.Orphaned, rollback.Unresolved:
			default:
				r.violate("%s: saga %d step %d has no bucket (%q)", label, rep.Saga, st.Step, st.Bucket)
			}
			if st.Bucket != rollback.Compensated {
				all = false
			}
			if st.Outcome == rollback.InDoubt && st.Bucket != rollback.Compensated {
				excused := st.Bucket == rollback.Unresolved || st.Bucket == rollback.Orphaned ||
					(rep.Saga == 1 && r.c.CompFail&(1<<uint(st.Step-1)) != 0)
				if !excused {
					r.violate("%s: saga %d step %d was in doubt and ended %s", label, rep.Saga, st.Step, st.Bucket)
				}
			}
		}
		if rep.Clean() != all {
			r.violate("%s: saga %d report says clean=%v, its buckets say %v", label, rep.Saga, rep.Clean(), all)
		}
	}
}

// predictAndCompare is the crash-free oracle: it works out, from the case
// alone, every step's outcome and bucket and where every actuator must end,
// and compares the engine's reports and the world with it.
func (r *robot) predictAndCompare(reps []*rollback.Report) {
	c := r.c
	pos := maps.Clone(initial)
	detached := map[string]bool{}
	kicks := 0
	type want struct {
		outcome rollback.Outcome
		bucket  rollback.Bucket
	}
	wants := map[[2]int]want{} // (saga, step)
	var unwound []planned      // saga 1's steps to unwind, in issue order
	for _, st := range r.steps {
		if c.Sagas == 2 && st.saga == 1 && st.n > c.Expire {
			continue // refused: the lease had expired
		}
		w := want{outcome: rollback.Applied}
		apply := true
		if c.Sagas != 2 && st.n == c.Fault {
			switch c.Shape {
			case Failed:
				w.outcome, apply = rollback.Failed, false
			case DoubtApplied:
				w.outcome = rollback.InDoubt
			case DoubtNotApplied:
				w.outcome, apply = rollback.InDoubt, false
			}
		}
		if apply {
			if st.act == pulseName {
				kicks++
			} else {
				pos[st.act], detached[st.act] = st.target, false
			}
		}
		wants[[2]int{st.saga, st.n}] = w
		if st.saga == 1 {
			unwound = append(unwound, st)
		}
		if c.Sagas != 2 && st.n == c.Fault {
			break
		}
	}
	unwinds := c.Sagas == 2 || c.Fault > 0 || c.End == Abort
	var predicted []*rollback.Report
	if unwinds {
		halted := false
		rep := &rollback.Report{Saga: 1}
		for i := len(unwound) - 1; i >= 0; i-- {
			st := unwound[i]
			w := wants[[2]int{1, st.n}]
			switch {
			case halted:
				w.bucket = rollback.Unresolved
			case w.outcome == rollback.Failed:
				w.bucket = rollback.Compensated
			case st.act == pulseName:
				w.bucket = rollback.Orphaned
			case c.CompFail&(1<<uint(st.n-1)) != 0:
				switch sp := safe[st.act]; sp.Mode {
				case "value":
					pos[st.act], detached[st.act] = sp.Value, false
					w.bucket = rollback.FallbackSafe
				case "detach":
					detached[st.act] = true
					w.bucket = rollback.FallbackSafe
				default:
					w.bucket = rollback.CompensationFailed
				}
				halted = true
				for name, sp := range safe {
					switch sp.Mode {
					case "value":
						pos[name], detached[name] = sp.Value, false
					case "detach":
						detached[name] = true
					}
				}
			default:
				pos[st.act], detached[st.act] = st.prior, false
				w.bucket = rollback.Compensated
			}
			wants[[2]int{1, st.n}] = w
			rep.Steps = append(rep.Steps, rollback.StepReport{Step: uint32(st.n), Bucket: w.bucket})
		}
		predicted = append(predicted, rep)
	}
	if len(reps) != len(predicted) {
		r.violate("oracle: %d rollback reports, the model predicts %d", len(reps), len(predicted))
	}
	for i := range min(len(reps), len(predicted)) {
		got, exp := reps[i], predicted[i]
		if len(got.Steps) != len(exp.Steps) {
			r.violate("oracle: saga %d report has %d steps, the model predicts %d", got.Saga, len(got.Steps), len(exp.Steps))
			continue
		}
		for j, st := range got.Steps {
			w := wants[[2]int{1, int(st.Step)}]
			if st.Step != exp.Steps[j].Step || st.Bucket != w.bucket || st.Outcome != w.outcome {
				r.violate("oracle: saga %d unwind line %d is step %d %s/%s, the model predicts step %d %s/%s",
					got.Saga, j+1, st.Step, st.Outcome, st.Bucket, exp.Steps[j].Step, w.outcome, w.bucket)
			}
		}
	}
	snap := r.world.Snapshot()
	for _, n := range servoNames {
		if snap[n].Commanded != pos[n] || snap[n].Detached != detached[n] {
			r.violate("oracle: %s is at %g (detached %v), the model puts it at %g (detached %v)",
				n, snap[n].Commanded, snap[n].Detached, pos[n], detached[n])
		}
	}
	if got := int(snap[pulseName].Kicks); got != kicks {
		r.violate("oracle: the kick fired %d times, the model says %d", got, kicks)
	}
	for _, cl := range r.calls {
		if cl.kind == compCall && cl.saga == 2 {
			r.violate("oracle: the first agent's unwind moved the second agent's actuator: %s", cl)
		}
	}
}

// checkFinal holds after the last recovery: no saga open or half-unwound,
// each step settled at most once and its failed attempts bounded, the
// unwinds last-first, and every actuator where the journal says it is —
// or the journal owns up to not knowing (a partial unwind, a detach).
func (r *robot) checkFinal(img *crashfs.FS) {
	h := rollback.NewHistory()
	settled := map[[2]int]int{}
	failedAttempts := map[[2]int]int{}
	expected := maps.Clone(initial)
	known := map[string]bool{}
	for _, n := range servoNames {
		known[n] = true
	}
	untrusted := map[string]string{} // actuator → why its position may be anything
	r.mu.Lock()
	for a := range r.unjournaled {
		// A halt's safe move after the disk died: no record could be
		// made. Recovery's Reconcile finds it by reading the actuator
		// back; the model's drivers report no position, so the journal
		// is not held to it here.
		untrusted[a] = "moved by a halt after the disk died"
	}
	r.mu.Unlock()
	prior := map[[2]int]float64{}
	stepAct := map[[2]int]string{}
	stepTarget := map[[2]int]float64{}
	beforeIntent := map[[2]int]struct {
		v float64
		k bool
	}{}
	sagaActs := map[uint64]map[string]bool{}
	scanJournal(img, func(rec rollback.Record) {
		h.Add(rec)
		key := [2]int{int(rec.Saga), int(rec.Step)}
		a := rec.Actuator
		if rec.Type == rollback.RecApplied || rec.Type == rollback.RecFailed {
			// Outcomes name only the saga and step.
			a = stepAct[key]
		}
		switch rec.Type {
		case rollback.RecIntent:
			stepAct[key], stepTarget[key] = a, rec.Target
			prior[key] = rec.Prior
			beforeIntent[key] = struct {
				v float64
				k bool
			}{expected[a], known[a]}
			known[a] = false
			if sagaActs[rec.Saga] == nil {
				sagaActs[rec.Saga] = map[string]bool{}
			}
			sagaActs[rec.Saga][a] = true
		case rollback.RecApplied:
			expected[a], known[a] = stepTarget[key], true
		case rollback.RecFailed:
			if rec.Flags&rollback.FlagInDoubt == 0 {
				// The driver promised the output did not change.
				b := beforeIntent[key]
				expected[a], known[a] = b.v, b.k
			}
		case rollback.RecCompIntent:
			known[a] = false
			expected[a] = rec.Target
		case rollback.RecCompDone:
			if rec.Code == "" {
				failedAttempts[key]++
				known[a] = false
				break
			}
			settled[key]++
			switch rollback.Bucket(rec.Code) {
			case rollback.Compensated:
				// Driven back, or settled without an effect because the
				// step failed cleanly: either way at the step's prior.
				expected[a], known[a] = prior[key], true
			case rollback.FallbackSafe:
				if sp := safe[a]; sp.Mode == "value" {
					expected[a], known[a] = sp.Value, true
				} else {
					known[a] = false
					untrusted[a] = "detached after a failed compensation"
				}
			case rollback.Unresolved:
				// Left where it was: known only if it was known.
			default:
				known[a] = false
			}
		case rollback.RecSafe:
			if rec.Code == "value" {
				expected[a], known[a] = rec.Target, true
			} else {
				known[a] = false
				untrusted[a] = "detached by a halt"
			}
		}
	})
	if u := h.Unfinished(); len(u) != 0 {
		r.violate("final: the journal shows %d unfinished sagas after recovery", len(u))
	}
	for key, n := range settled {
		if n > 1 {
			r.violate("final: saga %d step %d settled %d times", key[0], key[1], n)
		}
	}
	for key, n := range failedAttempts {
		if n > 1+retries {
			r.violate("final: saga %d step %d had %d failed compensation attempts (budget %d)", key[0], key[1], n, 1+retries)
		}
	}
	for _, s := range h.Sagas {
		all := true
		for _, st := range s.Steps {
			if st.Bucket != rollback.Compensated {
				all = false
			}
		}
		if s.State == rollback.SagaUnwound && s.Clean() != all {
			r.violate("final: saga %d verdict %q, its buckets say clean=%v", s.ID, s.Verdict, all)
		}
		if s.State == rollback.SagaUnwound && !s.Clean() {
			for a := range sagaActs[s.ID] {
				untrusted[a] = fmt.Sprintf("saga %d unwound partially", s.ID)
			}
		}
	}
	snap := r.world.Snapshot()
	for _, n := range servoNames {
		st := snap[n]
		switch {
		case known[n] && (st.Commanded != expected[n] || st.Detached) && (!r.c.FirstTouch || untrusted[n] == "") && !r.unjournaled[n]:
			// (In first-touch durability a step after the first on an
			// actuator may be missing from the journal; a partial unwind
			// then leaves it where that step put it — reported partial.)
			r.violate("final: %s is at %g (detached %v), the journal says %g", n, st.Commanded, st.Detached, expected[n])
		case !known[n] && untrusted[n] == "":
			r.violate("final: %s is at %g and the journal cannot say where it should be, yet reports nothing partial", n, st.Commanded)
		}
	}
	r.checkLIFO()
}

// checkLIFO: within each saga, compensations run last step first, across
// processes too (a compensation cut short by a crash may be redone, and
// retries repeat it: neither goes back up the list).
func (r *robot) checkLIFO() {
	last := map[int]int{}
	for _, cl := range r.calls {
		if cl.kind != compCall {
			continue
		}
		if prev, ok := last[cl.saga]; ok && cl.step > prev {
			r.violate("order: saga %d compensated step %d after step %d", cl.saga, cl.step, prev)
		}
		last[cl.saga] = cl.step
	}
}

// predictZone is the crash-free oracle of a zone case: the shoulder ends
// at its safe value (parked by the halt, never moved after), the second
// saga's actuators at their last targets (it commits), and the base where
// the first saga left it — back at its initial value if the saga touched
// the zone before the halt and was unwound, with its shoulder steps
// unresolved and its base steps compensated.
func (r *robot) predictZone(reps []*rollback.Report) {
	c := r.c
	touched := false // the first saga stepped on the zone before the halt
	for k, st := range r.steps {
		if k < c.Zone && st.saga == 1 && inHaltedZone(st.act) {
			touched = true
		}
	}
	pos := maps.Clone(initial)
	stopped := false // the first saga's agent, refused on the zone, stops stepping
	for k, st := range r.steps {
		if st.saga == 1 && (stopped || (k >= c.Zone && touched)) {
			continue // it stopped, or its saga was unwound
		}
		if k >= c.Zone && inHaltedZone(st.act) {
			stopped = stopped || st.saga == 1
			continue // refused: the zone is halted
		}
		pos[st.act] = st.target
	}
	pos["shoulder"] = safe["shoulder"].Value
	if touched {
		pos["base"] = initial["base"]
		if len(reps) != 1 {
			r.violate("oracle: %d rollback reports, the model predicts 1 (the first saga, unwound by the zone halt)", len(reps))
			return
		}
		for _, st := range reps[0].Steps {
			want := rollback.Compensated
			if inHaltedZone(st.Actuator) {
				want = rollback.Unresolved
			}
			if st.Bucket != want {
				r.violate("oracle: saga %d step %d on %s is %s, the model predicts %s", reps[0].Saga, st.Step, st.Actuator, st.Bucket, want)
			}
		}
	} else if len(reps) != 0 {
		r.violate("oracle: %d rollback reports, the model predicts none", len(reps))
	}
	snap := r.world.Snapshot()
	for _, n := range servoNames {
		if snap[n].Commanded != pos[n] || snap[n].Detached {
			r.violate("oracle: %s is at %g (detached %v), the model puts it at %g", n, snap[n].Commanded, snap[n].Detached, pos[n])
		}
	}
}
