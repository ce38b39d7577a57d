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
