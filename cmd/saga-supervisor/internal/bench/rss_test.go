package bench

import (
	"strings"
	"testing"
	"time"
)

// The table names each daemon with its figures in MiB, the after columns
// the watch covered, and the difference to idle at its end.
func TestPrintRSS(t *testing.T) {
	run := RSSRun{Binary: "/b/new", BinaryBytes: 15 << 20, Idle: RSS{KiB: 18 << 10, AnonKiB: 4 << 10, FileKiB: 14 << 10},
		PeakKiB: 55 << 10, FloodEnd: RSS{KiB: 50 << 10, AnonKiB: 36 << 10, FileKiB: 14 << 10}, Sent: 1234, Trims: 2}
	for s := 1; s <= 30; s++ {
		kib := int64(40 << 10)
		if s >= 10 {
			kib = 21 << 10
		}
		run.After = append(run.After, RSSSample{AfterNs: int64(time.Duration(s) * time.Second), RSS: RSS{KiB: kib, AnonKiB: kib - 14<<10, FileKiB: 14 << 10}})
	}
	old := run
	old.Binary, old.Trims = "/b/old", -1
	res := &RSSResult{SettleNs: int64(5 * time.Second), FloodNs: int64(10 * time.Second), AfterNs: int64(30 * time.Second),
		FloodClients: 8, FloodWindow: 64, FloodBigBytes: 32 << 10, FloodBigEvery: 4, IdleClients: 64, FloodAgents: []string{"ctl", "planner"},
		Daemons: []RSSRun{old, run}}
	var b strings.Builder
	printRSS(&b, res)
	out := b.String()
	for _, want := range []string{"8 clients for 10s", "ctl, planner", "+10s", "+30s", "+30s − idle",
		"/b/old", "18.0 (4.0+14.0)", "55.0", "21.0 (7.0+14.0)", "+3.0", "1234", "-", "/b/new", "  2"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "+1m0s") {
		t.Errorf("a column beyond the watch:\n%s", out)
	}
	if got := run.At(10 * time.Second); got.KiB != 21<<10 {
		t.Errorf("At(10s) = %+v", got)
	}
	if got := run.At(time.Hour); got.AfterNs != int64(30*time.Second) {
		t.Errorf("At past the watch = %+v, want the last sample", got)
	}
}
