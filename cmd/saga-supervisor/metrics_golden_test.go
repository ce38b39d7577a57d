package main

import (
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/memtrim"
	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/metrics.golden from a running daemon")

// Every family /metrics serves — name, type, help, label names and, for
// histograms, the bucket bounds — is the one testdata/metrics.golden
// records: dashboards and alert rules are written against them. The
// saga_ families' series present at start (their label values) are
// recorded too; the Go runtime's and the process's, and the build info,
// only by name, as their values (go_info's version) depend on the build.
func TestMetricsGolden(t *testing.T) {
	d := daemontest.Start(t, "", nil)
	tr := memtrim.Start(memtrim.Options{Every: time.Hour})
	defer tr.Stop()
	registerMemoryMetrics(d.Sup.Registry(), tr)
	srv := httptest.NewServer(d.Sup.HTTPHandler())
	defer srv.Close()

	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
	// What Prometheus falls back to, and what curl gets.
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=0.3,*/*;q=0.2")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q, want the text format 0.0.4", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	got := describeFamilies(fams)

	path := filepath.Join("testdata", "metrics.golden")
	if *updateGolden {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for _, l := range wl {
			if !slices.Contains(gl, l) {
				t.Errorf("missing: %s", l)
			}
		}
		for _, l := range gl {
			if !slices.Contains(wl, l) {
				t.Errorf("new:     %s", l)
			}
		}
		t.Errorf("/metrics differs from %s (-update rewrites it)", path)
	}
}

// describeFamilies writes one line per family, and for saga_ families one
// line per series, sorted.
func describeFamilies(fams map[string]*dto.MetricFamily) string {
	var lines []string
	for name, f := range fams {
		labels := map[string]bool{}
		var bounds []string
		for _, m := range f.GetMetric() {
			var lv []string
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
				lv = append(lv, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			// The build's info is recorded by its label names only: their
			// values (version, commit, Go) are the build's.
			if strings.HasPrefix(name, "saga_") && name != "saga_supervisor_build_info" {
				lines = append(lines, fmt.Sprintf("%s series {%s}", name, strings.Join(lv, ",")))
			}
			if h := m.GetHistogram(); h != nil && bounds == nil {
				for _, b := range h.GetBucket() {
					bounds = append(bounds, fmt.Sprint(b.GetUpperBound()))
				}
			}
			if s := m.GetSummary(); s != nil && bounds == nil {
				for _, q := range s.GetQuantile() {
					bounds = append(bounds, fmt.Sprint(q.GetQuantile()))
				}
			}
		}
		names := make([]string, 0, len(labels))
		for l := range labels {
			names = append(names, l)
		}
		slices.Sort(names)
		line := fmt.Sprintf("%s %s labels=[%s] help=%q", name, strings.ToLower(f.GetType().String()), strings.Join(names, ","), f.GetHelp())
		if bounds != nil {
			line += " bounds=[" + strings.Join(bounds, ",") + "]"
		}
		lines = append(lines, line)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}
