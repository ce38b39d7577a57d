package supervisor

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// copyDir copies the regular files of src into dst: with every-step
// durability, what a kill -9 leaves of a journal.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHaltWhileRecoveringStopsCompensations: a halt triggered on the
// HaltLine after recovery has taken its pending halts and before it
// finishes the open sagas (an HTTP halt, an e-stop press, while Recover
// runs) latches the recovering engine at once: the open saga is not
// compensated (base stays at 40, its safe policy is hold), and the HALT
// is journaled with its reason. Before, such a halt waited on the line
// until New returned, and Recover drove base back to 0 meanwhile.
func TestHaltWhileRecoveringStopsCompensations(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Agents.Allow = nil
	cfg.Journal.Dir = filepath.Join(dir, "journal")
	cfg.Journal.Durability = rollback.EveryStep
	cfg.Sim.World = filepath.Join(dir, "world")
	b1, err := FromConfig(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	s1, err := New(b1.Options)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	call := func(payload string) api.Reply {
		req, derr := api.DecodeRequest([]byte(payload), 8192)
		got := make(chan api.Reply, 1)
		s1.Submit(req.Agent, req, derr, now, func(r api.Reply) { got <- r })
		r := <-got
		if !r.OK {
			t.Fatalf("%s: %s %s", payload, r.Code, r.Message)
		}
		return r
	}
	h := call(`{"id":"h1","agent":"planner","op":"hello","ttl_ms":60000}`)
	lease := fmt.Sprintf(`"lease":%q,"epoch":%d`, h.Lease, h.Epoch)
	saga := call(`{"id":"b1","agent":"planner","op":"begin",` + lease + `}`).Saga
	call(fmt.Sprintf(`{"id":"s1","agent":"planner","op":"step",%s,"saga":%d,"actuator":"base","value":40}`, lease, saga))
	if got := b1.World.Snapshot()["base"].Commanded; got != 40 {
		t.Fatalf("base at %g after the step", got)
	}
	// The journal as a kill -9 now would leave it, the saga open. The
	// first process's world is let go (the world file keeps base at 40);
	// its supervisor is closed only at the end: its Close unwinds, on a
	// world no longer there.
	crashed := filepath.Join(dir, "crashed")
	copyDir(t, cfg.Journal.Dir, crashed)
	b1.Close()
	t.Cleanup(func() { s1.Close() })

	cfg2 := *cfg
	cfg2.Journal.Dir = crashed
	b2, err := FromConfig(&cfg2, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	line := b2.Options.HaltLine
	calls := 0
	b2.Options.Progress = func() {
		// Progress is called after the journal opened, then (with so few
		// records) just before the open sagas are finished: recovery has
		// asked the line for its halts already.
		if calls++; calls == 2 {
			line.Trigger("http test", "mid recovery")
		}
	}
	s2, err := New(b2.Options)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if calls < 3 {
		t.Fatalf("progress called %d times, want 3 or more (the test's moment)", calls)
	}
	if got := b2.World.Snapshot()["base"].Commanded; got != 40 {
		t.Errorf("base at %g after recovery: the open saga was compensated after the halt latched", got)
	}
	// The open saga is ended unresolved by Recover, or by the engine's
	// halt goroutine if it took the engine's lock first (its report then
	// goes to OnHalt): either way, never compensated.
	for _, rep := range s2.Recovered().Reports {
		if rep.Clean() {
			t.Errorf("recovery report %v: want the open saga ended unresolved", rep)
		}
	}
	s2.Engine().WaitHalts()
	if h, why := s2.Engine().Halted(); !h || !strings.Contains(why, "http test: mid recovery") {
		t.Errorf("halted %v (%q)", h, why)
	}
	if !journalHasHalt(t, s2, "http test: mid recovery") {
		t.Error("no HALT record with the reason in the journal")
	}
	if n := journalCount(t, s2, rollback.RecCompIntent); n != 0 {
		t.Errorf("%d COMP_INTENT records: recovery set out to compensate after the halt latched", n)
	}
}

// journalCount counts s's journal records of type typ.
func journalCount(t *testing.T, s *Supervisor, typ rollback.RecordType) int {
	t.Helper()
	n := 0
	if _, err := s.journal.Follow(wal.Position{}, func(r wal.Record) error {
		if rollback.RecordType(r.Type) == typ {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// journalHasHalt reports whether s's journal holds a HALT naming reason.
func journalHasHalt(t *testing.T, s *Supervisor, reason string) bool {
	t.Helper()
	found := false
	_, err := s.journal.Follow(wal.Position{}, func(r wal.Record) error {
		if rollback.RecordType(r.Type) != rollback.RecHalt {
			return nil
		}
		rec, err := rollback.DecodeRecord(r.Type, r.Payload)
		if err == nil && strings.Contains(rec.Message, reason) {
			found = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// TestStartupHTTPHandler: while Open recovers, the start-up handler behind
// the guard answers /readyz 503 with the reason, the status, and a halt,
// which latches on the line; the guard refuses a foreign Host as ever
// (logged, not journaled: the journal is recovery's). Open takes the halt
// before anything moves and journals it; the hand-off then serves the full
// API behind the same guard.
func TestStartupHTTPHandler(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Journal.Dir = filepath.Join(dir, "journal")
	cfg.Sim.World = filepath.Join(dir, "world")
	b, err := FromConfig(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := Prepare(b.Options)
	if err != nil {
		t.Fatal(err)
	}
	ho := NewHandOff(s.StartupHTTPHandler())
	guarded, err := s.GuardHTTP(ho, HTTPGuard{Listen: "127.0.0.1:8080", Bound: "127.0.0.1:8080"})
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path, host, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, "http://"+host+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		w := httptest.NewRecorder()
		guarded.ServeHTTP(w, req)
		return w
	}
	if w := do("GET", "/readyz", "127.0.0.1:8080", ""); w.Code != 503 || !strings.Contains(w.Body.String(), StartingReason) {
		t.Fatalf("/readyz while starting: %d %q", w.Code, w.Body)
	}
	if w := do("POST", "/api/v1/halt", "evil.example:8080", `{"reason":"rebound"}`); w.Code != http.StatusMisdirectedRequest {
		t.Fatalf("a halt from a foreign Host while starting: %d %s", w.Code, w.Body)
	}
	if w := do("POST", "/api/v1/reset", "127.0.0.1:8080", `{}`); w.Code != 503 || !strings.Contains(w.Body.String(), api.CodeNotReady) {
		t.Fatalf("reset while starting: %d %s", w.Code, w.Body)
	}
	w := do("POST", "/api/v1/halt", "127.0.0.1:8080", `{"reason":"before recovery"}`)
	var hj haltJSON
	if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &hj) != nil || !hj.Halted || !strings.Contains(hj.HaltReason, "before recovery") {
		t.Fatalf("halt while starting: %d %s", w.Code, w.Body)
	}
	var st api.Status
	if w := do("GET", "/api/v1/status", "127.0.0.1:8080", ""); w.Code != 503 || json.Unmarshal(w.Body.Bytes(), &st) != nil ||
		st.Ready || !st.Halted || st.Reasons[0] != StartingReason {
		t.Fatalf("status while starting: %d %s", w.Code, w.Body)
	}
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ho.Switch(s.HTTPHandler())
	if h, why := s.Engine().Halted(); !h || !strings.Contains(why, "http 192.0.2.1: before recovery") {
		t.Fatalf("after Open: halted %v (%q)", h, why)
	}
	if !journalHasHalt(t, s, "before recovery") {
		t.Error("the halt taken while starting is not journaled")
	}
	if w := do("GET", "/api/v1/status", "127.0.0.1:8080", ""); w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &st) != nil || !st.Halted {
		t.Fatalf("status after the hand-off: %d %s", w.Code, w.Body)
	}
	if w := do("GET", "/api/v1/guarantees", "127.0.0.1:8080", ""); w.Code != 200 {
		t.Fatalf("the full API after the hand-off: %d %s", w.Code, w.Body)
	}
}
