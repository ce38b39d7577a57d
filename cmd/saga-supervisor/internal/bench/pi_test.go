package bench

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// --cpu always measures the whole machine first; --fsync-delay takes a
// duration or a range, and a drawn delay stays in it.
func TestPiFlags(t *testing.T) {
	for in, want := range map[string][]float64{"none": {0}, "0.25,0.5": {0, 0.25, 0.5}, "1": {0, 1}} {
		got, err := parseCPUs(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parseCPUs(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"0", "-1", "x", "0.25,", "100"} {
		if _, err := parseCPUs(bad); err == nil {
			t.Errorf("parseCPUs(%q) took it", bad)
		}
	}
	d, err := parseDelay("2ms..10ms")
	if err != nil || d.lo != 2*time.Millisecond || d.hi != 10*time.Millisecond || d.String() != "2ms..10ms" {
		t.Fatalf("parseDelay(2ms..10ms) = %+v, %v", d, err)
	}
	for range 1000 {
		if v := d.draw(); v < d.lo || v > d.hi {
			t.Fatalf("drew %v outside %v", v, d)
		}
	}
	if d, err := parseDelay("0"); err != nil || !d.zero() {
		t.Errorf("parseDelay(0) = %+v, %v; want no delay", d, err)
	}
	if d, err := parseDelay("5ms"); err != nil || d.draw() != 5*time.Millisecond || d.String() != "5ms" {
		t.Errorf("parseDelay(5ms) = %+v, %v", d, err)
	}
	for _, bad := range []string{"10ms..2ms", "x", "-1ms", "2ms..x"} {
		if _, err := parseDelay(bad); err == nil {
			t.Errorf("parseDelay(%q) took it", bad)
		}
	}
}

// The table has a column per condition and daemon with the range over
// rounds, ratio columns to the whole machine and between two daemons, and
// the goals at a quarter of a core.
func TestPrintPi(t *testing.T) {
	ms := func(v float64) int64 { return int64(v * float64(time.Millisecond)) }
	mk := func(round int, daemon string, cpu float64, halt float64) PiRun {
		r := PiRun{Round: round, Daemon: daemon, CPU: cpu, Step: PiRow{P50: ms(8), P99: ms(20)}, IdleRSS: RSS{KiB: 16 << 10}, PeakKiB: 24 << 10}
		r.HaltCmd = PiHalts{Reply: PiRow{P50: ms(halt), P99: ms(2 * halt)}, Latched: PiRow{P50: ms(halt / 2), P99: ms(halt)}}
		r.HaltEstop = r.HaltCmd
		r.ExpiryFlood.Late = PiRow{P50: ms(20), Max: ms(30)}
		return r
	}
	res := &PiResult{Cgroup: "cgroup v1 under /sys/fs/cgroup/cpu", PeriodNs: int64(10 * time.Millisecond), Weight: 100,
		FsyncDelay: "2ms..10ms", CPUs: []float64{0, 0.25}, Daemons: []string{"/a/old", "/b/new"}, Rounds: 2, Steps: 200,
		Halts: 20, FloodSteps: 1000, Expiries: 10}
	for round := 1; round <= 2; round++ {
		res.Runs = append(res.Runs, mk(round, "/a/old", 0, 2), mk(round, "/b/new", 0, 2),
			mk(round, "/a/old", 0.25, 10+float64(round)), mk(round, "/b/new", 0.25, 5))
	}
	var b strings.Builder
	printPi(&b, res)
	out := b.String()
	for _, want := range []string{"whole machine old", "0.25 CPU new", "0.25/whole old", "new/old 0.25 CPU",
		"halt on cmd/<agent>: reply p50", "11.0ms–12.0ms", "5.50–6.00", "0.42–0.45",
		"goals at 0.25 CPU old: halt p99 ≤ 20ms on both topics, reply and latch (worst run 24.0ms): MISSED",
		"goals at 0.25 CPU new: halt p99 ≤ 20ms on both topics, reply and latch (worst run 10.0ms): met",
		"old: /a/old"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}
