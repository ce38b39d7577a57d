package supervisor

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// Per-agent permissions: what agents.allow does not give is refused
// FORBIDDEN, moves nothing, and is journaled in aggregate; halt is never
// forbidden; reset over MQTT is off unless allow_reset.
func TestPermissions(t *testing.T) {
	s, b := newTestSupervisorWith(t, func(c *config.Config) {
		c.Agents.Allow = map[string]config.Permission{
			"planner": {},
			"wrist":   {Actuators: []string{"gripper"}},
			"watcher": {Ops: []string{"status"}, Actuators: []string{}},
			"mute":    {Ops: []string{}},
			"op":      {Ops: []string{"reset", "status"}},
		}
	})
	now := time.Now()
	call := func(payload string) api.Reply {
		t.Helper()
		req, derr := api.DecodeRequest([]byte(payload), 8192)
		if derr != nil {
			t.Fatalf("%s: %v", payload, derr)
		}
		got := make(chan api.Reply, 1)
		s.Submit(req.Agent, req, nil, now, func(r api.Reply) { got <- r })
		return <-got
	}
	hello := func(agent string) (string, uint64) {
		t.Helper()
		r := call(fmt.Sprintf(`{"id":"h-%s","agent":%q,"op":"hello","ttl_ms":60000}`, agent, agent))
		if !r.OK {
			t.Fatalf("hello %s: %s %s", agent, r.Code, r.Message)
		}
		return r.Lease, r.Epoch
	}
	before := b.World.Snapshot()

	// An agent not listed: nothing but halt.
	if r := call(`{"id":"1","agent":"stranger","op":"hello","ttl_ms":60000}`); r.Code != api.CodeForbidden {
		t.Errorf("stranger hello: %+v", r)
	}
	if r := call(`{"id":"2","agent":"stranger","op":"status"}`); r.Code != api.CodeForbidden {
		t.Errorf("stranger status: %+v", r)
	}
	// A listed agent outside its actuators.
	l, e := hello("wrist")
	saga := call(fmt.Sprintf(`{"id":"b","agent":"wrist","op":"begin","lease":%q,"epoch":%d}`, l, e)).Saga
	step := func(id, act string, v float64) api.Reply {
		return call(fmt.Sprintf(`{"id":%q,"agent":"wrist","op":"step","lease":%q,"epoch":%d,"saga":%d,"actuator":%q,"value":%g}`, id, l, e, saga, act, v))
	}
	if r := step("s1", "elbow", 50); r.Code != api.CodeForbidden {
		t.Errorf("wrist moving elbow: %+v", r)
	}
	if r := step("s2", "gripper", 30); !r.OK {
		t.Errorf("wrist moving gripper: %+v", r)
	}
	// An agent limited to status: no lease, no step; status works.
	if r := call(`{"id":"3","agent":"watcher","op":"hello","ttl_ms":60000}`); r.Code != api.CodeForbidden {
		t.Errorf("watcher hello: %+v", r)
	}
	if r := call(`{"id":"4","agent":"watcher","op":"status"}`); !r.OK {
		t.Errorf("watcher status: %+v", r)
	}
	// Reset over MQTT is off by default even for an agent given reset.
	if r := call(`{"id":"5","agent":"op","op":"reset","token":"operator-token-0123456789abcdef-test"}`); r.Code != api.CodeForbidden {
		t.Errorf("reset over MQTT with allow_reset off: %+v", r)
	}
	// planner (no ops listed) may not reset: reset is never a default.
	if r := call(`{"id":"6","agent":"planner","op":"reset","token":"operator-token-0123456789abcdef-test"}`); r.Code != api.CodeForbidden {
		t.Errorf("planner reset: %+v", r)
	}
	after := b.World.Snapshot()
	for name, st := range after {
		if name != "gripper" && st.Commanded != before[name].Commanded {
			t.Errorf("%s moved from %v to %v", name, before[name].Commanded, st.Commanded)
		}
	}
	// Halt from an agent with no ops at all still halts.
	if r := call(`{"id":"7","agent":"mute","op":"halt","reason":"stop"}`); !r.OK {
		t.Errorf("mute halt: %+v", r)
	}
	if h, _ := s.engine.Halted(); !h {
		t.Error("a halt from an agent with no ops did not latch")
	}
	// Journaled in aggregate: one REFUSED record per agent, op and code.
	s.engine.WaitHalts() // the halt goroutine is done writing
	FlushLanes(s)
	recs := refusedRecords(t, s)
	n := 0
	for _, r := range recs {
		if r.Code == api.CodeForbidden {
			n++
		}
	}
	if n == 0 || n > 6 {
		t.Errorf("%d FORBIDDEN records (want one per agent, op and code, 1..6): %+v", n, recs)
	}
}

// refusedRecords reads the journal's REFUSED records so far.
func refusedRecords(t *testing.T, s *Supervisor) []rollback.Record {
	t.Helper()
	if err := s.journal.Sync(); err != nil {
		t.Fatal(err)
	}
	var out []rollback.Record
	err := wal.Scan(s.journal.Dir(), wal.Options{}, 1, func(wr wal.Record) error {
		rec, err := rollback.DecodeRecord(wr.Type, wr.Payload)
		if err == nil && rec.Type == rollback.RecRefused {
			out = append(out, rec)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// With mqtt.allow_reset, an agent given reset may reset over MQTT with
// the operator token; a wrong token is still UNAUTHORIZED.
func TestRemoteReset(t *testing.T) {
	s, _ := newTestSupervisorWith(t, func(c *config.Config) {
		c.MQTT.AllowReset = true
		c.Agents.Allow = map[string]config.Permission{"op": {Ops: []string{"reset"}}}
	})
	s.Halt("test", "stop")
	s.engine.WaitHalts()
	call := func(token string) api.Reply {
		got := make(chan api.Reply, 1)
		s.Submit("op", api.Request{ID: token, Agent: "op", Op: api.OpReset, Token: token}, nil, time.Now(), func(r api.Reply) { got <- r })
		return <-got
	}
	if r := call("guess"); r.Code != api.CodeUnauthorized {
		t.Errorf("wrong token: %+v", r)
	}
	if r := call("operator-token-0123456789abcdef-test"); !r.OK {
		t.Errorf("right token: %+v", r)
	}
}

// Over MQTT too, a supervisor with no operator token configured refuses
// reset as NO_OPERATOR_TOKEN, not as a wrong token.
func TestRemoteResetNoOperatorToken(t *testing.T) {
	s, _ := newTestSupervisorWith(t, func(c *config.Config) {
		c.MQTT.AllowReset = true
		c.HTTP.ResetToken = ""
		c.Agents.Allow = map[string]config.Permission{"op": {Ops: []string{"reset"}}}
	})
	s.Halt("test", "stop")
	s.engine.WaitHalts()
	got := make(chan api.Reply, 1)
	s.Submit("op", api.Request{ID: "r", Agent: "op", Op: api.OpReset, Token: "anything-at-all"}, nil, time.Now(), func(r api.Reply) { got <- r })
	if r := <-got; r.OK || r.Code != api.CodeNoOperatorToken || !strings.Contains(r.Message, "http.reset_token_file") {
		t.Fatalf("reset with no token configured: %+v", r)
	}
	if !s.Status().Halted {
		t.Fatal("the halt was cleared")
	}
}

// Status is public: neither the status op nor the HTTP status carries a
// lease id or epoch (an agent read another's that way, and could then act
// in its name on a broker that did not bind names).
func TestStatusCarriesNoLeaseIDs(t *testing.T) {
	s, _ := newTestSupervisor(t)
	got := make(chan api.Reply, 1)
	s.Submit("victim", api.Request{ID: "h", Agent: "victim", Op: api.OpHello, TTLMS: 60000}, nil, time.Now(), func(r api.Reply) { got <- r })
	h := <-got
	if !h.OK {
		t.Fatalf("hello: %+v", h)
	}
	s.Submit("spy", api.Request{ID: "s", Agent: "spy", Op: api.OpStatus}, nil, time.Now(), func(r api.Reply) { got <- r })
	st := <-got
	body := string(st.Status)
	if !st.OK || !strings.Contains(body, `"agent":"victim"`) {
		t.Fatalf("status: %+v %s", st, body)
	}
	for _, secret := range []string{h.Lease, `"epoch"`, `"lease"`} {
		if strings.Contains(body, secret) {
			t.Errorf("status carries %s: %s", secret, body)
		}
	}
	rec := httptest.NewRecorder()
	s.HTTPHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/status", nil))
	if strings.Contains(rec.Body.String(), h.Lease) {
		t.Errorf("HTTP status carries the lease id: %s", rec.Body)
	}
}
