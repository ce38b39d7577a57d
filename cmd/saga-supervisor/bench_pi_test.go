package main

import (
	"encoding/json"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/bench"
)

// TestBenchPi is a smoke of bench pi (make bench-pi is the profile):
// tiny counts, once on the whole machine with no fsync delay — which runs
// anywhere — and its report's shape; then, where this process can make a
// cgroup and install a seccomp filter (root on a host with the cpu
// controller), once more under a quota with every fsync held, checking
// from the JSON that the daemon ran confined (throttled periods counted
// by its cgroup) and that its fsyncs were held. Where it cannot (not root;
// a container without cgroup delegation or seccomp user notification, as
// CI's may be), that part is skipped with bench pi's own words for why. It
// asserts no speed.
func TestBenchPi(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("bench pi needs Linux")
	}
	small := []string{"bench", "pi", "--rounds", "1", "--steps", "3", "--halts", "1", "--flood-steps", "40",
		"--expiries", "1", "--records", "2000", "--settle", "0s"}
	t.Run("whole machine", func(t *testing.T) {
		dir := t.TempDir()
		out, code := run(t, append(small, "--dir", dir, "--cpu", "none", "--fsync-delay", "0")...)
		if code != 0 {
			t.Fatalf("bench pi --cpu none exited %d:\n%s", code, out)
		}
		rest := out
		for _, want := range []string{
			"quota: none (--cpu none: the whole machine only)",
			"fsync and fdatasync of the daemon: none added",
			"  whole machine",
			"\ndurable step p50  ",
			"\nhalt on cmd/<agent>: reply p50  ",
			"\n  latched (its HALT record) p50  ",
			"\nhalt on estop/<agent>: reply p50  ",
			"\nbystander's lease expired  ",
			"\nlease expiry, flood: unwound past TTL p50  ",
			"\nrestart, big journal, no checkpoint  ",
			"\nrestart, big journal, after a clean stop  ",
			"\nRSS peak (VmHWM), MiB  ",
			"\nTook ",
		} {
			i := strings.Index(rest, want)
			if i < 0 {
				t.Fatalf("bench pi output lacks %q (in order):\n%s", want, out)
			}
			rest = rest[i+len(want):]
		}
		assertEmptyDir(t, dir)
	})

	t.Run("quota", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("not root: bench pi cannot make a cgroup or hold fsyncs here, so the quota is not tried")
		}
		dir := t.TempDir()
		// The default CPU weight, not the bench's 10000: the test asserts no
		// speed, and a high weight would starve the packages tested beside it.
		out, code := run(t, append(small, "--dir", dir, "--cpu", "0.5", "--fsync-delay", "1ms", "--weight", "100", "--json")...)
		if code != 0 {
			for _, unsupported := range []string{"cannot hold the daemon to a CPU quota", "seccomp user notification is not available"} {
				if strings.Contains(out, unsupported) {
					t.Skipf("this host cannot confine the daemon; bench pi said why and stopped:\n%s", out)
				}
			}
			t.Fatalf("bench pi --cpu 0.5 exited %d:\n%s", code, out)
		}
		var res bench.PiResult
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("bench pi --json is not one JSON object: %v\n%s", err, out)
		}
		if len(res.Runs) != 2 {
			t.Fatalf("%d runs, want 2 (the whole machine, 0.5 CPU):\n%s", len(res.Runs), out)
		}
		for _, r := range res.Runs {
			if r.Fsyncs == 0 || r.FsyncHeldNs == 0 {
				t.Errorf("%g CPU: no fsync was held (%d, %d ns)", r.CPU, r.Fsyncs, r.FsyncHeldNs)
			}
			if r.Step.N != 3 || r.HaltCmd.Reply.N != 1 || r.HaltEstop.Reply.N != 1 || r.HaltCmd.Lost+r.HaltEstop.Lost != 0 ||
				r.RestartCold == 0 || r.RestartWarm == 0 || r.IdleRSS.KiB == 0 || r.PeakKiB < r.IdleRSS.KiB {
				t.Errorf("%g CPU: %+v", r.CPU, r)
			}
			if r.CPU == 0.5 && (!strings.Contains(r.Limit, "5000") || r.Throttle.Periods == 0) {
				t.Errorf("0.5 CPU: limit %q, %+v: not confined as asked", r.Limit, r.Throttle)
			}
		}
		assertEmptyDir(t, dir)
	})
}
