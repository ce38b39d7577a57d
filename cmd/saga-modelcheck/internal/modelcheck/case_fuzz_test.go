package modelcheck

import "testing"

// FuzzParseCase: a case id from the command line (`--case ID`) either is
// refused or reads as a valid case whose own id reads back as the same
// case; nothing panics.
func FuzzParseCase(f *testing.F) {
	seeds := append(append(BaseCases(2), TwoSagaCases(3)...), ZoneCases(2)...)
	for _, c := range append(seeds, TwoSagaCommitCases(2)...) {
		c.Sagas = max(c.Sagas, 1)
		f.Add(c.String())
		for _, hc := range HaltCases(c, 2) {
			f.Add(hc.String())
		}
	}
	f.Add("n1.b1.order1.expire1.zsync1-legs.expire.comp0.orphan0.crash0.rcrash0")
	f.Add("n2.eio.commit.comp0.orphan0.crash0.rcrash0")
	f.Fuzz(func(t *testing.T, id string) {
		c, err := ParseCase(id)
		if err != nil {
			return
		}
		if err := c.valid(); err != nil {
			t.Fatalf("%q read as an invalid case %+v: %v", id, c, err)
		}
		back, err := ParseCase(c.String())
		if err != nil || back != c {
			t.Fatalf("%q read as %+v, whose id %q reads back as %+v, %v", id, c, c.String(), back, err)
		}
	})
}
