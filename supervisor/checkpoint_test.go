package supervisor

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// smallJournal makes a journal that rolls over, checkpoints and retains
// quickly: 4 KiB segments, a checkpoint every 100 records, at most 32 KiB,
// the checkpointer catching up every 10 ms.
func smallJournal(c *config.Config) {
	c.Agents.Allow = nil
	c.Journal.SegmentSize = 4096
	c.Journal.CheckpointRecords = 100
	c.Journal.Retention.MaxSize = 8 * 4096
}

func fastCheckpoints(o *Options) { o.Checkpoint.Every = 10 * time.Millisecond }

// sagas runs n committed sagas of two steps on the base through the engine.
func sagas(t *testing.T, e *rollback.Engine, n int) {
	t.Helper()
	owner := rollback.Owner{Agent: "planner", Lease: "L", Epoch: 1}
	for i := range n {
		id, err := e.Begin(owner)
		if err != nil {
			t.Fatal(err)
		}
		for j, v := range []float64{1, 0} {
			if _, err := e.Step(id, owner, rollback.Command{ID: string(rune('a'+j)) + string(rune('0'+i%10)), Actuator: "base", Value: v}); err != nil {
				t.Fatalf("saga %d step %d: %v", i, j, err)
			}
		}
		if err := e.Commit(id, owner); err != nil {
			t.Fatal(err)
		}
	}
}

// While the daemon serves, checkpoints follow the journal and retention
// keeps it under its bound; a restart starts from the checkpoint Close
// wrote and applies no record after it; every record is verified after
// start.
func TestCheckpointsAndRetentionWhileServing(t *testing.T) {
	dir := t.TempDir()
	edit := func(c *config.Config) {
		smallJournal(c)
		c.Journal.Dir = filepath.Join(dir, "journal")
		c.Sim.World = filepath.Join(dir, "world")
	}
	s, b := newTestSupervisorWith(t, edit, fastCheckpoints)
	sagas(t, s.Engine(), 400) // 1600 records or so: ~40 segments of 4 KiB
	waitFor(t, "retention", func() bool {
		st := s.journal.Stats()
		return st.SegmentsDeleted > 0 && st.CheckpointSeq+100 > s.journal.DurableSeq()
	})
	// The checkpointer and retention keep working after the condition
	// above (the last checkpoint, the pass it triggers): the figures are
	// compared once both have settled, two reads in a row the same.
	var st wal.Stats
	var onDisk int
	waitFor(t, "retention to settle", func() bool {
		st = s.journal.Stats()
		n, _ := filepath.Glob(filepath.Join(dir, "journal", "*.wal"))
		onDisk = len(n)
		return onDisk == st.SegmentFiles && s.journal.Stats() == st
	})
	if st.SegmentBytes > 8*4096+3*4096 { // the bound, plus what the older kept checkpoint needs
		t.Fatalf("journal at %d bytes in %d segments, bound 32 KiB", st.SegmentBytes, st.SegmentFiles)
	}
	waitFor(t, "the verification after start", func() bool { return s.metrics.journalVerified.Load() == journalVerifyClean })
	s.Close() // parks: every actuator to its safe policy, journaled
	world := b.World.Snapshot()
	b.Close()

	s2, b2 := newTestSupervisorWith(t, edit, fastCheckpoints)
	res := s2.Recovered()
	if res.Opened.Checkpoint == nil || res.RebuiltRecords != 0 {
		t.Fatalf("restart: checkpoint %v, %d records rebuilt from; want the one Close wrote and none", res.Opened.Checkpoint, res.RebuiltRecords)
	}
	if res.Opened.Records > 2 {
		t.Fatalf("restart walked %d records", res.Opened.Records)
	}
	// The beliefs came back with the checkpoint: every actuator reads
	// back where the journal says (elbow parked at its safe 45, not its
	// initial 20), so the restart is not halted.
	if halted, why := s2.Engine().Halted(); len(res.Mismatches) != 0 || halted {
		t.Fatalf("restart: mismatches %v, halted %v (%s)", res.Mismatches, halted, why)
	}
	for name, st := range b2.World.Snapshot() {
		if st.Commanded != world[name].Commanded {
			t.Fatalf("%s: commanded %g after restart, %g before", name, st.Commanded, world[name].Commanded)
		}
	}
	waitFor(t, "the verification after restart", func() bool { return s2.metrics.journalVerified.Load() == journalVerifyClean })
}

// Damage behind the checkpoint the start used is not read by the start
// (the state comes from the checkpoint), but it is found right after:
// saga_journal_verified drops to 0 and the log says what and where.
func TestDamageBehindTheCheckpointIsFoundAfterStart(t *testing.T) {
	dir := t.TempDir()
	edit := func(c *config.Config) {
		smallJournal(c)
		c.Journal.Retention.MaxSize = 0 // keep every segment
		c.Journal.Dir = filepath.Join(dir, "journal")
		c.Sim.World = filepath.Join(dir, "world")
	}
	s, b := newTestSupervisorWith(t, edit, fastCheckpoints)
	sagas(t, s.Engine(), 100)
	s.Close()
	b.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, "journal", "*.wal"))
	slices.Sort(segs)
	raw, err := os.ReadFile(segs[1])
	if err != nil {
		t.Fatal(err)
	}
	raw[200] ^= 0x10 // inside a record of an old segment
	if err := os.WriteFile(segs[1], raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if vr, _ := wal.Verify(filepath.Join(dir, "journal"), wal.Options{}); vr.Broken == nil {
		t.Fatalf("the damage is not damage: %+v", vr)
	}
	s2, _ := newTestSupervisorWith(t, edit, fastCheckpoints)
	if s2.Recovered().Opened.Checkpoint == nil {
		t.Fatal("the restart did not start from a checkpoint")
	}
	waitFor(t, "the verification to find the damage", func() bool { return s2.metrics.journalVerified.Load() == journalVerifyDamaged })
}

// TestVerificationWhileServingIsClean: commands journaled while the
// verification after start runs are not damage. A pass reading on into
// the batch being written would see a frame still zeros with a whole one
// after it and set saga_journal_verified to 0 on a healthy daemon.
func TestVerificationWhileServingIsClean(t *testing.T) {
	for round := range 5 {
		dir := t.TempDir()
		s, b := newTestSupervisorWith(t, func(c *config.Config) {
			c.Agents.Allow = nil
			c.Journal.SegmentSize = 1 << 20 // more than one read window
			c.Journal.Dir = filepath.Join(dir, "journal")
			c.Sim.World = filepath.Join(dir, "world")
		})
		owner := rollback.Owner{Agent: "planner", Lease: "L", Epoch: 1}
		steps := 0
		for s.metrics.journalVerified.Load() == journalVerifyPending && steps < 20000 {
			id, err := s.Engine().Begin(owner)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Engine().Step(id, owner, rollback.Command{ID: "a", Actuator: "base", Value: float64(steps % 2)}); err != nil {
				t.Fatal(err)
			}
			if err := s.Engine().Commit(id, owner); err != nil {
				t.Fatal(err)
			}
			steps++
		}
		waitFor(t, "the verification after start", func() bool { return s.metrics.journalVerified.Load() != journalVerifyPending })
		if v := s.metrics.journalVerified.Load(); v != journalVerifyClean {
			t.Fatalf("round %d: verification verdict %d after %d sagas during it; want clean", round, v, steps)
		}
		s.Close()
		b.Close()
	}
}
