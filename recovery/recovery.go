package recovery

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// Options configures Open.
type Options struct {
	Dir string
	WAL wal.Options
	// Engine configures the engine; its Journal is set by Open.
	Engine rollback.Config
	// WrapJournal, if set, is given the journal Open hands the engine and
	// returns the one the engine writes to instead. It is for test
	// harnesses that interpose on the journal (the model check latches
	// halts from inside a sync); the daemon leaves it nil.
	WrapJournal func(rollback.Journal) rollback.Journal
	// HaltFirst, if set, is asked after the state is rebuilt from the
	// journal and before open sagas are finished; a non-empty answer (an
	// e-stop found pressed at start) latches halt first, so that recovery
	// moves nothing but the safe policies: open sagas end unresolved. It
	// is given the engine: from then on the caller may latch a halt on it
	// (Engine.Latch) at any moment, and Recover checks that latch before
	// every compensation it drives.
	HaltFirst func(*rollback.Engine) string
	// Opened, if set, is called once the journal is open and locked,
	// before the rebuild: the daemon starts answering HTTP from there,
	// then waits for the boards to answer. An error from it ends Open
	// with that error (not ErrRefused: the journal is fine), before the
	// rebuild.
	Opened func() error
	// Progress, if set, is called as recovery moves on: after the journal
	// is opened and verified, every 4096 records applied in the rebuild,
	// and before and after open sagas are finished (the daemon extends
	// systemd's start timeout while it is called).
	Progress func()
	// Checkpoint, if its Every or Manual is set, keeps checkpoints while
	// the engine serves (see Checkpointer); the zero value writes none.
	Checkpoint CheckpointOptions
}

// Result is a journal taken over and an engine ready to serve.
type Result struct {
	Log    *wal.Log
	Engine *rollback.Engine
	// Opened is what the journal's open found, including a cut tail.
	Opened wal.OpenReport
	// RebuiltRecords is how many records rebuilt the engine's state (those
	// after the checkpoint started from, or all of them).
	RebuiltRecords uint64
	// Rebuilt is the durable record the state was rebuilt up to: a reader
	// of the journal (the dashboard's tail) follows it from there with
	// wal.Log.Follow, reading only what was written after.
	Rebuilt wal.Position
	// Mismatches are the actuators found at start elsewhere than the
	// journal said (adopted, and recovery halted).
	Mismatches []rollback.Mismatch
	// Reports are the RollbackReports of the sagas recovery finished,
	// newest first. Empty when the previous process left nothing open.
	Reports []*rollback.Report
	// Took is how long verify + rebuild + unwinds took.
	Took time.Duration
	// CheckpointMismatch, if set, says that the checkpoint started from
	// was taken with other actuators configured (rollback.ErrSnapshotMismatch):
	// what it knew of the actuators both configurations have is restored.
	CheckpointMismatch string
	// Checkpointer writes checkpoints while the daemon runs (nil unless
	// Options.Checkpoint asks for it).
	Checkpointer *Checkpointer
}

// Clean reports whether every saga recovery finished was unwound clean.
func (r *Result) Clean() bool {
	for _, rep := range r.Reports {
		if !rep.Clean() {
			return false
		}
	}
	return true
}

// ErrRefused is matched (errors.Is) by Open's error when the journal
// itself could not be opened: a file system read-only or full, a chain
// that fails its checks, records lost, another process holding it. None
// of these passes by itself: the daemon exits and is not restarted until
// an operator acts (docs/JOURNAL.md, docs/HARDWARE.md).
var ErrRefused = errors.New("recovery: journal refused")

// Open opens the journal — wal.Open locks it first, so a journal another
// process owns is refused (errors.Is wal.ErrLocked) before anything in it
// is read or cut — verifies it, rebuilds the engine and finishes every
// open saga. On error nothing is left open, running or locked.
func Open(opt Options) (_ *Result, err error) {
	start := time.Now()
	res := &Result{}
	defer func() {
		if err != nil {
			if res.Engine != nil {
				res.Engine.Close() // waits for its halt goroutine, which writes to the journal
			}
			if res.Log != nil {
				res.Log.Close() // releases the lock
			}
		}
	}()
	res.Log, err = wal.Open(opt.Dir, opt.WAL)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	res.Opened = res.Log.OpenReport()
	if opt.Opened != nil {
		if err = opt.Opened(); err != nil {
			return nil, err
		}
	}
	progress := func() {
		if opt.Progress != nil {
			opt.Progress()
		}
	}
	progress()
	// The journal's state is rebuilt in a rebuild-only engine — from the
	// newest checkpoint, if any, plus the records after it — and handed to
	// the serving engine as a snapshot: one path, whether the journal has
	// a checkpoint or not. The rebuild-only engine stays, fed from the
	// durable journal, to write the next checkpoints (Checkpointer).
	shadowCfg := opt.Engine
	shadowCfg.Journal, shadowCfg.Logger, shadowCfg.OnHalt = rebuildOnly{}, nil, nil
	shadow, err := rollback.New(shadowCfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			shadow.Close()
		}
	}()
	var from wal.Position
	if ck := res.Opened.Checkpoint; ck != nil {
		if rerr := shadow.Restore(ck.Payload); errors.Is(rerr, rollback.ErrSnapshotMismatch) {
			res.CheckpointMismatch = rerr.Error()
		} else if rerr != nil {
			return nil, fmt.Errorf("recovery: checkpoint %s: %w", ck.Name, rerr)
		}
		from = ck.At
	}
	pos, err := res.Log.Follow(from, func(r wal.Record) error {
		res.RebuiltRecords++
		if res.RebuiltRecords%4096 == 0 {
			progress()
		}
		return shadow.Apply(r.Seq, r.Type, r.Payload)
	})
	if err != nil {
		return nil, fmt.Errorf("recovery: rebuilding state: %w", err)
	}
	res.Rebuilt = pos
	snap, err := shadow.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("recovery: rebuilding state: %w", err)
	}
	cfg := opt.Engine
	cfg.Journal = res.Log
	if opt.WrapJournal != nil {
		cfg.Journal = opt.WrapJournal(res.Log)
	}
	res.Engine, err = rollback.New(cfg)
	if err != nil {
		return nil, err
	}
	if err = res.Engine.Restore(snap); err != nil {
		return nil, fmt.Errorf("recovery: rebuilding state: %w", err)
	}
	keep := opt.Checkpoint.Every > 0 || opt.Checkpoint.Manual
	if !keep {
		shadow.Close()
	}
	// Before anything moves, the world is asked where it is. Where it
	// differs from the journal — a halt's safe moves the full disk could not
	// record, a hand on the hardware — the engine adopts what it finds
	// (journaled) and recovery halts: no unwind may drive an actuator to a
	// prior under a belief the journal got wrong, and an operator must look.
	res.Mismatches, err = res.Engine.Reconcile(context.Background())
	if err != nil {
		return nil, fmt.Errorf("recovery: reconciling with the actuators: %w", err)
	}
	var haltWhy []string
	if l := res.Opened.LossAccepted; l != nil {
		// The operator let the journal go on without records it had made
		// durable (wal.Options.AcceptLoss). What they did is unknown: no
		// open saga may be compensated on this belief. The halt's record
		// journals the acceptance.
		haltWhy = append(haltWhy, fmt.Sprintf("journal records lost and the loss accepted by the operator (%s); what they recorded is unknown: check the robot, then reset", l.Reason))
	}
	if len(res.Mismatches) > 0 {
		var found []string
		for _, m := range res.Mismatches {
			found = append(found, m.String())
		}
		haltWhy = append(haltWhy, "at start the actuators do not read back as the journal says ("+strings.Join(found, "; ")+
			"): what was read is adopted; check the robot, then reset")
	}
	if opt.HaltFirst != nil {
		if why := opt.HaltFirst(res.Engine); why != "" {
			haltWhy = append(haltWhy, why)
		}
	}
	if len(haltWhy) > 0 {
		// Halt before Recover: open sagas end unresolved and every
		// actuator goes to its safe policy — nothing is compensated.
		res.Reports, _ = res.Engine.Halt(strings.Join(haltWhy, "; "))
		for _, rep := range res.Reports {
			rep.Recovered = true
		}
		if err := res.Engine.Err(); err != nil {
			return nil, fmt.Errorf("recovery: halting first: %w", err)
		}
	}
	progress()
	reps, err := res.Engine.Recover()
	progress()
	res.Reports = append(res.Reports, reps...)
	if err != nil {
		return nil, fmt.Errorf("recovery: finishing open sagas: %w", err)
	}
	if keep {
		// Started last: nothing after it can fail, so it never outlives
		// a failed Open.
		res.Checkpointer = startCheckpointer(res.Log, shadow, pos, opt.Checkpoint)
	}
	res.Took = time.Since(start)
	return res, nil
}

// rebuildOnly is the journal of the rebuild-only engine: it never journals.
type rebuildOnly struct{}

func (rebuildOnly) Enqueue(uint8, []byte) (uint64, error) {
	return 0, errors.New("recovery: the replay engine journals nothing")
}
func (rebuildOnly) Sync() error { return nil }

// Close closes the engine (waiting for its halt goroutine, which writes to
// the journal), then the journal, which releases the lock. It is
// idempotent.
func (r *Result) Close() error {
	var errs []error
	if r.Engine != nil {
		errs = append(errs, r.Engine.Close())
	}
	if r.Checkpointer != nil {
		// Everything the engine journaled, checkpointed: the next start
		// rebuilds from the checkpoint alone.
		errs = append(errs, r.Checkpointer.Close())
		r.Checkpointer = nil
	}
	if err := r.Log.Close(); !errors.Is(err, wal.ErrClosed) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
