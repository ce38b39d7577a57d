//go:build !saga_lean

package hil

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// journalView is what the journal says: the belief a restart would come
// up with (an engine rebuilt from every record, as recovery does), and
// what the soak checks of the history.
type journalView struct {
	lastSeq   uint64
	commanded map[string]float64 // rebuilt, per actuator
	committed map[uint64]uint64  // saga → seq of its COMMIT
	halts     []uint64           // seqs of HALT records
	resets    []uint64           // seqs of RESET records
	// problems are records that break the journal's own rules: a record
	// that continues or unwinds a committed saga, a step whose recorded
	// prior is not where the journal had the actuator.
	problems []string
}

// haltSince and resetSince report whether a HALT (RESET) was journaled
// after seq.
func (j *journalView) haltSince(seq uint64) bool  { return anyAfter(j.halts, seq) }
func (j *journalView) resetSince(seq uint64) bool { return anyAfter(j.resets, seq) }

func anyAfter(seqs []uint64, seq uint64) bool {
	return len(seqs) > 0 && seqs[len(seqs)-1] > seq
}

// inert is the driver of the rebuilt engine's actuators: the rebuild moves
// nothing, and nothing else is asked of it.
type inert struct{}

func (inert) Set(context.Context, float64) error { return errors.New("soak: rebuild moves nothing") }
func (inert) Halt() error                        { return errors.New("soak: rebuild moves nothing") }

// frozen is inert, and reads back what the board's outputs read at one
// moment: a reconcile against it finds what a restart at that moment
// must find.
type frozen struct {
	inert
	out Output
}

func (f frozen) ReadBack(context.Context) (float64, error) {
	if f.out.Detached {
		return 0, actuators.ErrNoReading
	}
	return f.out.Value, nil
}

// readOnlyJournal refuses every write: the rebuild writes nothing.
type readOnlyJournal struct{}

func (readOnlyJournal) Enqueue(uint8, []byte) (uint64, error) {
	return 0, errors.New("soak: rebuild writes nothing")
}
func (readOnlyJournal) Sync() error { return errors.New("soak: rebuild writes nothing") }

// scratchJournal takes every write and keeps none: a reconcile journals
// what it adopts.
type scratchJournal struct{ seq uint64 }

func (j *scratchJournal) Enqueue(uint8, []byte) (uint64, error) { j.seq++; return j.seq, nil }
func (j *scratchJournal) Sync() error                           { return nil }

// newEngine builds an engine for cfg's actuators, each driven by
// driver(name), writing to j.
func newEngine(cfg *config.Config, driver func(string) actuators.Driver, j rollback.Journal) (*rollback.Engine, *actuators.Registry, error) {
	var list []*actuators.Actuator
	for _, name := range cfg.ActuatorNames() {
		a := cfg.Actuators[name]
		list = append(list, &actuators.Actuator{Name: name, Kind: a.Kind, Limits: limits.Spec{Min: a.Min, Max: a.Max},
			Safe: a.Safe, Initial: a.Initial, Timeout: a.Timeout, Driver: driver(name)})
	}
	reg, err := actuators.NewRegistry(list...)
	if err != nil {
		return nil, nil, err
	}
	rc := cfg.RollbackConfig()
	rc.Journal, rc.Actuators = j, reg
	e, err := rollback.New(rc)
	return e, reg, err
}

// readJournal rebuilds an engine from the journal in dir, of the
// supervisor configured by cfg, without taking its lock: the supervisor
// may be running. A record the supervisor is writing at that moment can
// read as a torn or zero-filled frame; such a read is retried for a moment.
func readJournal(cfg *config.Config, dir string) (*journalView, error) {
	deadline := time.Now().Add(3 * time.Second)
	for {
		e, reg, err := newEngine(cfg, func(string) actuators.Driver { return inert{} }, readOnlyJournal{})
		if err != nil {
			return nil, err
		}
		j, err := rebuild(e, reg, cfg.Journal.WALOptions(), dir)
		e.Close()
		if err == nil || !strings.Contains(err.Error(), "zero-filled or torn") || time.Now().After(deadline) {
			return j, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mustReconcile is what a supervisor starting now on the journal in dir
// must find where the board's outputs read as world shows: the actuators
// it must adopt (and halt on) before anything moves (docs/DESIGN.md,
// Recovery). It runs the engine's own reconcile on an engine rebuilt from
// the journal, whose drivers read back world. The supervisor must not be running.
func mustReconcile(cfg *config.Config, plan *Plan, dir string, world State) ([]rollback.Mismatch, error) {
	out := map[string]Output{}
	for _, a := range plan.Actuators {
		if a.Output < len(world.Outputs) {
			out[a.Name] = world.Outputs[a.Output]
		}
	}
	e, reg, err := newEngine(cfg, func(name string) actuators.Driver {
		if o, ok := out[name]; ok {
			return frozen{out: o}
		}
		return inert{}
	}, &scratchJournal{})
	if err != nil {
		return nil, err
	}
	defer e.Close()
	if _, err := rebuild(e, reg, cfg.Journal.WALOptions(), dir); err != nil {
		return nil, err
	}
	return e.Reconcile(context.Background())
}

func rebuild(e *rollback.Engine, reg *actuators.Registry, opt wal.Options, dir string) (*journalView, error) {
	j := &journalView{commanded: map[string]float64{}, committed: map[uint64]uint64{}}
	err := wal.Scan(dir, opt, 1, func(r wal.Record) error {
		rec, err := rollback.DecodeRecord(r.Type, r.Payload)
		if err != nil {
			return fmt.Errorf("record %d: %w", r.Seq, err)
		}
		j.lastSeq = r.Seq
		switch rec.Type {
		case rollback.RecIntent:
			// The prior a step records is what its unwind restores: it
			// must be where the journal had the actuator.
			if c, ok := e.Commanded(rec.Actuator); ok && c != rec.Prior {
				j.problems = append(j.problems, fmt.Sprintf("record %d: saga %d step %d on %s records prior %g, but the journal had %s at %g",
					r.Seq, rec.Saga, rec.Step, rec.Actuator, rec.Prior, rec.Actuator, c))
			}
		case rollback.RecCommit:
			j.committed[rec.Saga] = r.Seq
		case rollback.RecHalt:
			j.halts = append(j.halts, r.Seq)
		case rollback.RecReset:
			j.resets = append(j.resets, r.Seq)
		}
		if at, ok := j.committed[rec.Saga]; ok && rec.Type != rollback.RecCommit && rec.Type != rollback.RecRefused {
			// A refusal may name any saga a client sent; anything else
			// after the commit continues or undoes a committed saga.
			j.problems = append(j.problems, fmt.Sprintf("record %d: %s of saga %d, which committed at record %d", r.Seq, rec.Type, rec.Saga, at))
		}
		return e.Apply(r.Seq, r.Type, r.Payload)
	})
	if err != nil {
		return nil, err
	}
	for _, name := range reg.Names() {
		j.commanded[name], _ = e.Commanded(name)
	}
	return j, nil
}
