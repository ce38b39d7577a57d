package journaltool

import (
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/rollback"
)

// Every non-clean state is named in its label and drawn with its own class,
// so that a partial unwind can never look clean, with or without colours.
func TestMermaidDrawsEveryStateDistinctly(t *testing.T) {
	h := rollback.NewHistory()
	add := func(r rollback.Record) { h.Add(r) }
	add(rollback.Record{Type: rollback.RecBegin, Saga: 1, Agent: "a"})
	buckets := []rollback.Bucket{rollback.Compensated, rollback.FallbackSafe, rollback.CompensationFailed, rollback.Orphaned, rollback.Unresolved}
	for i := range buckets {
		add(rollback.Record{Type: rollback.RecIntent, Saga: 1, Step: uint32(i + 1), Actuator: "x", Target: float64(i + 1)})
		add(rollback.Record{Type: rollback.RecApplied, Saga: 1, Step: uint32(i + 1)})
	}
	add(rollback.Record{Type: rollback.RecAbort, Saga: 1, Message: "fault"})
	for i, b := range buckets {
		add(rollback.Record{Type: rollback.RecCompDone, Saga: 1, Step: uint32(i + 1), Code: string(b), Attempt: 1})
	}
	add(rollback.Record{Type: rollback.RecEnd, Saga: 1, Code: "partial"})
	// An open saga with an intent and no outcome: in doubt, not recovered.
	add(rollback.Record{Type: rollback.RecBegin, Saga: 2, Agent: "b"})
	add(rollback.Record{Type: rollback.RecIntent, Saga: 2, Step: 1, Actuator: "y", Target: 3})

	var b strings.Builder
	writeMermaid(&b, h.Sagas)
	g := b.String()
	for _, want := range []string{
		"unwound PARTIAL", "OPEN — not recovered", "IN DOUBT (no outcome journaled)",
		"· FALLBACK SAFE", "· COMPENSATION FAILED", "· ORPHANED", "· UNRESOLVED",
		":::compensated", ":::fallback", ":::compfailed", ":::orphaned", ":::unresolved", ":::indoubt", ":::partial", ":::open",
		`"COMPENSATION FAILED"`, `"ORPHANED: no undo"`, `"UNRESOLVED: halted"`,
	} {
		if !strings.Contains(g, want) {
			t.Errorf("graph lacks %q:\n%s", want, g)
		}
	}
	if strings.Contains(g, ":::clean") {
		t.Errorf("a partial or open saga was drawn clean:\n%s", g)
	}
}
