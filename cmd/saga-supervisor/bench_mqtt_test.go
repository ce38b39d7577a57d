package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/bench"
	"github.com/saga-supervisor/saga-supervisor/internal/longtest"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt/embedded"
)

// TestBenchMQTT runs bench mqtt with tiny sample counts, once on its
// embedded broker as text and once as JSON against a broker started here
// (the --broker path, without needing mosquitto), and checks the shape of
// what it reports and that it leaves nothing behind. Like TestBench it
// asserts no speed: the figures are the command's to report.
func TestBenchMQTT(t *testing.T) {
	longtest.Skip(t)
	dir := t.TempDir()
	small := []string{"--n", "10", "--halts", "2", "--agents", "3", "--agents-time", "100ms", "--expiries", "2", "--dir", dir}

	out, code := run(t, append([]string{"bench", "mqtt"}, small...)...)
	if code != 0 {
		t.Fatalf("bench mqtt exited %d:\n%s", code, out)
	}
	rest := out
	for _, want := range []string{
		"embedded (mochi-mqtt, in this process)",
		"supervisor in this process",
		"\n1. round trips",
		"\necho (bare broker, QoS 1 both ways)  ",
		"\nheartbeat (lease only, no journal)  ",
		"\nstep (durable, every-step)  ",
		"\nlocal engine step (no MQTT)  ",
		"\nfsync floor  ",
		"\noverhead = step − echo − local step",
		"\n2. halt",
		"\nhalt reply, quiet  ",
		"\nhalt reply, flood  ",
		"\nstatus halted:true, quiet  ",
		"\nstatus halted:true, flood  ",
		"\nlatched in the supervisor, quiet  ",
		"\nlatched in the supervisor, flood  ",
		"\nflood: ",
		"\n3. durable steps/s: 3 agents",
		"\nMQTT, 3 agents  ",
		"\nin-process, 3 goroutines  ",
		"\n4. lease expiry",
		"\nquiet  ",
		"\n8 agents stepping durably  ",
	} {
		i := strings.Index(rest, want)
		if i < 0 {
			t.Fatalf("bench mqtt output lacks %q (in order):\n%s", want, out)
		}
		rest = rest[i+len(want):]
	}
	assertEmptyDir(t, dir)

	broker, err := embedded.Start("127.0.0.1:0", 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	out, code = run(t, append([]string{"bench", "mqtt", "--json", "--broker", broker.URL()}, small...)...)
	if code != 0 {
		t.Fatalf("bench mqtt --broker %s --json exited %d:\n%s", broker.URL(), code, out)
	}
	var res bench.FrontDoorResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("bench mqtt --json is not one JSON object: %v\n%s", err, out)
	}
	if res.Broker != broker.URL() || res.BrokerKind != "external" {
		t.Errorf("broker %q (%s), want %s (external)", res.Broker, res.BrokerKind, broker.URL())
	}
	if len(res.RoundTrips) != 5 || len(res.Halt) != 6 || len(res.Throughput) != 2 {
		t.Fatalf("%d round-trip rows, %d halt rows, %d throughput rows; want 5, 6, 2:\n%s", len(res.RoundTrips), len(res.Halt), len(res.Throughput), out)
	}
	for _, r := range append(res.RoundTrips, res.Halt...) {
		if r.Samples <= 0 || r.P50 <= 0 || r.P99 < r.P50 || r.Max < r.P99 {
			t.Errorf("row %q: samples %d, p50 %d, p99 %d, max %d; want samples > 0 and 0 < p50 <= p99 <= max", r.Name, r.Samples, r.P50, r.P99, r.Max)
		}
	}
	for i, r := range res.RoundTrips {
		if (r.P50xRef != nil) != (i > 0) {
			t.Errorf("row %q: ratio to the echo present %v, want %v", r.Name, r.P50xRef != nil, i > 0)
		}
	}
	if res.Halt[0].Samples != 2 || res.Halt[1].Samples != 2 {
		t.Errorf("halt samples %d quiet, %d flood; want 2 and 2", res.Halt[0].Samples, res.Halt[1].Samples)
	}
	f := res.Flood
	var answered uint64
	for _, n := range f.Replies {
		answered += n
	}
	if f.Sent == 0 || f.Err != nil || answered+f.NoReply < f.Sent || f.Samples != 2 {
		t.Errorf("flood: sent %d, answered %d, no reply %d, samples %d, error %v", f.Sent, answered, f.NoReply, f.Samples, f.Err)
	}
	for _, tp := range res.Throughput {
		if tp.Agents != 3 || tp.Steps <= 0 || tp.StepsPerSec <= 0 {
			t.Errorf("throughput %q: %d agents, %d steps, %.0f/s", tp.Name, tp.Agents, tp.Steps, tp.StepsPerSec)
		}
	}
	// Lease expiries: each happened (the servo came back), none early.
	if len(res.Expiries) != 3 || !strings.Contains(res.Expiries[2].Name, "fsync 5ms slower") {
		t.Fatalf("%d lease-expiry rows %+v, want 3 (quiet, busy, busy on a slow disk)", len(res.Expiries), res.Expiries)
	}
	for i, e := range res.Expiries {
		if e.Samples != 2 || e.P50Late < 0 || e.MaxLate < e.P50Late || (i >= 1) != (e.BackgroundSteps > 0) {
			t.Errorf("lease expiry %q: %d samples, p50 late %d ns, max %d ns, %d background steps", e.Name, e.Samples, e.P50Late, e.MaxLate, e.BackgroundSteps)
		}
	}
	assertEmptyDir(t, dir)

	if out, code := run(t, "bench", "mqtt", "--halts", "0", "--dir", dir); code != 2 {
		t.Errorf("bench mqtt --halts 0 exited %d, want 2:\n%s", code, out)
	}
}
