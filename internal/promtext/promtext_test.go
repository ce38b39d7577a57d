package promtext_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"math"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/saga-supervisor/saga-supervisor/internal/promtext"
	"github.com/saga-supervisor/saga-supervisor/internal/promtext/promtexttest"
)

func text(t *testing.T, r *promtext.Registry) string {
	t.Helper()
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// The exposition is byte for byte what the format asks: families by name,
// series by labels, help and label values escaped, histograms cumulative
// with +Inf, _sum and _count.
func TestWriteText(t *testing.T) {
	r := promtext.NewRegistry()
	cv := promtext.NewCounterVec(promtext.Opts{Name: "b_total", Help: "Back\\slash and\nnewline."}, []string{"op", "code"})
	cv.WithLabelValues("step", `say "hi"`+"\n").Add(2.5)
	cv.WithLabelValues("begin", "ok").Inc()
	g := promtext.NewGauge(promtext.Opts{Name: "a_volts", Help: "A level."})
	g.Set(-1e-7)
	h := promtext.NewHistogram(promtext.HistogramOpts{Name: "c_seconds", Help: "A histogram.", Buckets: promtext.ExponentialBuckets(0.5, 2, 3)})
	for _, v := range []float64{0.5, 0.7, 3, 100} { // 0.5 is in le="0.5": bounds are inclusive
		h.Observe(v)
	}
	r.MustRegister(cv, g, h,
		promtext.NewCounterFunc(promtext.Opts{Name: "d_total", Help: "Func.", ConstLabels: map[string]string{"what": "x"}}, func() float64 { return 1e21 }),
		promtext.NewCounterFunc(promtext.Opts{Name: "d_total", Help: "Func.", ConstLabels: map[string]string{"what": "a"}}, func() float64 { return math.Inf(1) }))
	want := `# HELP a_volts A level.
# TYPE a_volts gauge
a_volts -1e-07
# HELP b_total Back\\slash and\nnewline.
# TYPE b_total counter
b_total{code="ok",op="begin"} 1
b_total{code="say \"hi\"\n",op="step"} 2.5
# HELP c_seconds A histogram.
# TYPE c_seconds histogram
c_seconds_bucket{le="0.5"} 1
c_seconds_bucket{le="1"} 2
c_seconds_bucket{le="2"} 2
c_seconds_bucket{le="+Inf"} 4
c_seconds_sum 104.2
c_seconds_count 4
# HELP d_total Func.
# TYPE d_total counter
d_total{what="a"} +Inf
d_total{what="x"} 1e+21
`
	if got := text(t, r); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	// What client_golang's parser and linter make of it.
	if problems, err := testutil.GatherAndLint(promtexttest.Gatherer(r)); err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %v", err, problems)
	}
}

func TestRegister(t *testing.T) {
	r := promtext.NewRegistry()
	a := promtext.NewCounter(promtext.Opts{Name: "x_total", Help: "X."})
	if err := r.Register(a); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		c       promtext.Collector
		already bool
	}{
		{"same name", promtext.NewCounter(promtext.Opts{Name: "x_total", Help: "X."}), true},
		{"other help", promtext.NewCounter(promtext.Opts{Name: "x_total", Help: "Y.", ConstLabels: map[string]string{"a": "b"}}), false},
		{"other kind", promtext.NewGauge(promtext.Opts{Name: "x_total", Help: "X.", ConstLabels: map[string]string{"a": "b"}}), false},
		{"bad name", promtext.NewGauge(promtext.Opts{Name: "x-y", Help: "X."}), false},
	} {
		err := r.Register(tc.c)
		if err == nil || errors.Is(err, promtext.ErrAlreadyRegistered) != tc.already {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	// Only the family's label names must agree: one more const label set is fine.
	if err := r.Register(promtext.NewCounter(promtext.Opts{Name: "y_total", Help: "Y.", ConstLabels: map[string]string{"a": "1"}})); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(promtext.NewCounter(promtext.Opts{Name: "y_total", Help: "Y.", ConstLabels: map[string]string{"a": "2"}})); err != nil {
		t.Fatal(err)
	}
	if !r.Unregister(a) || r.Has("x_total") || r.Unregister(a) {
		t.Fatal("Unregister did not remove the counter, or removed it twice")
	}
	if err := r.Register(promtext.NewGauge(promtext.Opts{Name: "x_total", Help: "Now a gauge."})); err != nil {
		t.Fatalf("the name is free again: %v", err)
	}
}

// The process's families, read from a /proc fixture.
func TestProcessCollector(t *testing.T) {
	r := promtext.NewRegistry()
	r.MustRegister(promtext.NewProcessCollector("testdata/proc"))
	got := map[string]string{}
	for _, line := range strings.Split(text(t, r), "\n") {
		if name, v, ok := strings.Cut(line, " "); ok && !strings.HasPrefix(line, "#") {
			got[name] = v
		}
	}
	want := map[string]string{
		"process_cpu_seconds_total":            "4", // (250 + 150) / 100
		"process_virtual_memory_bytes":         "1.23456789e+09",
		"process_resident_memory_bytes":        strconv.FormatFloat(2500*float64(os.Getpagesize()), 'g', -1, 64),
		"process_start_time_seconds":           "1.70000012345e+09", // btime + 12345 ticks
		"process_open_fds":                     "3",
		"process_max_fds":                      "1024",
		"process_virtual_memory_max_bytes":     "1.8446744073709552e+19", // unlimited
		"process_network_receive_bytes_total":  "123456",
		"process_network_transmit_bytes_total": "654321",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d samples, want %d: %v", len(got), len(want), got)
	}
}

// The Go collector's families pass the linter (and the process's, from
// this process's /proc).
func TestRuntimeCollectorsLint(t *testing.T) {
	r := promtext.NewRegistry()
	r.MustRegister(promtext.NewGoCollector(), promtext.NewProcessCollector(""))
	if problems, err := testutil.GatherAndLint(promtexttest.Gatherer(r)); err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %v", err, problems)
	}
	if n, err := testutil.GatherAndCount(promtexttest.Gatherer(r), "go_goroutines", "process_resident_memory_bytes", "process_cpu_seconds_total"); err != nil || n != 3 {
		t.Errorf("%d of 3 series (%v)", n, err)
	}
}

func TestHandler(t *testing.T) {
	r := promtext.NewRegistry()
	r.MustRegister(promtext.NewCounter(promtext.Opts{Name: "x_total", Help: "X."}))
	h := r.Handler(promtext.HandlerOpts{MaxInFlight: 1})
	for _, enc := range []string{"", "gzip", "gzip;q=0", "deflate, gzip;q=0.5"} {
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header.Set("Accept-Encoding", enc)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 || w.Header().Get("Content-Type") != promtext.ContentType {
			t.Fatalf("%q: %d %q", enc, w.Code, w.Header().Get("Content-Type"))
		}
		body := io.Reader(w.Body)
		gz := w.Header().Get("Content-Encoding") == "gzip"
		if gz != (enc == "gzip" || enc == "deflate, gzip;q=0.5") {
			t.Errorf("%q: gzip %v", enc, gz)
		}
		if gz {
			z, err := gzip.NewReader(body)
			if err != nil {
				t.Fatal(err)
			}
			body = z
		}
		b, _ := io.ReadAll(body)
		if !strings.Contains(string(b), "x_total 0\n") {
			t.Errorf("%q: body %q", enc, b)
		}
	}
}

// TestCounterVecEach: Each gives every series its label values and value.
func TestCounterVecEach(t *testing.T) {
	v := promtext.NewCounterVec(promtext.Opts{Name: "e_total", Help: "E."}, []string{"code", "op"})
	v.WithLabelValues("A", "x").Add(2)
	v.WithLabelValues("B", "y").Inc()
	got := map[string]float64{}
	v.Each(func(lvs []string, value float64) { got[lvs[0]+"/"+lvs[1]] = value })
	if len(got) != 2 || got["A/x"] != 2 || got["B/y"] != 1 {
		t.Fatalf("Each gave %v", got)
	}
}
