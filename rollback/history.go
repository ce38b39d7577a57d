package rollback

import "sort"

// SagaState is where a saga stands in the journal.
type SagaState string

// Saga states as read from a journal.
const (
	SagaOpen      SagaState = "open"      // no commit and no end: in flight or crashed
	SagaUnwinding SagaState = "unwinding" // aborted, unwind not finished
	SagaCommitted SagaState = "committed"
	SagaUnwound   SagaState = "unwound"
)

// StepHistory is one step as the journal tells it.
type StepHistory struct {
	Step      uint32
	Actuator  string
	Prior     float64
	Target    float64
	Requested float64
	Clamped   bool
	Outcome   Outcome // "" when no outcome was journaled
	Bucket    Bucket  // "" when not settled
	Attempts  uint32
	Error     string
}

// SagaHistory is one saga as the journal tells it.
type SagaHistory struct {
	ID       uint64
	Agent    string
	Lease    string
	Epoch    uint64
	State    SagaState
	Verdict  string // "clean" or "partial" once unwound
	Reason   string // why it was unwound
	Steps    []*StepHistory
	Refusals []Record
}

// Clean reports whether the saga committed, or was unwound with every step
// compensated. An open or half-unwound saga is never clean.
func (s *SagaHistory) Clean() bool {
	switch s.State {
	case SagaCommitted:
		return true
	case SagaUnwound:
		for _, st := range s.Steps {
			if st.Bucket != Compensated {
				return false
			}
		}
		return true
	}
	return false
}

// History reads a journal into sagas, for graph, certify and audits. It
// never decides anything: it only tells what the records say.
type History struct {
	Sagas  []*SagaHistory // by id
	Halts  []Record
	Resets []Record
	// ZoneHalts and ZoneResets are the zones' halts and resets (the zone
	// in Code), in journal order.
	ZoneHalts, ZoneResets []Record
	Refusals              []Record // refusals that named no saga in the journal
	Records               uint64
	byID                  map[uint64]*SagaHistory
}

// NewHistory returns an empty history.
func NewHistory() *History { return &History{byID: map[uint64]*SagaHistory{}} }

// Add reads one decoded record.
func (h *History) Add(r Record) {
	h.Records++
	switch r.Type {
	case RecHalt:
		h.Halts = append(h.Halts, r)
		return
	case RecReset:
		h.Resets = append(h.Resets, r)
		return
	case RecZoneHalt:
		h.ZoneHalts = append(h.ZoneHalts, r)
		return
	case RecZoneReset:
		h.ZoneResets = append(h.ZoneResets, r)
		return
	case RecRecovery, RecSafe, RecLease, RecObserved, RecDrain, RecUndrain, RecQuarantine, RecRelease:
		return
	}
	s := h.byID[r.Saga]
	if r.Type == RecRefused && s == nil {
		h.Refusals = append(h.Refusals, r) // refused before naming an open saga
		return
	}
	if s == nil {
		s = &SagaHistory{ID: r.Saga, State: SagaOpen}
		h.byID[r.Saga] = s
		h.Sagas = append(h.Sagas, s)
	}
	step := func() *StepHistory {
		// uint64, not int: on a 32-bit ARM int(r.Step) is negative from 2^31.
		if r.Step >= 1 && uint64(r.Step) <= uint64(len(s.Steps)) {
			return s.Steps[r.Step-1]
		}
		return &StepHistory{} // a record naming no known step: ignored
	}
	switch r.Type {
	case RecBegin:
		s.Agent, s.Lease, s.Epoch = r.Agent, r.Lease, r.Epoch
	case RecIntent:
		s.Steps = append(s.Steps, &StepHistory{Step: r.Step, Actuator: r.Actuator, Prior: r.Prior, Target: r.Target,
			Requested: r.Requested, Clamped: r.Flags&FlagClamped != 0})
	case RecApplied:
		step().Outcome = Applied
	case RecFailed:
		st := step()
		st.Outcome = Failed
		if r.Flags&FlagInDoubt != 0 {
			st.Outcome = InDoubt
		}
		st.Error = r.Message
	case RecRefused:
		s.Refusals = append(s.Refusals, r)
	case RecCommit:
		s.State = SagaCommitted
	case RecAbort:
		s.State = SagaUnwinding
		s.Reason = r.Message
	case RecCompIntent:
		st := step()
		st.Attempts = max(st.Attempts, r.Attempt)
	case RecCompDone:
		st := step()
		if r.Code != "" {
			st.Bucket = Bucket(r.Code)
		}
		if r.Message != "" {
			st.Error = r.Message
		}
	case RecEnd:
		s.State = SagaUnwound
		s.Verdict = r.Code
	}
}

// Saga returns the saga with id, or nil.
func (h *History) Saga(id uint64) *SagaHistory { return h.byID[id] }

// Unfinished lists sagas that are open or half-unwound, newest first.
func (h *History) Unfinished() []*SagaHistory {
	var out []*SagaHistory
	for _, s := range h.Sagas {
		if s.State == SagaOpen || s.State == SagaUnwinding {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID > out[j].ID })
	return out
}
