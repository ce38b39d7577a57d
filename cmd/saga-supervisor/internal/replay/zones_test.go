package replay

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// A journal with a zone halt and its reset replays under the same config
// (zones included) with no difference: the zone's SAFE records are the
// zone halt's, not an orderly stop's park, and the elbow, outside the
// zone, steps on while the shoulder's zone is halted.
func TestZoneHaltReplays(t *testing.T) {
	text := fmt.Sprintf(armYAML, float64(armMax), float64(armRate)) + "\nzones:\n  arm: [shoulder]\n"
	cfg, err := config.ParseLayout([]byte(text), "arm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "arm.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	ms := time.Millisecond
	w := newWriter(t, cfg)
	s1 := w.begin("planner")
	w.mustStep(s1, 20*ms, "elbow", 60)
	s2 := w.begin("other")
	w.mustStep(s2, 20*ms, "shoulder", 30)
	w.tick(5 * ms)
	if _, err := w.e.ZoneHalt("arm", "light curtain"); err != nil {
		t.Fatal(err)
	}
	w.mustStep(s1, 200*ms, "elbow", 80)
	if _, err := w.step(s1, 20*ms, "shoulder", 40); rollback.CodeOf(err) != rollback.CodeZoneHalted {
		t.Fatalf("a step on the halted zone: %v", err)
	}
	w.tick(time.Second)
	gen, _ := w.e.ZoneGen("arm")
	if err := w.e.ZoneReset("operator", "arm", gen); err != nil {
		t.Fatal(err)
	}
	w.mustStep(s1, 20*ms, "shoulder", 50)
	w.commit(s1)
	w.flush()

	code, res := replayJSON(t, "--wal", w.dir, "--config", path, "--time-tolerance", "0")
	if code != 0 || res.Summary.Differs {
		t.Fatalf("exit %d, want 0; summary: %s\n%+v", code, res.Summary.Line, res)
	}
	if len(res.NotReplayed) != 0 || res.Summary.Steps != 5 {
		t.Errorf("the step refused ZONE_HALTED was not replayed: %d steps, not replayed %v", res.Summary.Steps, res.NotReplayed)
	}
}
