package supervisor

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// newTestSupervisor builds a supervisor on the embedded default, with
// permissions off (agents.allow empty): these tests are about everything
// but permissions, and use agents of every name.
func newTestSupervisor(t *testing.T) (*Supervisor, *Built) {
	t.Helper()
	return newTestSupervisorWith(t, func(c *config.Config) { c.Agents.Allow = nil })
}

// newTestSupervisorWith builds a supervisor on the embedded default as
// changed by edit.
func newTestSupervisorWith(t *testing.T, edit func(*config.Config), opts ...func(*Options)) (*Supervisor, *Built) {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Journal.Dir = filepath.Join(dir, "journal")
	cfg.Sim.World = filepath.Join(dir, "world")
	cfg.HTTP.ResetToken = "operator-token-0123456789abcdef-test"
	edit(cfg)
	b, err := FromConfig(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range opts {
		o(&b.Options)
	}
	s, err := New(b.Options)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); b.Close() })
	return s, b
}

// TestBadInputIsRefusedJournaledAndMovesNothing sends malformed, hostile and
// untimely requests through the same path the MQTT transport uses (decoder,
// then handler) and checks that each gets its stable code, is journaled as
// REFUSED, and leaves the world exactly as it was.
func TestBadInputIsRefusedJournaledAndMovesNothing(t *testing.T) {
	s, b := newTestSupervisor(t)
	now := time.Now()
	// Through the lanes, as a transport submits: decoded or refused by the
	// decoder, answered in order on the agent's lane.
	call := func(payload string) api.Reply {
		req, derr := api.DecodeRequest([]byte(payload), 8192)
		got := make(chan api.Reply, 1)
		s.Submit(req.Agent, req, derr, now, func(r api.Reply) { got <- r })
		return <-got
	}
	must := func(payload string) api.Reply {
		r := call(payload)
		if !r.OK {
			t.Fatalf("%s: %s %s", payload, r.Code, r.Message)
		}
		return r
	}
	// A live agent with an open saga holding the gripper, and another agent.
	h := must(`{"id":"h1","agent":"planner","op":"hello","ttl_ms":60000}`)
	lease := fmt.Sprintf(`"lease":%q,"epoch":%d`, h.Lease, h.Epoch)
	saga := must(`{"id":"b1","agent":"planner","op":"begin",` + lease + `}`).Saga
	must(fmt.Sprintf(`{"id":"s1","agent":"planner","op":"step",%s,"saga":%d,"actuator":"gripper","value":10}`, lease, saga))
	o := must(`{"id":"h2","agent":"other","op":"hello","ttl_ms":60000}`)
	olease := fmt.Sprintf(`"lease":%q,"epoch":%d`, o.Lease, o.Epoch)
	osaga := must(`{"id":"b2","agent":"other","op":"begin",` + olease + `}`).Saga
	step := func(id, fields string) string {
		return fmt.Sprintf(`{"id":%q,"agent":"planner","op":"step",%s,"saga":%d,%s}`, id, lease, saga, fields)
	}
	commanded := func() map[string]float64 { // positions may still be slewing; commands may not change
		m := map[string]float64{}
		for n, st := range b.World.Snapshot() {
			m[n] = st.Commanded
		}
		return m
	}
	before := commanded()

	huge := `{"id":"big","agent":"planner","op":"status","reason":"` + strings.Repeat("x", 1<<20) + `"}`
	tests := []struct {
		name, payload, code string
	}{
		{"not JSON", `hello`, "BAD_REQUEST"},
		{"JSON array", `[1,2]`, "BAD_REQUEST"},
		{"empty", ``, "BAD_REQUEST"},
		{"trailing garbage", step("t1", `"actuator":"base","value":1}x`), "BAD_REQUEST"},
		{"wrong type value", step("t2", `"actuator":"base","value":"5"`), "BAD_REQUEST"},
		{"missing actuator", step("t3", `"value":5`), "BAD_REQUEST"},
		{"unknown op", `{"id":"t4","agent":"planner","op":"jump"}`, "BAD_REQUEST"},
		{"unknown field", step("t5", `"actuator":"base","value":5,"force":true`), "BAD_REQUEST"},
		{"1 MiB payload", huge, "PAYLOAD_TOO_LARGE"},
		{"invalid UTF-8", "{\"id\":\"t6\",\"agent\":\"pl\xffanner\",\"op\":\"status\"}", "BAD_REQUEST"},
		{"NaN literal", step("t7", `"actuator":"base","value":NaN`), "BAD_REQUEST"},
		{"Infinity literal", step("t8", `"actuator":"base","value":Infinity`), "BAD_REQUEST"},
		{"1e400", step("t9", `"actuator":"base","value":1e400`), "NOT_FINITE"},
		{"-1e400", step("t10", `"actuator":"base","value":-1e400`), "NOT_FINITE"},
		{"1e308", step("t11", `"actuator":"base","value":1e308`), "LIMIT_MAX"},
		{"duplicate key", step("t12", `"actuator":"base","value":1,"value":80`), "BAD_REQUEST"},
		{"unknown actuator", step("t13", `"actuator":"tail","value":1`), "ACTUATOR_UNKNOWN"},
		{"over max", step("t14", `"actuator":"elbow","value":170`), "LIMIT_MAX"},
		{"under min", step("t15", `"actuator":"shoulder","value":-5`), "LIMIT_MIN"},
		{"actuator held by another saga", fmt.Sprintf(`{"id":"t16","agent":"other","op":"step",%s,"saga":%d,"actuator":"gripper","value":5}`, olease, osaga), "ACTUATOR_BUSY"},
		{"another agent's saga", fmt.Sprintf(`{"id":"t17","agent":"other","op":"step",%s,"saga":%d,"actuator":"base","value":5}`, olease, saga), "SAGA_NOT_OWNER"},
		{"another agent's lease", fmt.Sprintf(`{"id":"t18","agent":"other","op":"step",%s,"saga":%d,"actuator":"base","value":5}`, lease, saga), "LEASE_NOT_HOLDER"},
		{"unknown lease", fmt.Sprintf(`{"id":"t19","agent":"planner","op":"step","lease":"L999-00","epoch":999,"saga":%d,"actuator":"base","value":5}`, saga), "LEASE_UNKNOWN"},
		{"stale epoch", fmt.Sprintf(`{"id":"t20","agent":"planner","op":"step","lease":%q,"epoch":%d,"saga":%d,"actuator":"base","value":5}`, h.Lease, h.Epoch+7, saga), "LEASE_EXPIRED"},
		{"reused id, another command", step("s1", `"actuator":"base","value":5`), "DUPLICATE_ID"},
		{"unknown saga", fmt.Sprintf(`{"id":"t21","agent":"planner","op":"step",%s,"saga":999,"actuator":"base","value":5}`, lease), "SAGA_UNKNOWN"},
		{"commit of unknown saga", `{"id":"t22","agent":"planner","op":"commit",` + lease + `,"saga":999}`, "SAGA_UNKNOWN"},
		{"agent with +", `{"id":"t23","agent":"pl+anner","op":"status"}`, "BAD_REQUEST"},
		{"epoch negative", `{"id":"t24","agent":"planner","op":"begin","lease":"x","epoch":-1}`, "BAD_REQUEST"},
		{"epoch fractional", `{"id":"t25","agent":"planner","op":"begin","lease":"x","epoch":1.5}`, "BAD_REQUEST"},
		{"saga beyond uint64", step("t26", `"actuator":"base","value":1,"saga":18446744073709551616`), "BAD_REQUEST"},
		{"empty id", `{"id":"","agent":"planner","op":"status"}`, "BAD_REQUEST"},
		{"deadline too long", step("t27", `"actuator":"base","value":1,"deadline_ms":600000`), "BAD_REQUEST"},
		{"reset over MQTT (off by default)", `{"id":"t28","agent":"planner","op":"reset","token":"guess"}`, "FORBIDDEN"},
		{"hello ttl too short", `{"id":"t29","agent":"planner2","op":"hello","ttl_ms":1}`, "BAD_REQUEST"},
		{"nested object", step("t30", `"actuator":{"name":"base"},"value":1`), "BAD_REQUEST"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := call(tt.payload)
			if r.OK || r.Code != tt.code || r.Message == "" {
				t.Fatalf("reply %+v, want code %s with a message", r, tt.code)
			}
		})
	}
	// Untimely: a deadline that passes before the gate, and a halted supervisor.
	r := s.Handle(api.Request{ID: "late", Agent: "planner", Op: api.OpStep, Lease: h.Lease, Epoch: h.Epoch, Saga: saga,
		Actuator: "base", Value: 5, DeadlineMS: 10}, now.Add(-time.Second))
	if r.Code != "DEADLINE_PASSED" {
		t.Fatalf("late step: %+v", r)
	}
	if after := commanded(); !reflect.DeepEqual(before, after) {
		t.Fatalf("bad input moved something:\nbefore %v\nafter  %v", before, after)
	}
	s.Halt("test", "e-stop")
	if r := call(step("t31", `"actuator":"base","value":1`)); r.Code != "HALTED" {
		t.Fatalf("step while halted: %+v", r)
	}

	// Every refusal is in the journal with its code.
	s.engine.WaitHalts() // the halt goroutine is done writing
	if err := s.journal.Sync(); err != nil {
		t.Fatal(err)
	}
	s.lanes.Flush() // refusals the lanes and the decoder decided are journaled in aggregate
	if err := s.journal.Sync(); err != nil {
		t.Fatal(err)
	}
	refused := map[string]int{}
	err := wal.Scan(s.journal.Dir(), wal.Options{}, 1, func(wr wal.Record) error {
		rec, err := rollback.DecodeRecord(wr.Type, wr.Payload)
		if err == nil && rec.Type == rollback.RecRefused {
			n := 1
			fmt.Sscanf(rec.Message, "%d requests refused", &n) // an aggregate record counts its requests
			refused[rec.Code] += n
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{}
	for _, tt := range tests {
		want[tt.code]++
	}
	want["DEADLINE_PASSED"]++
	want["HALTED"]++
	for code, n := range want {
		if refused[code] < n {
			t.Errorf("journal has %d REFUSED %s, want at least %d", refused[code], code, n)
		}
	}
	t.Logf("%d requests refused, journaled by code: %v", len(tests)+2, refused)
}

func TestGuaranteesEndpoint(t *testing.T) {
	s, _ := newTestSupervisor(t)
	rec := httptest.NewRecorder()
	s.HTTPHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/guarantees", nil))
	var g rollback.Guarantees
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &g) != nil || len(g.NotClaimed) == 0 || len(g.EnforcedBeforeEffect) == 0 {
		t.Fatalf("GET /api/v1/guarantees: %d %s", rec.Code, rec.Body)
	}
}

// A refused heartbeat is served on the transport's goroutine, so it is not
// journaled one by one — but it is journaled, in aggregate (it was only
// counted in metrics, and the audit trail lost it).
func TestRefusedHeartbeatsJournaledInAggregate(t *testing.T) {
	s, _ := newTestSupervisor(t)
	for i := range 3 {
		got := make(chan api.Reply, 1)
		req := api.Request{ID: fmt.Sprint("hb", i), Agent: "ghost", Op: api.OpHeartbeat, Lease: "L9-nope", Epoch: 9}
		s.Submit("ghost", req, nil, time.Now(), func(r api.Reply) { got <- r })
		if r := <-got; r.OK || !strings.HasPrefix(r.Code, "LEASE_") {
			t.Fatalf("heartbeat on no lease: %+v", r)
		}
	}
	s.lanes.Flush()
	if err := s.journal.Sync(); err != nil {
		t.Fatal(err)
	}
	var found []string
	err := wal.Scan(s.journal.Dir(), wal.Options{}, 1, func(wr wal.Record) error {
		rec, err := rollback.DecodeRecord(wr.Type, wr.Payload)
		if err == nil && rec.Type == rollback.RecRefused && rec.Agent == "ghost" {
			found = append(found, rec.Code+": "+rec.Message)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || !strings.Contains(found[0], "3 heartbeat requests refused") {
		t.Fatalf("REFUSED records for the heartbeats: %q, want one counting 3", found)
	}
}
