package supervisor_test

import (
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
	"github.com/saga-supervisor/saga-supervisor/supervisor"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// agentOf drives one agent through Handle, as a transport would.
type agentOf struct {
	t     *testing.T
	s     *supervisor.Supervisor
	name  string
	lease string
	epoch uint64
	n     int
}

func (a *agentOf) send(op api.Op, mod func(*api.Request)) api.Reply {
	a.n++
	req := api.Request{ID: fmt.Sprintf("%s-%d", a.name, a.n), Agent: a.name, Op: op, Lease: a.lease, Epoch: a.epoch}
	if mod != nil {
		mod(&req)
	}
	return a.s.Handle(req, time.Now())
}

func (a *agentOf) must(op api.Op, mod func(*api.Request)) api.Reply {
	a.t.Helper()
	r := a.send(op, mod)
	if !r.OK {
		a.t.Fatalf("%s %s: %s %s", a.name, op, r.Code, r.Message)
	}
	return r
}

func (a *agentOf) hello() {
	a.t.Helper()
	r := a.must(api.OpHello, func(r *api.Request) { r.TTLMS = 60000 })
	a.lease, a.epoch = r.Lease, r.Epoch
}

func (a *agentOf) begin() uint64 {
	a.t.Helper()
	return a.must(api.OpBegin, nil).Saga
}

func (a *agentOf) step(saga uint64, act string, v float64) api.Reply {
	return a.send(api.OpStep, func(r *api.Request) { r.Saga, r.Actuator, r.Value = saga, act, v })
}

func post(t *testing.T, srv *httptest.Server, path, body string) httpReply {
	t.Helper()
	return do(t, srv, "POST", path, bearer(operatorToken), body)
}

// A drain refuses new sagas DRAINING, lets the open one step and commit,
// shows in /readyz, status and metrics, leaves halt and reset working, and
// ends at the operator's word.
func TestDrainOverHTTP(t *testing.T) {
	sup, _ := startSupervisor(t, t.TempDir())
	srv := httptest.NewServer(sup.HTTPHandler())
	defer srv.Close()
	a := &agentOf{t: t, s: sup, name: "planner"}
	a.hello()
	open := a.begin()
	if r := a.step(open, "base", 10); !r.OK {
		t.Fatal(r.Code, r.Message)
	}

	if r := do(t, srv, "POST", "/api/v1/drain", bearer("wrong-token-0123456789abcdef-xx"), `{}`); r.status != 401 || !strings.Contains(r.body, "UNAUTHORIZED") {
		t.Fatalf("drain with a wrong token: %d %s", r.status, r.body)
	}
	if r := do(t, srv, "POST", "/api/v1/drain", nil, `{}`); r.status != 401 {
		t.Fatalf("drain with no token: %d %s", r.status, r.body)
	}
	if r := post(t, srv, "/api/v1/drain", `{"grace_ms":-1}`); r.status != 400 || !strings.Contains(r.body, "grace_ms") {
		t.Fatalf("drain with a negative grace: %d %s", r.status, r.body)
	}
	if r := post(t, srv, "/api/v1/drain", `{"grace_ms":600000,"reason":"new gripper","operator":"ana"}`); r.status != 200 || !strings.Contains(r.body, `"deadline"`) {
		t.Fatalf("drain: %d %s", r.status, r.body)
	}
	if r := a.send(api.OpBegin, nil); r.Code != "DRAINING" {
		t.Fatalf("begin while draining: %+v", r)
	}
	daemontest.WaitFor(t, "readyz says draining", testtool.Slow(5*time.Second), func() bool {
		r := do(t, srv, "GET", "/readyz", nil, "")
		return r.status == 503 && strings.Contains(r.body, "draining: http") && strings.Contains(r.body, "new gripper")
	})
	// Not ready for new work, but the open saga may still move.
	if r := a.step(open, "base", 12); !r.OK {
		t.Fatalf("a step of an open saga while draining: %s %s", r.Code, r.Message)
	}
	if r := a.must(api.OpCommit, func(r *api.Request) { r.Saga = open }); !r.OK {
		t.Fatal(r.Code)
	}
	st := sup.Status()
	if st.Drain == nil || st.Drain.GraceS != 600 || st.Ready {
		t.Fatalf("status while draining: %+v", st.Drain)
	}
	if m := do(t, srv, "GET", "/metrics", nil, ""); !strings.Contains(m.body, "saga_draining 1") || !strings.Contains(m.body, "saga_drain_deadline_timestamp_seconds ") {
		t.Fatal("metrics do not show the drain")
	}
	// Halt works during a drain, and reset is not refused for the drain.
	if r := do(t, srv, "POST", "/api/v1/halt", nil, `{"reason":"test"}`); r.status != 200 {
		t.Fatalf("halt during a drain: %d %s", r.status, r.body)
	}
	daemontest.WaitFor(t, "halt latched", testtool.Slow(5*time.Second), func() bool { h, _ := sup.Engine().Halted(); return h })
	if r := post(t, srv, "/api/v1/reset", `{}`); r.status != 200 {
		t.Fatalf("reset during a drain: %d %s", r.status, r.body)
	}
	if r := post(t, srv, "/api/v1/undrain", `{"reason":"done"}`); r.status != 200 || !strings.Contains(r.body, `"drain":null`) {
		t.Fatalf("undrain: %d %s", r.status, r.body)
	}
	if r := post(t, srv, "/api/v1/undrain", `{}`); r.status != 409 || !strings.Contains(r.body, "NOT_DRAINING") {
		t.Fatalf("a second undrain: %d %s", r.status, r.body)
	}
	a.hello()
	a.begin()
}

// At the deadline, sagas still open are unwound, and their actuators go
// back to their priors.
func TestDrainDeadlineUnwinds(t *testing.T) {
	sup, _ := startSupervisor(t, t.TempDir())
	srv := httptest.NewServer(sup.HTTPHandler())
	defer srv.Close()
	a := &agentOf{t: t, s: sup, name: "planner"}
	a.hello()
	before, _ := sup.Engine().Commanded("base")
	s := a.begin()
	if r := a.step(s, "base", before+5); !r.OK {
		t.Fatal(r.Code, r.Message)
	}
	if r := post(t, srv, "/api/v1/drain", `{"grace_ms":100}`); r.status != 200 {
		t.Fatalf("drain: %d %s", r.status, r.body)
	}
	daemontest.WaitFor(t, "the drain's deadline unwinds the saga", testtool.Slow(10*time.Second), func() bool {
		return len(sup.Status().OpenSagas) == 0
	})
	if v, _ := sup.Engine().Commanded("base"); v != before {
		t.Fatalf("base commanded %g after the unwind, want its prior %g", v, before)
	}
	if r := a.step(s, "base", before+1); r.OK || r.Code != "SAGA_UNKNOWN" {
		t.Fatalf("a step of the unwound saga: %+v", r)
	}
}

// Quarantine ends the agent's lease and unwinds its saga, refuses all it
// sends but halt — without a journal record per refusal — and release lets
// it back.
func TestQuarantineOverHTTP(t *testing.T) {
	sup, _ := startSupervisor(t, t.TempDir())
	srv := httptest.NewServer(sup.HTTPHandler())
	defer srv.Close()
	rogue := &agentOf{t: t, s: sup, name: "rogue"}
	good := &agentOf{t: t, s: sup, name: "planner"}
	rogue.hello()
	good.hello()
	before, _ := sup.Engine().Commanded("elbow")
	rs := rogue.begin()
	if r := rogue.step(rs, "elbow", before+4); !r.OK {
		t.Fatal(r.Code, r.Message)
	}
	gs := good.begin()
	if r := post(t, srv, "/api/v1/quarantine", `{"reason":"erratic"}`); r.status != 400 {
		t.Fatalf("quarantine without an agent: %d %s", r.status, r.body)
	}
	if r := post(t, srv, "/api/v1/quarantine", `{"agent":"a/b"}`); r.status != 400 {
		t.Fatalf("quarantine of a bad name: %d %s", r.status, r.body)
	}
	if r := post(t, srv, "/api/v1/quarantine", `{"agent":"rogue","reason":"erratic"}`); r.status != 200 || !strings.Contains(r.body, `"agent":"rogue"`) {
		t.Fatalf("quarantine: %d %s", r.status, r.body)
	}
	if v, _ := sup.Engine().Commanded("elbow"); v != before {
		t.Fatalf("elbow at %g after the quarantine, want %g", v, before)
	}
	for _, l := range sup.Status().Leases {
		if l.Agent == "rogue" {
			t.Fatal("the quarantined agent's lease lives on")
		}
	}
	if r := post(t, srv, "/api/v1/quarantine", `{"agent":"rogue"}`); r.status != 200 || !strings.Contains(r.body, `"already":true`) {
		t.Fatalf("a second quarantine: %d %s", r.status, r.body)
	}
	// Retrying does not fill the journal: refusals are tallied.
	seq0 := sup.Status().Journal.LastSeq
	for i := 0; i < 300; i++ {
		if r := rogue.send(api.OpHello, nil); r.Code != "QUARANTINED" {
			t.Fatalf("hello of a quarantined agent: %+v", r)
		}
		if r := rogue.step(rs, "elbow", 1); r.Code != "QUARANTINED" {
			t.Fatalf("step of a quarantined agent: %+v", r)
		}
	}
	supervisor.FlushLanes(sup)
	if grew := sup.Status().Journal.LastSeq - seq0; grew > 10 {
		t.Fatalf("600 refusals of a quarantined agent wrote %d journal records", grew)
	}
	// Others go on.
	if r := good.step(gs, "base", 3); !r.OK {
		t.Fatalf("another agent's step: %s %s", r.Code, r.Message)
	}
	// Its halt still latches.
	if r := rogue.send(api.OpHalt, func(r *api.Request) { r.Reason = "rogue sees a person" }); !r.OK {
		t.Fatalf("halt of a quarantined agent: %+v", r)
	}
	if h, _ := sup.Engine().Halted(); !h {
		t.Fatal("a quarantined agent's halt did not latch")
	}
	if r := post(t, srv, "/api/v1/reset", `{}`); r.status != 200 {
		t.Fatalf("reset: %d %s", r.status, r.body)
	}
	if r := post(t, srv, "/api/v1/release", `{"agent":"planner"}`); r.status != 409 || !strings.Contains(r.body, "NOT_QUARANTINED") {
		t.Fatalf("release of an agent not quarantined: %d %s", r.status, r.body)
	}
	if r := post(t, srv, "/api/v1/release", `{"agent":"rogue"}`); r.status != 200 || !strings.Contains(r.body, `"quarantined":[]`) {
		t.Fatalf("release: %d %s", r.status, r.body)
	}
	rogue.hello()
	rogue.begin()
}

// A drain and a quarantine in force survive a restart: the new process
// rebuilds them from the journal, refuses begin DRAINING and the agent
// QUARANTINED, and stays not ready until the drain ends.
func TestDrainAndQuarantineSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Journal.Dir = filepath.Join(dir, "journal")
	cfg.Sim.World = filepath.Join(dir, "world")
	cfg.HTTP.ResetToken = operatorToken
	cfg.Agents.Allow = nil
	start := func() (*supervisor.Supervisor, func()) {
		b, err := supervisor.FromConfig(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		s, err := supervisor.New(b.Options)
		if err != nil {
			b.Close()
			t.Fatal(err)
		}
		return s, func() { s.Close(); b.Close() }
	}
	s1, stop1 := start()
	a := &agentOf{t: t, s: s1, name: "planner"}
	a.hello()
	open := a.begin()
	if r := a.step(open, "base", 7); !r.OK {
		t.Fatal(r.Code)
	}
	if _, err := s1.Drain(time.Hour, "ctl", "maintenance"); err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Quarantine("rogue", "ctl", "erratic"); err != nil {
		t.Fatal(err)
	}
	stop1()

	s2, stop2 := start()
	defer stop2()
	st := s2.Status()
	if st.Drain == nil || !st.Drain.Recovered || len(st.Quarantined) != 1 || st.Quarantined[0].Agent != "rogue" {
		t.Fatalf("after a restart: drain %+v quarantined %+v", st.Drain, st.Quarantined)
	}
	if len(st.OpenSagas) != 0 {
		t.Fatalf("sagas open after the restart: %v", st.OpenSagas)
	}
	b := &agentOf{t: t, s: s2, name: "planner"}
	b.hello()
	if r := b.send(api.OpBegin, nil); r.Code != "DRAINING" {
		t.Fatalf("begin after the restart: %+v", r)
	}
	r := (&agentOf{t: t, s: s2, name: "rogue"}).send(api.OpHello, nil)
	if r.Code != "QUARANTINED" {
		t.Fatalf("hello of the quarantined agent after the restart: %+v", r)
	}
	if err := s2.Undrain("ctl", ""); err != nil {
		t.Fatal(err)
	}
	b.begin()
}

// agents.quarantine: an agent refused after_refusals times within the
// window for its own faults is quarantined on its own; refusals the
// supervisor's state decides (HALTED) never count.
func TestAutoQuarantine(t *testing.T) {
	sup, _ := startSupervisor(t, t.TempDir(), func(c *config.Config) {
		c.Agents.Quarantine = config.AutoQuarantine{AfterRefusals: 20, Window: time.Minute}
	})
	a := &agentOf{t: t, s: sup, name: "prober"}
	a.hello()
	s := a.begin()
	// Halted refusals do not count.
	sup.Halt("test", "halt")
	for i := 0; i < 50; i++ {
		if r := a.step(s, "base", 1); r.Code != "HALTED" {
			t.Fatalf("step while halted: %+v", r)
		}
	}
	if sup.Engine().IsQuarantined("prober") {
		t.Fatal("refusals for a halt quarantined the agent")
	}
	daemontest.WaitFor(t, "the halt applied", testtool.Slow(5*time.Second), func() bool { return len(sup.Status().OpenSagas) == 0 })
	if err := sup.Reset(operatorToken, "test"); err != nil {
		t.Fatal(err)
	}
	a.hello()
	s = a.begin()
	for i := 0; i < 19; i++ {
		if r := a.step(s, "base", 1000); r.Code != "LIMIT_MAX" {
			t.Fatalf("step over the limit: %+v", r)
		}
	}
	if sup.Engine().IsQuarantined("prober") {
		t.Fatal("quarantined before the threshold")
	}
	a.step(s, "base", 1000)
	daemontest.WaitFor(t, "the automatic quarantine", testtool.Slow(5*time.Second), func() bool {
		st := sup.Status()
		return len(st.Quarantined) == 1 && strings.HasPrefix(st.Quarantined[0].Why, "automatic (agents.quarantine)")
	})
	if r := a.send(api.OpHello, nil); r.Code != "QUARANTINED" {
		t.Fatalf("hello after the automatic quarantine: %+v", r)
	}
}
