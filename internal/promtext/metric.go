package promtext

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Opts name a metric: its family name, help and the labels every one of
// its samples carries with one value.
type Opts struct {
	Name, Help  string
	ConstLabels map[string]string
}

func (o Opts) desc(kind Kind, labels []string) *Desc {
	d := &Desc{Name: o.Name, Help: o.Help, Kind: kind, Labels: labels}
	for n, v := range o.ConstLabels {
		d.ConstLabels = append(d.ConstLabels, Label{n, v})
	}
	slices.SortFunc(d.ConstLabels, func(a, b Label) int { return strings.Compare(a.Name, b.Name) })
	return d
}

// value is a float64 updated atomically.
type value struct{ bits atomic.Uint64 }

func (v *value) add(d float64) {
	for {
		old := v.bits.Load()
		if v.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+d)) {
			return
		}
	}
}

func (v *value) load() float64 { return math.Float64frombits(v.bits.Load()) }

// Counter is a value that only goes up.
type Counter struct {
	d *Desc
	v value
}

// NewCounter returns a counter, at 0.
func NewCounter(o Opts) *Counter { return &Counter{d: o.desc(CounterKind, nil)} }

// Inc adds 1.
func (c *Counter) Inc() { c.v.add(1) }

// Add adds d, which must not be negative: a counter never goes down.
func (c *Counter) Add(d float64) {
	if d < 0 {
		panic(fmt.Sprintf("promtext: counter %s decreased by %g", c.d.Name, d))
	}
	c.v.add(d)
}

// Value is the count so far.
func (c *Counter) Value() float64 { return c.v.load() }

// Describe implements Collector.
func (c *Counter) Describe() []*Desc { return []*Desc{c.d} }

// Collect implements Collector.
func (c *Counter) Collect(s *Sink) { s.Value(c.d, c.v.load()) }

// Gauge is a value that goes up and down.
type Gauge struct {
	d *Desc
	v value
}

// NewGauge returns a gauge, at 0.
func NewGauge(o Opts) *Gauge { return &Gauge{d: o.desc(GaugeKind, nil)} }

// Set sets the gauge to v.
func (g *Gauge) Set(v float64) { g.v.bits.Store(math.Float64bits(v)) }

// Add adds d (negative: subtracts).
func (g *Gauge) Add(d float64) { g.v.add(d) }

// Value is the gauge's value.
func (g *Gauge) Value() float64 { return g.v.load() }

// Describe implements Collector.
func (g *Gauge) Describe() []*Desc { return []*Desc{g.d} }

// Collect implements Collector.
func (g *Gauge) Collect(s *Sink) { s.Value(g.d, g.v.load()) }

// CounterVec is a family of counters, one per set of label values.
type CounterVec struct {
	d  *Desc
	mu sync.RWMutex
	m  map[string]*vecEntry
}

type vecEntry struct {
	labels []string
	c      Counter
}

// NewCounterVec returns a family of counters with those labels, and no
// series until WithLabelValues makes one.
func NewCounterVec(o Opts, labels []string) *CounterVec {
	return &CounterVec{d: o.desc(CounterKind, labels), m: map[string]*vecEntry{}}
}

// WithLabelValues returns the counter of those label values (one per
// label, in the order NewCounterVec named them), making it at 0 if new.
func (v *CounterVec) WithLabelValues(lvs ...string) *Counter {
	if len(lvs) != len(v.d.Labels) {
		panic(fmt.Sprintf("promtext: %s has labels %v, given values %v", v.d.Name, v.d.Labels, lvs))
	}
	k := strings.Join(lvs, "\xff")
	v.mu.RLock()
	e := v.m[k]
	v.mu.RUnlock()
	if e != nil {
		return &e.c
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if e = v.m[k]; e == nil {
		e = &vecEntry{labels: slices.Clone(lvs), c: Counter{d: v.d}}
		v.m[k] = e
	}
	return &e.c
}

// Describe implements Collector.
func (v *CounterVec) Describe() []*Desc { return []*Desc{v.d} }

// Collect implements Collector.
func (v *CounterVec) Collect(s *Sink) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, e := range v.m {
		s.Value(v.d, e.c.v.load(), e.labels...)
	}
}

// Each calls fn with every series' label values (in the order
// NewCounterVec named them) and value, in no order: for a reader inside
// the process, without a scrape.
func (v *CounterVec) Each(fn func(labelValues []string, value float64)) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, e := range v.m {
		fn(e.labels, e.c.v.load())
	}
}

// Func is a counter or a gauge whose value a function reads when scraped.
type Func struct {
	d  *Desc
	fn func() float64
}

// NewCounterFunc returns a counter read from fn, which must never return
// less than it did before.
func NewCounterFunc(o Opts, fn func() float64) *Func {
	return &Func{d: o.desc(CounterKind, nil), fn: fn}
}

// NewGaugeFunc returns a gauge read from fn.
func NewGaugeFunc(o Opts, fn func() float64) *Func {
	return &Func{d: o.desc(GaugeKind, nil), fn: fn}
}

// Describe implements Collector.
func (f *Func) Describe() []*Desc { return []*Desc{f.d} }

// Collect implements Collector.
func (f *Func) Collect(s *Sink) { s.Value(f.d, f.fn()) }

// HistogramOpts name a histogram and give its buckets' upper bounds,
// increasing (the +Inf bucket is implied).
type HistogramOpts struct {
	Name, Help string
	Buckets    []float64
}

// Histogram counts observations in buckets.
type Histogram struct {
	d      *Desc
	bounds []float64
	mu     sync.Mutex
	counts []uint64 // per bucket, not cumulative; the last is +Inf's
	sum    float64
	count  uint64
}

// NewHistogram returns an empty histogram.
func NewHistogram(o HistogramOpts) *Histogram {
	if !slices.IsSorted(o.Buckets) || slices.Contains(o.Buckets, math.Inf(+1)) {
		panic(fmt.Sprintf("promtext: %s: buckets must increase and leave +Inf implied", o.Name))
	}
	return &Histogram{
		d:      Opts{Name: o.Name, Help: o.Help}.desc(HistogramKind, nil),
		bounds: slices.Clone(o.Buckets),
		counts: make([]uint64, len(o.Buckets)+1),
	}
}

// Observe counts v in the first bucket whose bound is at least v.
func (h *Histogram) Observe(v float64) {
	i, _ := slices.BinarySearch(h.bounds, v)
	h.mu.Lock()
	h.counts[i]++
	h.sum += v
	h.count++
	h.mu.Unlock()
}

// Describe implements Collector.
func (h *Histogram) Describe() []*Desc { return []*Desc{h.d} }

// Collect implements Collector.
func (h *Histogram) Collect(s *Sink) {
	d := &Distribution{Bounds: h.bounds, Values: make([]float64, len(h.bounds))}
	h.mu.Lock()
	var cum uint64
	for i := range h.bounds {
		cum += h.counts[i]
		d.Values[i] = float64(cum)
	}
	d.Sum, d.Count = h.sum, h.count
	h.mu.Unlock()
	s.add(h.d, Sample{Dist: d}, nil)
}

// ExponentialBuckets returns count bounds, the first start and each next
// factor times the last.
func ExponentialBuckets(start, factor float64, count int) []float64 {
	if count < 1 || start <= 0 || factor <= 1 {
		panic("promtext: ExponentialBuckets needs count ≥ 1, start > 0 and factor > 1")
	}
	b := make([]float64, count)
	for i := range b {
		b[i] = start
		start *= factor
	}
	return b
}
