package supervisor_test

import (
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"github.com/saga-supervisor/saga-supervisor/internal/latency"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// BenchmarkCommandReply is a step's round trip over MQTT — agent → broker
// → supervisor (gate, durable intent, effect) → broker → agent — on the
// in-process broker, one command at a time. It reports p50/p99 and their
// ratio to two fsync floors measured in the same run: back to back, and
// with the same gap a command sees (an fdatasync after an idle moment costs
// more; see latency.FloorGap). The round trip over Debian's mosquitto is
// logged by TestDaemonOverMosquitto in cmd/saga-supervisor.
func BenchmarkCommandReply(b *testing.B) {
	dir := b.TempDir()
	// One agent sends back to back, faster than an agent's default rate
	// (1000/s): the lane would refuse it RATE_LIMITED.
	d := daemontest.Start(b, dir, func(c *config.Config) { c.Agents.Rate, c.Agents.Burst = 1e5, 1e5 })
	a := daemontest.NewAgent(b, d.URL(), d.Topics, "bench")
	a.Hello(60 * time.Second)
	var saga uint64
	lat := make(latency.Samples, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%1000 == 0 { // sagas stay within MaxSagaCommands
			b.StopTimer()
			if saga != 0 {
				a.Must(map[string]any{"op": "commit", "saga": saga})
			}
			saga = a.Must(map[string]any{"op": "begin"}).Saga
			b.StartTimer()
		}
		t0 := time.Now()
		a.Must(map[string]any{"op": "step", "saga": saga, "actuator": "elbow", "value": float64(20 + i%5)})
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	p50, p99 := lat.Percentile(0.5), lat.Percentile(0.99)
	n := min(b.N, 500)
	floor, err := latency.Floor(dir, n, 200)
	if err != nil {
		b.Fatal(err)
	}
	gap, err := latency.FloorGap(dir, n, 200, p50)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(p50.Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(p99.Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(floor.Percentile(0.5).Nanoseconds()), "floor-p50-ns")
	b.ReportMetric(float64(gap.Percentile(0.5).Nanoseconds()), "gapfloor-p50-ns")
	b.ReportMetric(float64(p50-gap.Percentile(0.5))/1e3, "p50-over-gapfloor-us")
}
