package modelcheck

import (
	"slices"
	"testing"
)

// A case replays exactly: the same file-system calls and the same driver
// calls every time, which is what makes a printed case id (a crash "before
// call n") a counterexample anyone can rerun.
func TestRunsAreDeterministic(t *testing.T) {
	cases := append(BaseCases(4), TwoSagaCases(4)...)
	for _, c := range cases {
		c.Sagas = max(c.Sagas, 1)
		a, b := Run(c), Run(c)
		if a.Ops != b.Ops || !slices.Equal(a.Calls, b.Calls) {
			t.Fatalf("%s ran two ways: %d vs %d file-system calls, driver calls\n%v\nvs\n%v", c, a.Ops, b.Ops, a.Calls, b.Calls)
		}
	}
}

// A halt latched at a sync replays exactly too — the same driver calls and
// reports: the sync waits for the halt (syncJournal), and a halt that must
// wait for the sync's step goes before the run's next effect, so the
// halt's goroutine and the run take turns. (Not the file-system calls: a
// halt still parking its zone while the step's saga is unwound may sync
// its records with the unwind's or after them. And with a zone's halt and
// the disk dying, the zone's halt and the full halt the failure latches
// are applied by two goroutines of the engine at once: their safe moves
// may interleave either way, so there the calls are compared as a set.)
func TestHaltAtSyncRunsAreDeterministic(t *testing.T) {
	cases := append(append(BaseCases(3), TwoSagaCases(3)...), append(ZoneCases(3), TwoSagaCommitCases(3)...)...)
	for _, c := range cases {
		c.Sagas = max(c.Sagas, 1)
		for _, hc := range HaltCases(c, Run(c).Syncs) {
			a, b := Run(hc), Run(hc)
			ac, bc := a.Calls, b.Calls
			if hc.HaltZone != "" && hc.HaltFail {
				ac, bc = slices.Sorted(slices.Values(ac)), slices.Sorted(slices.Values(bc))
			}
			if !slices.Equal(ac, bc) || !slices.Equal(a.Reports, b.Reports) {
				t.Fatalf("%s ran two ways: driver calls and reports\n%v\n%v\nvs\n%v\n%v", hc, a.Calls, a.Reports, b.Calls, b.Reports)
			}
		}
	}
}
