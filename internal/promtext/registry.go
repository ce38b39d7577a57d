// Package promtext holds metrics on a registry and serves them in the
// Prometheus text exposition format, version 0.0.4: counters, gauges and
// histograms, with labels, read by collectors at scrape time where that
// keeps them fresh, and the Go runtime's and the process's own families.
//
// It stands in for github.com/prometheus/client_golang, whose registry
// encodes through protocol buffers and links google.golang.org/protobuf
// with its reflection tables: some 2 MiB of a 12 MiB budget for a daemon
// that only ever writes the text format (docs/DESIGN.md, "Dependencies").
// The names follow client_golang's (NewCounterVec, Opts, WithLabelValues,
// MustRegister) so that registering a metric reads the same.
//
// The format written is the one Prometheus documents for text 0.0.4: per
// family a # HELP and a # TYPE line, then its samples; families sorted by
// name and series by their labels; label values and help escaped as the
// format asks. OpenMetrics is not offered: a scraper that asks for it
// (Prometheus does, first) gets 0.0.4, which it accepts as well.
package promtext

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Kind is a family's metric type, as its # TYPE line names it.
type Kind uint8

// The kinds of family.
const (
	CounterKind Kind = iota
	GaugeKind
	HistogramKind
	SummaryKind
)

func (k Kind) String() string {
	return [...]string{"counter", "gauge", "histogram", "summary"}[k]
}

// Label is one label's name and value.
type Label struct{ Name, Value string }

// Desc describes a family, or the part of one a collector writes: its
// name, help, kind, the names of the labels its samples carry, and labels
// every one of its samples has with the same value (ConstLabels).
type Desc struct {
	Name, Help  string
	Kind        Kind
	Labels      []string
	ConstLabels []Label // sorted by name
}

// NewDesc returns the description of a family whose samples carry labels.
func NewDesc(name, help string, kind Kind, labels ...string) *Desc {
	return &Desc{Name: name, Help: help, Kind: kind, Labels: labels}
}

// key identifies what one collector writes of a family: its name and
// constant labels.
func (d *Desc) key() string {
	var b strings.Builder
	b.WriteString(d.Name)
	for _, l := range d.ConstLabels {
		b.WriteString("\xff" + l.Name + "\xfe" + l.Value)
	}
	return b.String()
}

// labelNames are the names of every label its samples carry, sorted.
func (d *Desc) labelNames() []string {
	n := slices.Clone(d.Labels)
	for _, l := range d.ConstLabels {
		n = append(n, l.Name)
	}
	slices.Sort(n)
	return n
}

// A Collector writes samples of the families it describes, when scraped.
// Describe's answer must not change.
type Collector interface {
	Describe() []*Desc
	Collect(s *Sink)
}

// ErrAlreadyRegistered is what Register returns for a collector of a
// family and constant labels that a registered collector already writes.
var ErrAlreadyRegistered = errors.New("promtext: already registered")

// Registry holds collectors. Its zero value is not usable: NewRegistry.
type Registry struct {
	mu      sync.Mutex
	cs      []Collector
	owner   map[string]Collector // Desc.key → the collector writing it
	fams    map[string]*Desc     // family name → its first Desc, to check the next against
	useFams map[string]int       // family name → collectors writing it
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{owner: map[string]Collector{}, fams: map[string]*Desc{}, useFams: map[string]int{}}
}

// Register adds c. It refuses a collector that writes a family and
// constant labels already written by another (ErrAlreadyRegistered), and
// one whose family another collector writes with a different help, kind
// or label names.
func (r *Registry) Register(c Collector) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	ds := c.Describe()
	for _, d := range ds {
		if !validName(d.Name) {
			return fmt.Errorf("promtext: %q is not a valid metric name", d.Name)
		}
		if _, ok := r.owner[d.key()]; ok {
			return fmt.Errorf("%w: %s", ErrAlreadyRegistered, d.Name)
		}
		if f, ok := r.fams[d.Name]; ok && (f.Help != d.Help || f.Kind != d.Kind || !slices.Equal(f.labelNames(), d.labelNames())) {
			return fmt.Errorf("promtext: %s registered again with a different help, type or labels", d.Name)
		}
	}
	for _, d := range ds {
		r.owner[d.key()] = c
		if r.useFams[d.Name] == 0 {
			r.fams[d.Name] = d
		}
		r.useFams[d.Name]++
	}
	r.cs = append(r.cs, c)
	return nil
}

// MustRegister registers each collector and panics if one is refused: for
// metrics a program defines once, whose refusal is a bug.
func (r *Registry) MustRegister(cs ...Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister removes c; it reports whether c was registered.
func (r *Registry) Unregister(c Collector) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := slices.Index(r.cs, c)
	if i < 0 {
		return false
	}
	r.cs = slices.Delete(r.cs, i, i+1)
	for _, d := range c.Describe() {
		delete(r.owner, d.key())
		if r.useFams[d.Name]--; r.useFams[d.Name] == 0 {
			delete(r.useFams, d.Name)
			delete(r.fams, d.Name)
		}
	}
	return true
}

// Has reports whether a family of that name is registered.
func (r *Registry) Has(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.useFams[name] > 0
}

// Sink receives the samples of one scrape from the collectors.
type Sink struct {
	fams map[string]*Family
}

// Family is one family's samples, as a scrape gathered them.
type Family struct {
	Desc    *Desc
	Samples []Sample // sorted by their labels
}

// Sample is one series' value: a counter's or gauge's Value, or a
// histogram's or summary's Dist.
type Sample struct {
	Labels []Label // sorted by name
	Value  float64
	Dist   *Distribution
}

// Distribution is a histogram's cumulative buckets or a summary's
// quantiles, with the sum and count of what was observed.
type Distribution struct {
	Bounds []float64 // the buckets' le, or the quantiles
	Values []float64 // cumulative counts, or the quantiles' values
	Sum    float64
	Count  uint64
}

func (s *Sink) add(d *Desc, smp Sample, labelValues []string) {
	if len(labelValues) != len(d.Labels) {
		panic(fmt.Sprintf("promtext: %s has labels %v, given values %v", d.Name, d.Labels, labelValues))
	}
	f := s.fams[d.Name]
	if f == nil {
		f = &Family{Desc: d}
		s.fams[d.Name] = f
	}
	smp.Labels = make([]Label, 0, len(d.ConstLabels)+len(labelValues))
	smp.Labels = append(smp.Labels, d.ConstLabels...)
	for i, v := range labelValues {
		smp.Labels = append(smp.Labels, Label{d.Labels[i], v})
	}
	slices.SortFunc(smp.Labels, func(a, b Label) int { return strings.Compare(a.Name, b.Name) })
	f.Samples = append(f.Samples, smp)
}

// Value writes a counter's or a gauge's sample.
func (s *Sink) Value(d *Desc, v float64, labelValues ...string) {
	s.add(d, Sample{Value: v}, labelValues)
}

// Summary writes a summary: quantiles maps each quantile to its value.
func (s *Sink) Summary(d *Desc, quantiles map[float64]float64, sum float64, count uint64, labelValues ...string) {
	dist := &Distribution{Sum: sum, Count: count}
	for _, q := range slices.Sorted(maps.Keys(quantiles)) {
		dist.Bounds = append(dist.Bounds, q)
		dist.Values = append(dist.Values, quantiles[q])
	}
	s.add(d, Sample{Dist: dist}, labelValues)
}

// Gather collects every registered collector: the families they wrote,
// sorted by name.
func (r *Registry) Gather() []*Family {
	r.mu.Lock()
	cs := slices.Clone(r.cs)
	r.mu.Unlock()
	s := &Sink{fams: map[string]*Family{}}
	for _, c := range cs {
		c.Collect(s)
	}
	fams := slices.Collect(maps.Values(s.fams))
	slices.SortFunc(fams, func(a, b *Family) int { return strings.Compare(a.Desc.Name, b.Desc.Name) })
	for _, f := range fams {
		slices.SortStableFunc(f.Samples, func(a, b Sample) int { return compareLabels(a.Labels, b.Labels) })
	}
	return fams
}

// WriteText gathers and writes the families in the text format 0.0.4.
func (r *Registry) WriteText(w io.Writer) error {
	var b []byte
	for _, f := range r.Gather() {
		b = appendFamily(b[:0], f)
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

func compareLabels(a, b []Label) int {
	for i := range min(len(a), len(b)) {
		if c := cmp.Or(strings.Compare(a[i].Name, b[i].Name), strings.Compare(a[i].Value, b[i].Value)); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a), len(b))
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	valueEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func appendFamily(b []byte, f *Family) []byte {
	d := f.Desc
	b = append(b, "# HELP "+d.Name+" "...)
	b = append(b, helpEscaper.Replace(d.Help)...)
	b = append(b, "\n# TYPE "+d.Name+" "+d.Kind.String()+"\n"...)
	for _, s := range f.Samples {
		switch dist := s.Dist; {
		case dist == nil:
			b = appendSample(b, d.Name, s.Labels, Label{}, s.Value)
		case d.Kind == HistogramKind:
			for i, le := range dist.Bounds {
				b = appendSample(b, d.Name+"_bucket", s.Labels, Label{"le", formatFloat(le)}, dist.Values[i])
			}
			b = appendSample(b, d.Name+"_bucket", s.Labels, Label{"le", "+Inf"}, float64(dist.Count))
			b = appendSample(b, d.Name+"_sum", s.Labels, Label{}, dist.Sum)
			b = appendSample(b, d.Name+"_count", s.Labels, Label{}, float64(dist.Count))
		default:
			for i, q := range dist.Bounds {
				b = appendSample(b, d.Name, s.Labels, Label{"quantile", formatFloat(q)}, dist.Values[i])
			}
			b = appendSample(b, d.Name+"_sum", s.Labels, Label{}, dist.Sum)
			b = appendSample(b, d.Name+"_count", s.Labels, Label{}, float64(dist.Count))
		}
	}
	return b
}

// appendSample writes one sample line; extra, if named, is the last label
// (a histogram's le, a summary's quantile).
func appendSample(b []byte, name string, labels []Label, extra Label, v float64) []byte {
	b = append(b, name...)
	if len(labels) > 0 || extra.Name != "" {
		b = append(b, '{')
		for i, l := range labels {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, l.Name+`="`...)
			b = append(b, valueEscaper.Replace(l.Value)...)
			b = append(b, '"')
		}
		if extra.Name != "" {
			if len(labels) > 0 {
				b = append(b, ',')
			}
			b = append(b, extra.Name+`="`+extra.Value+`"`...)
		}
		b = append(b, '}')
	}
	b = append(b, ' ')
	b = append(b, formatFloat(v)...)
	return append(b, '\n')
}

// formatFloat writes a value as the format (and client_golang) does: the
// shortest representation, +Inf, -Inf or NaN.
func formatFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, +1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// validName reports whether name is a metric name in the classic
// character set, [a-zA-Z_:][a-zA-Z0-9_:]*.
func validName(name string) bool {
	if name == "" {
		return false
	}
	for i, c := range name {
		if c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9' {
			continue
		}
		return false
	}
	return true
}
