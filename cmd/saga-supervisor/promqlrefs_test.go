package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The monitoring test (monitoring_test.go) needs the metric and label
// names the dashboard and the alert rules use. Prometheus's own PromQL
// parser would bring the whole Prometheus server module into go.mod for
// one test, so this is a small lexer instead: it reads selectors, matchers
// and grouping clauses, and knows PromQL's functions and keywords, which is
// all it takes to tell a metric name from everything else.

// promRef is one vector selector: a metric name and its label matchers.
type promRef struct {
	Metric   string
	Matchers []promMatcher
}

// promMatcher is one label matcher of a selector: label op "value".
type promMatcher struct {
	Label, Op, Value string
}

// promRefs is what an expression refers to: its selectors, and the label
// names of its by, without, on, ignoring and group_left/right clauses.
type promRefs struct {
	Refs     []promRef
	Grouping []string
}

// promFunctions are PromQL's functions and aggregation operators
// (Prometheus 2.x and 3.x): an identifier followed by "(" must be one.
var promFunctions = map[string]bool{}

func init() {
	for _, f := range strings.Fields(`
		abs absent absent_over_time acos acosh asin asinh atan atanh avg_over_time ceil changes clamp clamp_max
		clamp_min cos cosh count_over_time day_of_month day_of_week day_of_year days_in_month deg delta deriv
		double_exponential_smoothing exp floor histogram_avg histogram_count histogram_fraction histogram_quantile
		histogram_stddev histogram_stdvar histogram_sum holt_winters hour idelta increase info irate label_join
		label_replace last_over_time ln log10 log2 mad_over_time max_over_time min_over_time minute month pi
		predict_linear present_over_time quantile_over_time rad rate resets round scalar sgn sin sinh sort
		sort_by_label sort_by_label_desc sort_desc sqrt stddev_over_time stdvar_over_time sum_over_time tan tanh
		time timestamp vector year start end
		sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk limit_ratio`) {
		promFunctions[f] = true
	}
}

// promAggregations may take their grouping clause before the parentheses:
// sum by (job) (x).
var promAggregations = map[string]bool{"sum": true, "min": true, "max": true, "avg": true, "group": true,
	"stddev": true, "stdvar": true, "count": true, "count_values": true, "bottomk": true, "topk": true,
	"quantile": true, "limitk": true, "limit_ratio": true}

// promKeywords are binary operators and modifiers spelt as words.
var promKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
	"atan2": true, "inf": true, "nan": true}

// promGrouping are the clauses whose parentheses list label names.
var promGrouping = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func isIdentChar(c byte) bool { return isIdentStart(c) || '0' <= c && c <= '9' }

// parsePromQL lists the selectors and grouping labels of a PromQL
// expression (Grafana's $variables allowed where Grafana puts them: in
// strings and ranges).
func parsePromQL(expr string) (promRefs, error) {
	var out promRefs
	i := 0
	skipSpace := func() {
		for i < len(expr) && strings.ContainsRune(" \t\r\n", rune(expr[i])) {
			i++
		}
	}
	ident := func() string {
		start := i
		for i < len(expr) && isIdentChar(expr[i]) {
			i++
		}
		return expr[start:i]
	}
	str := func() (string, error) {
		q := expr[i]
		var b strings.Builder
		for i++; i < len(expr); i++ {
			switch c := expr[i]; {
			case c == q:
				i++
				return b.String(), nil
			case c == '\\' && q != '`' && i+1 < len(expr):
				i++
				b.WriteByte(expr[i])
			default:
				b.WriteByte(c)
			}
		}
		return "", fmt.Errorf("unterminated string in %q", expr)
	}
	labelList := func() ([]string, error) {
		var labels []string
		i++ // '('
		for {
			skipSpace()
			switch {
			case i >= len(expr):
				return nil, fmt.Errorf("unclosed label list in %q", expr)
			case expr[i] == ')':
				i++
				return labels, nil
			case expr[i] == ',':
				i++
			case isIdentStart(expr[i]):
				labels = append(labels, ident())
			default:
				return nil, fmt.Errorf("unexpected %q in a label list of %q", expr[i], expr)
			}
		}
	}
	matchers := func() ([]promMatcher, error) {
		var ms []promMatcher
		i++ // '{'
		for {
			skipSpace()
			switch {
			case i >= len(expr):
				return nil, fmt.Errorf("unclosed selector in %q", expr)
			case expr[i] == '}':
				i++
				return ms, nil
			case expr[i] == ',':
				i++
				continue
			case !isIdentStart(expr[i]):
				return nil, fmt.Errorf("unexpected %q in a selector of %q", expr[i], expr)
			}
			m := promMatcher{Label: ident()}
			skipSpace()
			for _, op := range []string{"=~", "!~", "!=", "="} {
				if strings.HasPrefix(expr[i:], op) {
					m.Op = op
					i += len(op)
					break
				}
			}
			skipSpace()
			if m.Op == "" || i >= len(expr) || !strings.ContainsRune("\"'`", rune(expr[i])) {
				return nil, fmt.Errorf("matcher on %s without an operator and a string in %q", m.Label, expr)
			}
			v, err := str()
			if err != nil {
				return nil, err
			}
			m.Value = v
			ms = append(ms, m)
		}
	}
	for i < len(expr) {
		c := expr[i]
		switch {
		case strings.ContainsRune(" \t\r\n", rune(c)):
			i++
		case c == '"' || c == '\'' || c == '`':
			if _, err := str(); err != nil {
				return out, err
			}
		case c == '[': // a range or subquery: durations and Grafana's $__rate_interval
			end := strings.IndexByte(expr[i:], ']')
			if end < 0 {
				return out, fmt.Errorf("unclosed range in %q", expr)
			}
			i += end + 1
		case c == '$': // a Grafana variable outside a string
			i++
			if i < len(expr) && expr[i] == '{' {
				end := strings.IndexByte(expr[i:], '}')
				if end < 0 {
					return out, fmt.Errorf("unclosed variable in %q", expr)
				}
				i += end + 1
			} else {
				ident()
			}
		case '0' <= c && c <= '9' || c == '.':
			for i < len(expr) && (isIdentChar(expr[i]) || expr[i] == '.') {
				i++
			}
		case c == '{':
			return out, fmt.Errorf("a selector without a metric name in %q", expr)
		case isIdentStart(c):
			name := ident()
			lower := strings.ToLower(name)
			skipSpace()
			next := byte(0)
			if i < len(expr) {
				next = expr[i]
			}
			switch {
			case promGrouping[lower]:
				if next == '(' {
					labels, err := labelList()
					if err != nil {
						return out, err
					}
					out.Grouping = append(out.Grouping, labels...)
				}
			case promKeywords[lower]:
			case next == '(':
				if !promFunctions[name] {
					return out, fmt.Errorf("unknown function %s in %q", name, expr)
				}
			case promAggregations[name] && i < len(expr) && isIdentStart(next):
				// sum by (…) (…): the clause follows.
			default:
				ref := promRef{Metric: name}
				if next == '{' {
					ms, err := matchers()
					if err != nil {
						return out, err
					}
					ref.Matchers = ms
				}
				out.Refs = append(out.Refs, ref)
			}
		default:
			i++
		}
	}
	return out, nil
}

// grafanaLabelValues matches Grafana's label_values(metric, label) and
// label_values(label) variable queries.
var grafanaLabelValues = regexp.MustCompile(`^\s*label_values\(\s*(?:(.*?)\s*,\s*)?([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)

// parseGrafanaQuery lists what a Grafana Prometheus variable query uses:
// label_values(...), or else a PromQL expression (query_result).
func parseGrafanaQuery(q string) (promRefs, error) {
	m := grafanaLabelValues.FindStringSubmatch(q)
	if m == nil {
		return parsePromQL(q)
	}
	var refs promRefs
	if m[1] != "" {
		var err error
		if refs, err = parsePromQL(m[1]); err != nil {
			return refs, err
		}
	}
	refs.Grouping = append(refs.Grouping, m[2])
	return refs, nil
}

func TestParsePromQL(t *testing.T) {
	for _, tc := range []struct {
		expr     string
		refs     string // metric{label op value,…} …
		grouping string
		err      bool
	}{
		{expr: `saga_ready`, refs: `saga_ready{}`},
		{expr: `saga_ready{job=~"$job", instance=~"$instance"} == 0`, refs: `saga_ready{job=~$job,instance=~$instance}`},
		{expr: `saga_ready == 0 unless on (job, instance) saga_halted == 1`, refs: `saga_ready{} saga_halted{}`, grouping: "job instance"},
		{expr: `histogram_quantile(0.99, sum by (job, instance, le) (rate(saga_journal_fsync_seconds_bucket[5m]))) > 0.1`,
			refs: `saga_journal_fsync_seconds_bucket{}`, grouping: "job instance le"},
		{expr: `sum(rate(x_total{a="1"}[$__rate_interval])) without (b) / ignoring(c) group_left(d) y`,
			refs: `x_total{a=1} y{}`, grouping: "b c d"},
		{expr: `increase(saga_unwinds_total{verdict="partial"}[15m]) > 0`, refs: `saga_unwinds_total{verdict=partial}`},
		{expr: `saga_journal_disk_bytes > 0.9 * 268435456 and saga_x offset 5m`, refs: `saga_journal_disk_bytes{} saga_x{}`},
		{expr: `max(go_gc_duration_seconds{quantile="1", a='b\'c'}) by (instance)`, refs: `go_gc_duration_seconds{quantile=1,a=b'c}`, grouping: "instance"},
		{expr: `absent(up{job="saga-supervisor"})`, refs: `up{job=saga-supervisor}`},
		{expr: `1e3 + Inf + NaN + 0x1f`},
		{expr: `sumx(saga_ready)`, err: true}, // a misspelt function is not a metric
		{expr: `{__name__="saga_ready"}`, err: true},
		{expr: `saga_ready{job="x"`, err: true},
		{expr: `saga_ready{job}`, err: true},
	} {
		got, err := parsePromQL(tc.expr)
		if (err != nil) != tc.err {
			t.Errorf("%s: err %v, want error %v", tc.expr, err, tc.err)
			continue
		}
		if tc.err {
			continue
		}
		var refs []string
		for _, r := range got.Refs {
			var ms []string
			for _, m := range r.Matchers {
				ms = append(ms, m.Label+m.Op+m.Value)
			}
			refs = append(refs, r.Metric+"{"+strings.Join(ms, ",")+"}")
		}
		if s := strings.Join(refs, " "); s != tc.refs {
			t.Errorf("%s: refs %q, want %q", tc.expr, s, tc.refs)
		}
		if s := strings.Join(got.Grouping, " "); s != tc.grouping {
			t.Errorf("%s: grouping %q, want %q", tc.expr, s, tc.grouping)
		}
	}
	got, err := parseGrafanaQuery(`label_values(saga_ready{job=~"$job"}, instance)`)
	if err != nil || len(got.Refs) != 1 || got.Refs[0].Metric != "saga_ready" || !slices.Equal(got.Grouping, []string{"instance"}) {
		t.Errorf("label_values: %+v, %v", got, err)
	}
}
