package journaltool

import (
	"fmt"
	"io"
	"path/filepath"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/recovery"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// retainedJournal writes, through recovery and the engine, a journal whose
// first segments retention deleted behind a checkpoint, with a saga left
// open across the checkpoints (committed at the end).
func retainedJournal(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "journal")
	world := sim.NewMemoryWorld()
	defer world.Close()
	reg, err := actuators.NewRegistry(
		&actuators.Actuator{Name: "base", Kind: actuators.Servo, Limits: limits.Spec{Min: -90, Max: 90}, Driver: world.Servo("base", 0, 0), Timeout: 1e9},
		&actuators.Actuator{Name: "elbow", Kind: actuators.Servo, Limits: limits.Spec{Min: -90, Max: 90}, Driver: world.Servo("elbow", 0, 0), Timeout: 1e9})
	if err != nil {
		t.Fatal(err)
	}
	res, err := recovery.Open(recovery.Options{Dir: dir,
		WAL:        wal.Options{SegmentSize: 4096, Retention: wal.Retention{MaxBytes: 4 * 4096}},
		Engine:     rollback.Config{Actuators: reg},
		Checkpoint: recovery.CheckpointOptions{Manual: true}})
	if err != nil {
		t.Fatal(err)
	}
	e := res.Engine
	owner := rollback.Owner{Agent: "a", Lease: "l", Epoch: 1}
	long, err := e.Begin(owner)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Step(long, owner, rollback.Command{ID: "long-1", Actuator: "elbow", Value: 5}); err != nil {
		t.Fatal(err)
	}
	for i := range 150 {
		s, err := e.Begin(owner)
		if err != nil {
			t.Fatal(err)
		}
		for j, v := range []float64{1, 0} {
			if _, err := e.Step(s, owner, rollback.Command{ID: fmt.Sprintf("c%d-%d", i, j), Actuator: "base", Value: v}); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.Commit(s, owner); err != nil {
			t.Fatal(err)
		}
		if i%10 == 9 {
			if err := res.Checkpointer.CheckpointNow(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := e.Step(long, owner, rollback.Command{ID: "long-2", Actuator: "elbow", Value: 6}); err != nil {
		t.Fatal(err)
	}
	if err := e.Commit(long, owner); err != nil {
		t.Fatal(err)
	}
	if err := res.Close(); err != nil {
		t.Fatal(err)
	}
	vr, err := wal.Verify(dir, wal.Options{})
	if err != nil || !vr.OK() || vr.FirstSeq <= 1 {
		t.Fatalf("the journal is not one retention shortened: %+v %v", vr, err)
	}
	return dir
}

// A journal retention shortened is judged from its checkpoint: verify
// passes it and certify finds every saga it holds committed. Judged from
// an empty state instead, the first record of a saga begun in the deleted
// segments would be refused.
func TestToolsJudgeARetainedJournalFromItsCheckpoint(t *testing.T) {
	dir := retainedJournal(t)
	if out, code := run(Verify, "--wal", dir); code != 0 {
		t.Fatalf("verify: exit %d\n%s", code, out)
	}
	out, code := run(Certify, "--wal", dir)
	if code != 0 {
		t.Fatalf("certify: exit %d\n%s", code, out)
	}
	t.Log(out)
	for _, c := range []struct {
		name string
		cmd  func(args []string, w io.Writer) error
		args []string
	}{
		{"graph", Graph, nil},
		{"repair", Repair, nil},
		{"journal export", Journal, []string{"export"}},
	} {
		if out, code := run(c.cmd, append(c.args, "--wal", dir)...); code != 0 {
			t.Errorf("%s: exit %d\n%s", c.name, code, out)
		}
	}
}
