package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// benchRows are the rows bench prints, in order.
var benchRows = []string{
	"fsync floor",
	"journal append",
	"group commit 16",
	"group commit 64",
	"engine step every-step",
	"engine step first-touch",
	"gate (refusal)",
	"recovery 10k records",
}

// TestBench runs bench small, as text (bench with flags first) and as JSON
// (bench disk), and checks its shape and that it leaves nothing behind. It
// asserts no speed: speed is what the command and the benchmarks report,
// not what a test can demand of a shared machine.
func TestBench(t *testing.T) {
	dir := t.TempDir()

	out, code := run(t, "bench", "--n", "100", "--dir", dir)
	if code != 0 {
		t.Fatalf("bench exited %d:\n%s", code, out)
	}
	rest := out
	for _, name := range benchRows {
		i := strings.Index(rest, "\n"+name+"  ")
		if i < 0 {
			t.Fatalf("bench output lacks row %q (in order):\n%s", name, out)
		}
		rest = rest[i+1:]
	}
	if !strings.Contains(out, "measured in "+dir+string(filepath.Separator)+"saga-bench-") {
		t.Errorf("bench does not say where it measured:\n%s", out)
	}
	assertEmptyDir(t, dir)

	// bench disk is what bench with flags first runs.
	out, code = run(t, "bench", "disk", "--n", "100", "--json", "--dir", dir)
	if code != 0 {
		t.Fatalf("bench disk --json exited %d:\n%s", code, out)
	}
	var res struct {
		Dir  string `json:"dir"`
		N    int    `json:"n"`
		Rows []struct {
			Name      string   `json:"name"`
			Samples   int      `json:"samples"`
			P50       int64    `json:"p50_ns"`
			P99       int64    `json:"p99_ns"`
			P50xFloor *float64 `json:"p50_x_floor"`
			P99xFloor *float64 `json:"p99_x_floor"`
			Records   uint64   `json:"records"`
			PerSec    float64  `json:"records_per_s"`
		} `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("bench --json is not one JSON object: %v\n%s", err, out)
	}
	if res.N != 100 || !strings.HasPrefix(res.Dir, dir) {
		t.Errorf("bench --json says n=%d dir=%q; want 100 and a directory under %s", res.N, res.Dir, dir)
	}
	if len(res.Rows) != len(benchRows) {
		t.Fatalf("bench --json has %d rows, want %d:\n%s", len(res.Rows), len(benchRows), out)
	}
	for i, r := range res.Rows {
		if r.Name != benchRows[i] {
			t.Errorf("row %d is %q, want %q", i, r.Name, benchRows[i])
		}
		if r.P50 <= 0 || r.P99 < r.P50 || r.Samples <= 0 {
			t.Errorf("row %q: p50_ns %d, p99_ns %d, samples %d; want 0 < p50 <= p99 and samples > 0", r.Name, r.P50, r.P99, r.Samples)
		}
		// Ratios exist exactly for the rows that wait for an fsync.
		wantRatio := i <= 4
		if (r.P50xFloor != nil) != wantRatio || (r.P99xFloor != nil) != wantRatio {
			t.Errorf("row %q: ratios %v/%v, want present: %v", r.Name, r.P50xFloor, r.P99xFloor, wantRatio)
		}
	}
	if r := res.Rows[0]; r.P50xFloor == nil || *r.P50xFloor != 1 {
		t.Errorf("the floor's p50/floor is not 1: %v", r.P50xFloor)
	}
	for _, i := range []int{2, 3} {
		if res.Rows[i].PerSec <= 0 {
			t.Errorf("row %q reports no records/s", res.Rows[i].Name)
		}
	}
	if r := res.Rows[7]; r.Records < 10_000 {
		t.Errorf("recovery rebuilt from %d records, want at least 10000", r.Records)
	}
	assertEmptyDir(t, dir)

	if out, code := run(t, "bench", "--n", "0", "--dir", dir); code != 2 {
		t.Errorf("bench --n 0 exited %d, want 2:\n%s", code, out)
	}
}

// assertEmptyDir fails if anything is left under dir.
func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != dir {
			t.Errorf("bench left %s behind", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
