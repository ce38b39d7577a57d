package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
)

// The dashboard and the alert rules of deploy/ (docs/MONITORING.md) are
// checked against what the real binary exports: every metric and label
// they name must be on its /metrics, and the rules must pass their
// promtool unit tests.

const (
	dashboardFile = "../../deploy/grafana/saga-supervisor.json"
	rulesFile     = "../../deploy/prometheus/saga-supervisor.rules.yml"
	rulesTestFile = "../../deploy/prometheus/saga-supervisor.rules.test.yml"
)

// targetLabels are added by Prometheus when it scrapes: never on /metrics.
var targetLabels = map[string]bool{"job": true, "instance": true}

// notOnMetrics are the metrics the dashboard or the rules may name that
// /metrics does not carry, each with the reason.
var notOnMetrics = map[string]string{
	"up": "written by Prometheus for every scrape of a target",
}

// TestMonitoringRules runs promtool over the alert rules: their syntax
// (check rules) and their unit tests (test rules), where each alert fires
// for the robot in trouble and stays silent for the others.
func TestMonitoringRules(t *testing.T) {
	promtool := needTool(t, "promtool", "prometheus")
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestMonitoringRunbooks checks every alert has what an operator's pager
// needs: a severity, a summary, a description and a runbook link to a
// heading of docs/MONITORING.md that exists.
func TestMonitoringRunbooks(t *testing.T) {
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf struct {
		Groups []struct {
			Rules []struct {
				Alert       string
				Labels      map[string]string
				Annotations map[string]string
			}
		}
	}
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	doc, err := os.ReadFile("../../docs/MONITORING.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if h, ok := strings.CutPrefix(line, "### "); ok {
			anchors[strings.ToLower(h)] = true
		}
	}
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) {
				t.Errorf("%s: severity %q, want critical, warning or info", r.Alert, r.Labels["severity"])
			}
			for _, a := range []string{"summary", "description"} {
				if r.Annotations[a] == "" {
					t.Errorf("%s: no %s", r.Alert, a)
				}
			}
			rb, ok := strings.CutPrefix(r.Annotations["runbook"], "docs/MONITORING.md#")
			if !ok || !anchors[rb] || rb != strings.ToLower(r.Alert) {
				t.Errorf("%s: runbook %q, want docs/MONITORING.md#%s and a heading \"### %s\" there", r.Alert, r.Annotations["runbook"], strings.ToLower(r.Alert), r.Alert)
			}
		}
	}
	if n == 0 {
		t.Fatalf("%s: no alerts", rulesFile)
	}
}

// TestMonitoringNamesExist starts the binary as a robot with a simulated
// supply and servo and a simulated microcontroller board on a serial
// cable (a socat pty pair), runs a saga with a refusal and an unwind, and
// checks every metric name and label the dashboard and the rules use
// against its /metrics.
func TestMonitoringNamesExist(t *testing.T) {
	dir := t.TempDir()
	host, mcuOut, stop := simBoardOnCable(t, dir)
	t.Cleanup(stop)

	brokerPort := testtool.FreePort(t)
	d := &daemonProc{t: t, http: fmt.Sprintf("127.0.0.1:%d", testtool.FreePort(t))}
	d.cfgPath = filepath.Join(dir, "robot.yaml")
	cfg := fmt.Sprintf(monitoringConfig, filepath.Join(dir, "journal"), brokerPort, d.http, host)
	if err := os.WriteFile(d.cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, "check-config", d.cfgPath); code != 0 {
		t.Fatalf("test config invalid:\n%s", out)
	}
	d.start()
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		d.cmd.Wait()
		if t.Failed() {
			t.Logf("daemon output:\n%s\nsim-mcu output:\n%s", lastBytes(d.out.String(), 8<<10), lastBytes(mcuOut.String(), 4<<10))
		}
	})
	d.waitReady()

	// A saga with a refusal (LIMIT_MAX), two steps (the sim servo and the
	// board's), and an abort: a clean unwind.
	a := daemontest.NewAgent(t, fmt.Sprintf("tcp://127.0.0.1:%d", brokerPort), mqtt.Topics{Device: "mon"}, "planner")
	a.Hello(time.Minute)
	saga := a.Must(map[string]any{"op": "begin"}).Saga
	if r := a.Send(map[string]any{"op": "step", "saga": saga, "actuator": "base", "value": 1000}); r.OK || r.Code != "LIMIT_MAX" {
		t.Fatalf("a step past max: %+v, want LIMIT_MAX", r)
	}
	a.Must(map[string]any{"op": "step", "saga": saga, "actuator": "base", "value": 30})
	a.Must(map[string]any{"op": "step", "saga": saga, "actuator": "elbow", "value": 60})
	a.Must(map[string]any{"op": "abort", "saga": saga})

	// The scrape-time series (supplies, boards) come with the first valid
	// readings; the unwind is counted once its report is out.
	var fams map[string]*dto.MetricFamily
	daemontest.WaitFor(t, "supplies, the board and the unwind on /metrics", 10*time.Second, func() bool {
		fams = scrape(t, d)
		return len(series(fams, "saga_supply_volts")) == 2 && len(series(fams, "saga_serial_link_up")) == 1 &&
			value(fams, "saga_unwinds_total", "verdict", "clean") == 1
	})
	// The workload shows where it should (the families the rules' and
	// panels' label values name are populated).
	for _, c := range []struct {
		metric, label, value string
		want                 float64
	}{
		{"saga_refusals_total", "code", "LIMIT_MAX", 1},
		{"saga_commands_total", "result", "refused", 1},
		{"saga_unwind_steps_total", "bucket", "compensated", 2},
		{"saga_serial_link_up", "mcu", "board", 1},
		{"saga_actuator_commanded", "actuator", "elbow", 45}, // back where the saga found it
	} {
		if got := value(fams, c.metric, c.label, c.value); got != c.want {
			t.Errorf("%s{%s=%q} = %v, want %v", c.metric, c.label, c.value, got, c.want)
		}
	}

	allowed := map[string]string{} // none: every name must be on /metrics
	var problems []string
	used := map[string]bool{}
	for file, exprs := range map[string][]monitoringExpr{dashboardFile: dashboardExprs(t), rulesFile: ruleExprs(t)} {
		for _, e := range exprs {
			problems = append(problems, checkExpr(file, e, fams, allowed, used)...)
		}
		t.Logf("%s: %d expressions checked", file, len(exprs))
	}
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
	var unused []string
	for name := range fams {
		if strings.HasPrefix(name, "saga_") && !used[name] {
			unused = append(unused, name)
		}
	}
	sort.Strings(unused)
	if len(unused) > 0 {
		t.Logf("saga_ metrics neither the dashboard nor the rules show (add a panel if an operator needs them): %s", strings.Join(unused, ", "))
	}
}

// monitoringConfig is a small robot: a simulated battery and servo, and a
// board on a serial cable with its own supply and servo. Placeholders:
// journal dir, broker port, HTTP address, the host end of the cable.
const monitoringConfig = `device: mon
journal:
  dir: %s
  durability: every-step
mqtt:
  broker: embedded
  listen: 127.0.0.1:%d
  auth: {anonymous: true}
http:
  listen: %s
  reset_token_file: ""
sim:
  world: ""
mcus:
  board:
    port: %s
    link_timeout: 500ms
    ack_timeout: 50ms
    retries: 3
supplies:
  battery:
    driver: sim
    sim: {volts: 7.4}
    min_volts: 6.4
    max_volts: 8.6
  rail:
    driver: mcu
    mcu: {board: board, supply: 0}
    min_volts: 10
    max_volts: 14
actuators:
  base:
    kind: servo
    driver: sim
    min: -90
    max: 90
    initial: 0
    safe: hold
    supply: battery
    timeout: 200ms
  elbow:
    kind: servo
    driver: mcu
    mcu: {board: board, channel: 0}
    min: 0
    max: 135
    initial: 45
    safe: {value: 45}
    supply: rail
    timeout: 500ms
`

// simBoardOnCable serves a simulated board (sim-mcu: one servo channel,
// safe at 45, one 12 V supply) on one end of a socat pty pair in dir, as
// hil-tests' sim rig does, and returns the host's end, the board's output
// and a stop that kills both.
func simBoardOnCable(t *testing.T, dir string) (host string, out *syncBuffer, stop func()) {
	t.Helper()
	socat := needTool(t, "socat", "socat")
	host, board := filepath.Join(dir, "ttyHost"), filepath.Join(dir, "ttyMCU")
	cable := exec.Command(socat, "pty,raw,echo=0,link="+host, "pty,raw,echo=0,link="+board)
	if err := cable.Start(); err != nil {
		t.Fatal(err)
	}
	daemontest.WaitFor(t, "socat's ptys", 10*time.Second, func() bool {
		_, e1 := os.Stat(host)
		_, e2 := os.Stat(board)
		return e1 == nil && e2 == nil
	})
	out = &syncBuffer{}
	mcu := exec.Command(binary, "sim-mcu", "--port", board, "--channels", "45", "--supplies", "12", "--control", "127.0.0.1:0")
	mcu.Stdout, mcu.Stderr = out, out
	if err := mcu.Start(); err != nil {
		cable.Process.Kill()
		cable.Wait()
		t.Fatal(err)
	}
	return host, out, func() {
		mcu.Process.Kill()
		mcu.Wait()
		cable.Process.Kill()
		cable.Wait()
	}
}

// scrape reads the daemon's /metrics.
func scrape(t *testing.T, d *daemonProc) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := d.get("/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// series is a family's metrics (none if it is not there).
func series(fams map[string]*dto.MetricFamily, name string) []*dto.Metric {
	if f := fams[name]; f != nil {
		return f.GetMetric()
	}
	return nil
}

// value is the sum of the gauges or counters of the series with label=v,
// or -1 when there is none.
func value(fams map[string]*dto.MetricFamily, name, label, v string) float64 {
	sum, found := 0.0, false
	for _, m := range series(fams, name) {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && l.GetValue() == v {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				found = true
			}
		}
	}
	if !found {
		return -1
	}
	return sum
}

// monitoringExpr is one expression of a file and where it is.
type monitoringExpr struct {
	where, expr string
	grafanaVar  bool // a Grafana variable query: label_values(...) allowed
}

// dashboardExprs are the dashboard's expressions (panels, annotations) and
// variable queries, after a check of the model's shape.
func dashboardExprs(t *testing.T) []monitoringExpr {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if v, _ := dash["schemaVersion"].(float64); v < 36 {
		t.Errorf("%s: schemaVersion %v, want 36 or later (Grafana 9+)", dashboardFile, dash["schemaVersion"])
	}
	var out []monitoringExpr
	var hasDS bool
	vars, _ := dash["templating"].(map[string]any)["list"].([]any)
	for _, v := range vars {
		v := v.(map[string]any)
		if v["type"] == "datasource" && v["name"] == "datasource" && v["query"] == "prometheus" {
			hasDS = true
		}
		if v["type"] != "query" {
			continue
		}
		q := v["query"]
		if m, ok := q.(map[string]any); ok {
			q = m["query"]
		}
		out = append(out, monitoringExpr{where: fmt.Sprintf("variable %v", v["name"]), expr: fmt.Sprint(q), grafanaVar: true})
	}
	if !hasDS {
		t.Errorf("%s: no ${datasource} variable of type prometheus", dashboardFile)
	}
	ids := map[float64]bool{}
	var walk func(path string, n any)
	walk = func(path string, n any) {
		switch n := n.(type) {
		case map[string]any:
			if ds, ok := n["datasource"].(map[string]any); ok && ds["type"] == "prometheus" && ds["uid"] != "${datasource}" {
				t.Errorf("%s: %s: datasource %v, want uid ${datasource}", dashboardFile, path, ds["uid"])
			}
			if e, ok := n["expr"].(string); ok {
				out = append(out, monitoringExpr{where: path, expr: e})
			}
			for k, v := range n {
				walk(path+"."+k, v)
			}
		case []any:
			for i, v := range n {
				p := fmt.Sprintf("%s[%d]", path, i)
				if m, ok := v.(map[string]any); ok && m["title"] != nil {
					p = fmt.Sprintf("%s %q", p, m["title"])
				}
				walk(p, v)
			}
		}
	}
	for i, p := range dash["panels"].([]any) {
		p := p.(map[string]any)
		id, _ := p["id"].(float64)
		if ids[id] {
			t.Errorf("%s: panel %q: id %v used twice", dashboardFile, p["title"], id)
		}
		ids[id] = true
		g, _ := p["gridPos"].(map[string]any)
		if x, w := g["x"].(float64), g["w"].(float64); w <= 0 || x+w > 24 {
			t.Errorf("%s: panel %q: gridPos %v outside the 24 columns", dashboardFile, p["title"], g)
		}
		if p["type"] != "row" && p["datasource"] == nil {
			t.Errorf("%s: panel %q has no datasource", dashboardFile, p["title"])
		}
		walk(fmt.Sprintf("panels[%d] %q", i, p["title"]), p)
	}
	walk("annotations", dash["annotations"])
	return out
}

// ruleExprs are the rule file's expressions.
func ruleExprs(t *testing.T) []monitoringExpr {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf struct {
		Groups []struct {
			Rules []struct {
				Alert, Record, Expr string
			}
		}
	}
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var out []monitoringExpr
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			out = append(out, monitoringExpr{where: "rule " + r.Alert + r.Record, expr: r.Expr})
		}
	}
	return out
}

// checkExpr returns what is wrong with one expression: metrics /metrics
// does not export, labels their families do not carry, label values no
// series has (for = matchers), grouping labels none of its metrics has.
// It marks the families it uses in used.
func checkExpr(file string, e monitoringExpr, fams map[string]*dto.MetricFamily, allowed map[string]string, used map[string]bool) []string {
	var refs promRefs
	var err error
	if e.grafanaVar {
		refs, err = parseGrafanaQuery(e.expr)
	} else {
		refs, err = parsePromQL(e.expr)
	}
	at := fmt.Sprintf("%s: %s", file, e.where)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", at, err)}
	}
	if len(refs.Refs) == 0 {
		return []string{fmt.Sprintf("%s: %q names no metric", at, e.expr)}
	}
	var problems []string
	seen := map[string]bool{} // label names any metric of the expression has
	for l := range targetLabels {
		seen[l] = true
	}
	for _, r := range refs.Refs {
		if _, ok := notOnMetrics[r.Metric]; ok {
			continue
		}
		if _, ok := allowed[r.Metric]; ok {
			continue
		}
		fam, extra := family(fams, r.Metric)
		if fam == nil {
			problems = append(problems, fmt.Sprintf("%s: metric %s is not on /metrics", at, r.Metric))
			continue
		}
		used[fam.GetName()] = true
		labels := map[string]map[string]bool{}
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] == nil {
					labels[l.GetName()] = map[string]bool{}
				}
				labels[l.GetName()][l.GetValue()] = true
			}
		}
		for _, l := range extra {
			labels[l] = map[string]bool{}
		}
		for l := range labels {
			seen[l] = true
		}
		for _, m := range r.Matchers {
			vals, ok := labels[m.Label]
			switch {
			case targetLabels[m.Label]:
			case !ok:
				problems = append(problems, fmt.Sprintf("%s: %s has no label %s", at, r.Metric, m.Label))
			case m.Op == "=" && !strings.Contains(m.Value, "$") && len(vals) > 0 && !vals[m.Value]:
				have := slices.Sorted(maps.Keys(vals))
				problems = append(problems, fmt.Sprintf("%s: no %s series has %s=%q (it has %s)", at, r.Metric, m.Label, m.Value, strings.Join(have, ", ")))
			}
		}
	}
	for _, l := range refs.Grouping {
		if !seen[l] {
			problems = append(problems, fmt.Sprintf("%s: grouping label %s is on none of its metrics", at, l))
		}
	}
	return problems
}

// family finds the family a name in an expression belongs to: itself, or
// the histogram or summary of a _bucket, _sum or _count series, with the
// labels that series adds (le, quantile).
func family(fams map[string]*dto.MetricFamily, name string) (*dto.MetricFamily, []string) {
	if f := fams[name]; f != nil {
		if f.GetType() == dto.MetricType_SUMMARY {
			return f, []string{"quantile"}
		}
		return f, nil
	}
	for _, s := range []struct {
		suffix string
		types  []dto.MetricType
		extra  []string
	}{
		{"_bucket", []dto.MetricType{dto.MetricType_HISTOGRAM}, []string{"le"}},
		{"_sum", []dto.MetricType{dto.MetricType_HISTOGRAM, dto.MetricType_SUMMARY}, nil},
		{"_count", []dto.MetricType{dto.MetricType_HISTOGRAM, dto.MetricType_SUMMARY}, nil},
	} {
		base, ok := strings.CutSuffix(name, s.suffix)
		if f := fams[base]; ok && f != nil && slices.Contains(s.types, f.GetType()) {
			return f, s.extra
		}
	}
	return nil, nil
}
