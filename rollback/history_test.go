package rollback

import "testing"

// A record naming a step the saga never had is ignored by History, however
// large its number: on a 32-bit ARM int(2^31) is negative, and a check
// made in int let such a record index the steps and panic (graph, certify
// and audits read journals they do not trust; make test-arm runs this on
// GOARM=6).
func TestHistoryIgnoresStepsItNeverHad(t *testing.T) {
	h := NewHistory()
	for _, r := range []Record{rBegin(1), rIntent(1, 1, "base"), rApplied(1, 1),
		rFailed(1, 1<<31, true), rApplied(1, 1<<32-1), rAbort(1, "x"),
		rCompIntent(1, 1<<31, "base", 7), rCompDone(1, 1<<32-1, "base", Unresolved),
		rCompIntent(1, 1, "base", 1), rCompDone(1, 1, "base", Compensated), rEnd(1, "clean")} {
		h.Add(r)
	}
	s := h.Saga(1)
	if s == nil || len(s.Steps) != 1 {
		t.Fatalf("saga 1: %+v, want one step", s)
	}
	if st := s.Steps[0]; st.Outcome != Applied || st.Bucket != Compensated || st.Attempts != 1 || st.Error != "" {
		t.Errorf("step 1: %+v; the records of steps 2^31 and 2^32-1 changed it", *st)
	}
	if !s.Clean() {
		t.Errorf("saga 1 is not clean: %+v", *s)
	}
}
