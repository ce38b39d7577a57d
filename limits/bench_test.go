package limits

import (
	"testing"
	"time"
)

// BenchmarkCheck times one gate decision. The budget is 1 µs on the Pi and
// zero allocations: Check runs under the engine's lock on every command.
func BenchmarkCheck(b *testing.B) {
	prev := prevAt(90)
	now := at(100 * time.Millisecond)
	cases := []struct {
		name string
		s    Spec
		req  float64
	}{
		{"reject/ok", shoulder, 95},
		{"reject/slew", shoulder, 120},
		{"clamp/slew", clampOf(shoulder), 200},
		{"not_finite", shoulder, nan},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Check(c.s, prev, c.req, now)
			}
		})
	}
}

// BenchmarkSupply times what the gate and the sampler do per supply: one
// reading in, one state out, one per-actuator check.
func BenchmarkSupply(b *testing.B) {
	s, err := NewSupply(motor)
	if err != nil {
		b.Fatal(err)
	}
	arm := Spec{Max: 1, Supply: "motor", SupplyMinVolts: 11.5}
	b.ReportAllocs()
	var i time.Duration
	for b.Loop() {
		i += ms
		s.Observe(12, at(i))
		CheckSupply(arm, s.State(at(i)))
	}
}
