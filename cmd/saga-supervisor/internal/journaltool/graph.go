package journaltool

import (
	"fmt"
	"io"
	"strings"

	"github.com/saga-supervisor/saga-supervisor/rollback"
)

// writeMermaid draws sagas as a Mermaid flowchart: forward steps left to
// right, compensations as dashed arrows back. Every state that is not a
// clean compensation is drawn with its own class AND named in its label
// (COMPENSATION FAILED, ORPHANED, IN DOUBT, UNRESOLVED, OPEN), so a partial
// unwind never looks clean, even without colours.
func writeMermaid(w io.Writer, sagas []*rollback.SagaHistory) {
	fmt.Fprintln(w, "flowchart LR")
	for _, s := range sagas {
		title := fmt.Sprintf("saga %d · agent %s · %s", s.ID, s.Agent, sagaLabel(s))
		fmt.Fprintf(w, "  subgraph saga%d[%q]\n", s.ID, title)
		fmt.Fprintf(w, "    s%d_begin([begin])\n", s.ID)
		prev := fmt.Sprintf("s%d_begin", s.ID)
		for _, st := range s.Steps {
			id := fmt.Sprintf("s%d_%d", s.ID, st.Step)
			fmt.Fprintf(w, "    %s[%q]:::%s\n", id, stepLabel(s, st), stepClass(s, st))
			fmt.Fprintf(w, "    %s --> %s\n", prev, id)
			prev = id
		}
		end := fmt.Sprintf("s%d_end", s.ID)
		fmt.Fprintf(w, "    %s([%q]):::%s\n", end, strings.ToUpper(sagaLabel(s)), sagaClass(s))
		if s.State == rollback.SagaCommitted || len(s.Steps) == 0 {
			fmt.Fprintf(w, "    %s --> %s\n", prev, end)
		}
		// Compensations run last step first, from the end node back.
		from := end
		for i := len(s.Steps) - 1; i >= 0; i-- {
			st := s.Steps[i]
			if st.Bucket == "" {
				continue
			}
			id := fmt.Sprintf("s%d_%d", s.ID, st.Step)
			fmt.Fprintf(w, "    %s -.->|%q| %s\n", from, undoLabel(st), id)
			from = id
		}
		fmt.Fprintln(w, "  end")
	}
	fmt.Fprintln(w, "  classDef applied fill:#e3f2fd,stroke:#1565c0")
	fmt.Fprintln(w, "  classDef compensated fill:#e8f5e9,stroke:#2e7d32")
	fmt.Fprintln(w, "  classDef fallback fill:#fff8e1,stroke:#f9a825,stroke-width:2px")
	fmt.Fprintln(w, "  classDef compfailed fill:#ffebee,stroke:#c62828,stroke-width:4px")
	fmt.Fprintln(w, "  classDef orphaned fill:#eeeeee,stroke:#424242,stroke-width:2px,stroke-dasharray:6 3")
	fmt.Fprintln(w, "  classDef indoubt fill:#fff3e0,stroke:#ef6c00,stroke-width:3px,stroke-dasharray:2 2")
	fmt.Fprintln(w, "  classDef unresolved fill:#fce4ec,stroke:#ad1457,stroke-width:3px")
	fmt.Fprintln(w, "  classDef failed fill:#fafafa,stroke:#9e9e9e")
	fmt.Fprintln(w, "  classDef clean fill:#c8e6c9,stroke:#2e7d32")
	fmt.Fprintln(w, "  classDef partial fill:#ffcdd2,stroke:#b71c1c,stroke-width:4px")
	fmt.Fprintln(w, "  classDef open fill:#ffe0b2,stroke:#e65100,stroke-width:4px")
}

func sagaLabel(s *rollback.SagaHistory) string {
	switch s.State {
	case rollback.SagaCommitted:
		return "committed"
	case rollback.SagaUnwound:
		if s.Clean() {
			return "unwound clean"
		}
		return "unwound PARTIAL"
	case rollback.SagaUnwinding:
		return "UNWIND NOT FINISHED"
	}
	return "OPEN — not recovered"
}

func sagaClass(s *rollback.SagaHistory) string {
	switch {
	case s.State == rollback.SagaCommitted:
		return "clean"
	case s.State == rollback.SagaUnwound && s.Clean():
		return "clean"
	case s.State == rollback.SagaUnwound:
		return "partial"
	}
	return "open"
}

func stepLabel(s *rollback.SagaHistory, st *rollback.StepHistory) string {
	outcome := string(st.Outcome)
	switch st.Outcome {
	case "":
		outcome = "IN DOUBT (no outcome journaled)"
	case rollback.InDoubt:
		outcome = "IN DOUBT"
	}
	l := fmt.Sprintf("%d %s %g → %g · %s", st.Step, st.Actuator, st.Prior, st.Target, outcome)
	if st.Clamped {
		l += fmt.Sprintf(" (clamped from %g)", st.Requested)
	}
	switch st.Bucket {
	case rollback.CompensationFailed:
		l += " · COMPENSATION FAILED"
	case rollback.Orphaned:
		l += " · ORPHANED"
	case rollback.Unresolved:
		l += " · UNRESOLVED"
	case rollback.FallbackSafe:
		l += " · FALLBACK SAFE"
	}
	return l
}

func stepClass(s *rollback.SagaHistory, st *rollback.StepHistory) string {
	switch st.Bucket {
	case rollback.Compensated:
		if st.Outcome == rollback.InDoubt || st.Outcome == "" {
			return "indoubt" // compensated, but its forward effect was never known
		}
		return "compensated"
	case rollback.FallbackSafe:
		return "fallback"
	case rollback.CompensationFailed:
		return "compfailed"
	case rollback.Orphaned:
		return "orphaned"
	case rollback.Unresolved:
		return "unresolved"
	}
	switch st.Outcome {
	case "", rollback.InDoubt:
		return "indoubt"
	case rollback.Failed:
		return "failed"
	}
	return "applied"
}

func undoLabel(st *rollback.StepHistory) string {
	switch st.Bucket {
	case rollback.Compensated:
		if st.Attempts == 0 {
			return "nothing to undo"
		}
		return fmt.Sprintf("undo → %g", st.Prior)
	case rollback.FallbackSafe:
		return "undo failed → safe policy"
	case rollback.CompensationFailed:
		return "COMPENSATION FAILED"
	case rollback.Orphaned:
		return "ORPHANED: no undo"
	case rollback.Unresolved:
		return "UNRESOLVED: halted"
	}
	return string(st.Bucket)
}
