package supervisor

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/internal/leaktest"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// A supervisor that served, lost an agent (its will), halted and stopped
// leaves no goroutine behind: its poller, its lanes, the will's unwind,
// the engine's halt goroutine and the journal's writer all end in Close.
// A will arriving after Close starts nothing; the engine refuses work.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	check := leaktest.Check(t)
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Journal.Dir = filepath.Join(dir, "journal")
	cfg.Sim.World = filepath.Join(dir, "world")
	cfg.HTTP.ResetToken = "operator-token-0123456789abcdef-test"
	cfg.Agents.Allow = nil
	b, err := FromConfig(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(b.Options)
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	now := time.Now()
	must := func(payload string) api.Reply {
		t.Helper()
		req, derr := api.DecodeRequest([]byte(payload), 8192)
		got := make(chan api.Reply, 1)
		s.Submit(req.Agent, req, derr, now, func(r api.Reply) { got <- r })
		r := <-got
		if !r.OK {
			t.Fatalf("%s: %s %s", payload, r.Code, r.Message)
		}
		return r
	}
	for _, agent := range []string{"planner", "watcher"} {
		h := must(`{"id":"h","agent":"` + agent + `","op":"hello","ttl_ms":60000}`)
		lease := fmt.Sprintf(`"lease":%q,"epoch":%d`, h.Lease, h.Epoch)
		saga := must(`{"id":"b","agent":"` + agent + `","op":"begin",` + lease + `}`).Saga
		act := map[string]string{"planner": "gripper", "watcher": "base"}[agent]
		must(fmt.Sprintf(`{"id":"s","agent":%q,"op":"step",%s,"saga":%d,"actuator":%q,"value":10}`, agent, lease, saga, act))
	}
	s.AgentGone("planner", "") // its will: unwound on a goroutine of the supervisor's
	s.Halt("test", "halt before the stop")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s.AgentGone("watcher", "") // after Close: starts nothing
	if _, err := s.Engine().Begin(rollback.Owner{Agent: "late"}); rollback.CodeOf(err) != rollback.CodeHalted {
		t.Fatalf("Begin after Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	check()
}
