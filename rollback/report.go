package rollback

import (
	"fmt"
	"strings"
)

// Bucket is where a step landed in an unwind. Every step of an unwound saga
// lands in exactly one bucket.
type Bucket string

// The buckets of DESIGN §5.
const (
	Compensated        Bucket = "compensated"         // driven back to its prior
	FallbackSafe       Bucket = "fallback_safe"       // compensation failed; the safe policy was applied
	CompensationFailed Bucket = "compensation_failed" // compensation failed and no safe value was reached
	Orphaned           Bucket = "orphaned"            // irreversible actuator: no undo exists
	Unresolved         Bucket = "unresolved"          // not attempted because of a halt
)

func (b Bucket) valid() bool {
	switch b {
	case Compensated, FallbackSafe, CompensationFailed, Orphaned, Unresolved:
		return true
	}
	return false
}

// Outcome is what the forward step did.
type Outcome string

// Step outcomes.
const (
	Applied Outcome = "applied"
	Failed  Outcome = "failed"
	InDoubt Outcome = "in_doubt" // timed out, lost link, or no outcome before a crash
)

// StepReport is one step's line in a RollbackReport.
type StepReport struct {
	Step     uint32
	Actuator string
	Prior    float64 // the value the step was unwound to (its restore target)
	Target   float64 // the value the step commanded
	Outcome  Outcome
	Bucket   Bucket
	Attempts uint32 // compensation attempts made
	Error    string // the last compensation or safe-policy error
}

// Report is the RollbackReport of one unwound saga. Steps are in unwind
// order. Clean is derived from the buckets, never stored.
type Report struct {
	Saga      uint64
	Agent     string
	Reason    string
	Order     Order
	Recovered bool // finished by crash recovery
	Steps     []StepReport
}

// Clean reports whether every step was compensated. A saga with no steps is
// clean: nothing moved.
func (r *Report) Clean() bool {
	for _, s := range r.Steps {
		if s.Bucket != Compensated {
			return false
		}
	}
	return true
}

// Verdict is "clean" or "partial": the only words the product uses for a
// report, derived from Clean.
func (r *Report) Verdict() string {
	if r.Clean() {
		return "clean"
	}
	return "partial"
}

// Counts returns how many steps landed in each bucket.
func (r *Report) Counts() map[Bucket]int {
	m := make(map[Bucket]int, 5)
	for _, s := range r.Steps {
		m[s.Bucket]++
	}
	return m
}

// String renders the report for people: the verdict first, then one line a
// step, naming every step that is not compensated.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "saga %d (%s): unwind %s — %s", r.Saga, r.Reason, r.Verdict(), r.Order)
	if r.Recovered {
		b.WriteString(", finished by recovery")
	}
	b.WriteByte('\n')
	for _, s := range r.Steps {
		fmt.Fprintf(&b, "  step %d %-10s %-8s %g→%g  %s", s.Step, s.Actuator, s.Outcome, s.Target, s.Prior, s.Bucket)
		if s.Attempts > 1 {
			fmt.Fprintf(&b, " (%d attempts)", s.Attempts)
		}
		if s.Error != "" {
			fmt.Fprintf(&b, ": %s", s.Error)
		}
		b.WriteByte('\n')
	}
	return b.String()
}
