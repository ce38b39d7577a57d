package rollback

import (
	"strconv"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim"
	"github.com/saga-supervisor/saga-supervisor/internal/latency"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// benchEngine is an engine on a real journal in a temporary directory and
// one in-memory sim servo with no slew.
func benchEngine(b *testing.B, d Durability) (*Engine, *wal.Log) {
	b.Helper()
	log, err := wal.Open(b.TempDir(), wal.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { log.Close() })
	w := sim.NewMemoryWorld()
	b.Cleanup(func() { w.Close() })
	reg, err := actuators.NewRegistry(&actuators.Actuator{Name: "base", Kind: actuators.Servo,
		Limits: limits.Spec{Min: -90, Max: 90, MaxStep: 10}, Driver: w.Servo("base", 0, 0)})
	if err != nil {
		b.Fatal(err)
	}
	e, err := New(Config{Journal: log, Actuators: reg, Durability: d})
	if err != nil {
		b.Fatal(err)
	}
	return e, log
}

func ids(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = strconv.Itoa(i)
	}
	return s
}

// BenchmarkGate is the gate decision alone: saga, ids, actuator, limits.
// A new saga every 1000 commands keeps the seen-ids set the size real
// sagas give it.
func BenchmarkGate(b *testing.B) {
	e, _ := benchEngine(b, EveryStep)
	owner := Owner{Agent: "a", Lease: "l", Epoch: 1}
	const perSaga = 1000
	id := ids(perSaga)
	now := time.Now()
	var s uint64
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%perSaga == 0 {
			b.StopTimer()
			if s != 0 {
				e.Commit(s, owner)
			}
			s, _ = e.Begin(owner)
			b.StartTimer()
		}
		e.mu.Lock()
		_, _, v, err := e.gate(s, owner, Command{ID: id[i%perSaga], Actuator: "base", Value: float64(i % 5)}, now)
		e.mu.Unlock()
		if err != nil || !v.OK() {
			b.Fatal(err)
		}
	}
}

// stepLatencies runs n steps and returns each one's latency. Sagas of
// 1000 steps keep within MaxSagaCommands; each one's first step takes the
// actuator (a durable first touch) and is not timed, nor are Begin/Commit.
func stepLatencies(b *testing.B, e *Engine, n int) latency.Samples {
	owner := Owner{Agent: "a", Lease: "l", Epoch: 1}
	const perSaga = 1000
	id := ids(perSaga + 1)
	lat := make(latency.Samples, 0, n)
	var s uint64
	for i := 0; i < n; i++ {
		if i%perSaga == 0 {
			if s != 0 {
				if err := e.Commit(s, owner); err != nil {
					b.Fatal(err)
				}
			}
			var err error
			if s, err = e.Begin(owner); err != nil {
				b.Fatal(err)
			}
			if _, err := e.Step(s, owner, Command{ID: id[perSaga], Actuator: "base", Value: 1}); err != nil {
				b.Fatal(err)
			}
		}
		t0 := time.Now()
		if _, err := e.Step(s, owner, Command{ID: id[i%perSaga], Actuator: "base", Value: float64(i % 5)}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	return lat
}

// BenchmarkStep measures a step through the engine on a real journal, beside
// the fsync floor measured in the same run: every-step durability must cost
// about one fsync a step (the outcome rides the next group commit), and a
// first-touch step on an actuator the saga already holds no fsync at all.
func BenchmarkStep(b *testing.B) {
	var floor time.Duration
	b.Run("floor", func(b *testing.B) {
		lat, err := latency.Floor(b.TempDir(), b.N, 200)
		if err != nil {
			b.Fatal(err)
		}
		floor = lat.Percentile(0.5)
		b.ReportMetric(float64(floor.Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(lat.Percentile(0.99).Nanoseconds()), "p99-ns")
	})
	for _, d := range []Durability{EveryStep, FirstTouch} {
		b.Run(d.String(), func(b *testing.B) {
			e, _ := benchEngine(b, d)
			b.ResetTimer()
			lat := stepLatencies(b, e, b.N)
			b.StopTimer()
			p50, p99 := lat.Percentile(0.5), lat.Percentile(0.99)
			b.ReportMetric(float64(p50.Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(p99.Nanoseconds()), "p99-ns")
			if floor > 0 && d == EveryStep {
				b.ReportMetric(float64(p50)/float64(floor), "p50-x-floor")
				b.ReportMetric(float64(p99)/float64(floor), "p99-x-floor")
			}
		})
	}
}
