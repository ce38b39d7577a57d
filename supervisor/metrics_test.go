package supervisor_test

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/saga-supervisor/saga-supervisor/internal/promtext"
	"github.com/saga-supervisor/saga-supervisor/internal/promtext/promtexttest"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/internal/buildinfo"
	"github.com/saga-supervisor/saga-supervisor/supervisor"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// scrape fetches /metrics through the HTTP handler and returns every
// sample line's value by series name with labels, e.g.
// `saga_commands_total{op="step",result="ok"}`.
func scrape(t *testing.T, srv *httptest.Server) map[string]float64 {
	t.Helper()
	r := do(t, srv, "GET", "/metrics", nil, "")
	if r.status != 200 {
		t.Fatalf("/metrics: %d %s", r.status, r.body)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(r.body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample line %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

// sender drives Handle as the MQTT transport would, one agent at a time.
type sender struct {
	t     *testing.T
	sup   *supervisor.Supervisor
	agent string
	n     int
	lease string
	epoch uint64
}

func (s *sender) send(req api.Request) api.Reply {
	s.n++
	req.ID, req.Agent = fmt.Sprintf("%s-%d", s.agent, s.n), s.agent
	if req.Op != api.OpHello && req.Op != api.OpHalt && req.Op != api.OpReset && req.Op != api.OpStatus {
		req.Lease, req.Epoch = s.lease, s.epoch
	}
	return s.sup.Handle(req, time.Now())
}

func (s *sender) must(req api.Request) api.Reply {
	s.t.Helper()
	r := s.send(req)
	if !r.OK {
		s.t.Fatalf("%+v refused: %s %s", req, r.Code, r.Message)
	}
	return r
}

func (s *sender) hello() {
	r := s.must(api.Request{Op: api.OpHello, TTLMS: 60000})
	s.lease, s.epoch = r.Lease, r.Epoch
}

// After a few commands through the engine, the metrics count them by op,
// result and code, the journal's batches are measured, unwinds and lease
// ends are counted, the state gauges follow the supervisor, and the
// registry passes the linter.
func TestMetricsFollowCommands(t *testing.T) {
	sup, _ := startSupervisor(t, t.TempDir())
	srv := httptest.NewServer(sup.HTTPHandler())
	defer srv.Close()

	a := &sender{t: t, sup: sup, agent: "planner"}
	a.hello()
	saga := a.must(api.Request{Op: api.OpBegin}).Saga
	a.must(api.Request{Op: api.OpStep, Saga: saga, Actuator: "base", Value: 45})
	if r := a.send(api.Request{Op: api.OpStep, Saga: saga, Actuator: "elbow", Value: 170}); r.Code != "LIMIT_MAX" {
		t.Fatalf("over-limit step: %+v", r)
	}
	a.must(api.Request{Op: api.OpStep, Saga: saga, Actuator: "elbow", Value: 90})
	a.must(api.Request{Op: api.OpCommit, Saga: saga})
	saga = a.must(api.Request{Op: api.OpBegin}).Saga
	a.must(api.Request{Op: api.OpStep, Saga: saga, Actuator: "shoulder", Value: 60})

	m := scrape(t, srv)
	want := map[string]float64{
		`saga_commands_total{op="hello",result="ok"}`:        1,
		`saga_commands_total{op="begin",result="ok"}`:        2,
		`saga_commands_total{op="step",result="ok"}`:         3,
		`saga_commands_total{op="step",result="refused"}`:    1,
		`saga_commands_total{op="step",result="failed"}`:     0,
		`saga_refusals_total{code="LIMIT_MAX"}`:              1,
		`saga_refusals_total{code="HALTED"}`:                 0,
		`saga_open_sagas`:                                    1,
		`saga_leases`:                                        1,
		`saga_ready`:                                         1,
		`saga_halted`:                                        0,
		`saga_actuator_commanded{actuator="base"}`:           45,
		`saga_actuator_commanded{actuator="elbow"}`:          90,
		`saga_actuator_commanded{actuator="shoulder"}`:       60,
		`saga_supply_volts{supply="battery"}`:                7.4,
		`saga_supply_tripped{supply="battery"}`:              0,
		`saga_journal_tail_cut_bytes`:                        0,
		`saga_unwinds_total{verdict="clean"}`:                0,
		`saga_lease_ends_total{reason="bye"}`:                0,
		`saga_unwind_steps_total{bucket="compensated"}`:      0,
		`saga_commands_total{op="invalid",result="refused"}`: 0,
	}
	expect(t, m, want)
	if m["saga_journal_fsync_seconds_count"] < 1 || m["saga_journal_batch_records_sum"] < m["saga_journal_batch_records_count"] ||
		m["saga_journal_written_bytes_total"] <= 0 {
		t.Fatalf("journal not measured: fsync count %v, records %v in %v batches, %v bytes", m["saga_journal_fsync_seconds_count"],
			m["saga_journal_batch_records_sum"], m["saga_journal_batch_records_count"], m["saga_journal_written_bytes_total"])
	}
	if _, ok := m["go_goroutines"]; !ok {
		t.Error("no Go runtime metrics")
	}
	if _, ok := m["process_open_fds"]; !ok {
		t.Error("no process metrics")
	}

	// The agent leaves: its open saga is unwound (one step, clean). A
	// request the decoder refused is counted too, with op "invalid".
	a.must(api.Request{Op: api.OpBye})
	sup.Submit("fuzzer", api.Request{Agent: "fuzzer"}, &api.Error{Code: api.CodeBadRequest, Message: "not JSON"}, time.Now(), func(api.Reply) {})
	supervisor.FlushLanes(sup) // counted in aggregate
	// A second hello from another agent supersedes nothing; a second one
	// from the same agent supersedes its first lease.
	b := &sender{t: t, sup: sup, agent: "ops"}
	b.hello()
	b.hello()
	b.must(api.Request{Op: api.OpHalt, Reason: "test"})
	m = scrape(t, srv)
	expect(t, m, map[string]float64{
		`saga_unwinds_total{verdict="clean"}`:                1,
		`saga_unwinds_total{verdict="partial"}`:              0,
		`saga_unwind_steps_total{bucket="compensated"}`:      1,
		`saga_lease_ends_total{reason="bye"}`:                1,
		`saga_lease_ends_total{reason="superseded"}`:         1,
		`saga_commands_total{op="invalid",result="refused"}`: 1,
		`saga_refusals_total{code="BAD_REQUEST"}`:            1,
		`saga_commands_total{op="halt",result="ok"}`:         1,
		`saga_halted`:     1,
		`saga_ready`:      0,
		`saga_open_sagas`: 0,
		`saga_actuator_commanded{actuator="shoulder"}`: 10,
	})

	problems, err := testutil.GatherAndLint(promtexttest.Gatherer(sup.Registry()))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// /metrics names the running build: one saga_supervisor_build_info series,
// value 1, whose labels are what `saga-supervisor version` reports.
func TestMetricsBuildInfo(t *testing.T) {
	sup, _ := startSupervisor(t, t.TempDir())
	srv := httptest.NewServer(sup.HTTPHandler())
	defer srv.Close()

	in := buildinfo.Get()
	want := fmt.Sprintf(`saga_supervisor_build_info{date=%q,goarch=%q,goversion=%q,revision=%q,version=%q}`,
		in.Date, runtime.GOARCH, in.GoVersion, in.Commit, in.Version)
	var found []string
	for series, v := range scrape(t, srv) {
		if strings.HasPrefix(series, "saga_supervisor_build_info") {
			found = append(found, fmt.Sprintf("%s %v", series, v))
		}
	}
	if len(found) != 1 || found[0] != want+" 1" {
		t.Fatalf("build info series %q, want exactly %q", found, want+" 1")
	}
}

func expect(t *testing.T, got, want map[string]float64) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("no series %s", k)
		} else if g != w {
			t.Errorf("%s = %v, want %v", k, g, w)
		}
	}
}

// A registry passed in receives the metrics (one already holding the Go
// collector is fine); a second supervisor on the same registry is refused
// before it touches its journal, and leaves the first one's metrics alone.
func TestMetricsOnRegistryPassedIn(t *testing.T) {
	reg := promtext.NewRegistry()
	reg.MustRegister(promtext.NewGoCollector())
	dir := t.TempDir()
	build := func(sub string) *supervisor.Built {
		cfg := config.Default()
		cfg.Journal.Dir = filepath.Join(dir, sub, "journal")
		cfg.Sim.World = filepath.Join(dir, sub, "world")
		b, err := supervisor.FromConfig(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		b.Options.Registry = reg
		return b
	}
	b1 := build("one")
	sup, err := supervisor.New(b1.Options)
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close()
	if sup.Registry() != reg {
		t.Fatal("Registry is not the one passed in")
	}
	if _, err := supervisor.New(build("two").Options); err == nil {
		t.Fatal("two supervisors registered on one registry")
	}
	if _, err := os.Stat(filepath.Join(dir, "two", "journal")); !os.IsNotExist(err) {
		t.Fatalf("the refused supervisor touched its journal: %v", err)
	}
	if n, err := testutil.GatherAndCount(promtexttest.Gatherer(reg), "saga_commands_total", "saga_ready"); err != nil || n == 0 {
		t.Fatalf("first supervisor's metrics after the refused second: %d (%v)", n, err)
	}
}

// A torn tail cut at start is reported by saga_journal_tail_cut_bytes.
func TestMetricsTailCut(t *testing.T) {
	dir := t.TempDir()
	sup, b := startSupervisor(t, dir)
	sup.Close()
	b.Close()
	seg := filepath.Join(dir, "journal", "0000000000000001.wal")
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	end := len(bytes.TrimRight(data, "\x00"))
	f, err := os.OpenFile(seg, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Bytes of a batch that never finished, past the last record.
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xab}, 40), int64(end+64)); err != nil {
		t.Fatal(err)
	}
	f.Close()

	sup, _ = startSupervisor(t, dir)
	srv := httptest.NewServer(sup.HTTPHandler())
	defer srv.Close()
	if got := scrape(t, srv)["saga_journal_tail_cut_bytes"]; got <= 0 {
		t.Fatalf("saga_journal_tail_cut_bytes = %v after a torn tail (status: %q)", got, sup.Status().Journal.TailCut)
	}
}
