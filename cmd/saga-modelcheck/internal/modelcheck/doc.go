// Package modelcheck is a bounded model checker for the rollback engine.
//
// It runs the real engine (package rollback), the real journal (package
// wal) on the crash-simulating file system (package wal/crashfs), and the
// real recovery (package recovery) against simulated actuators (package
// drivers/sim) through every case up to a bound: for n = 1..N steps, which
// step faults (or none, ending in commit or abort), whether that fault is in
// doubt (with or without its effect) or a clean failure, every subset of
// the attempted compensations that fails, which step (or none) runs on an
// actuator whose effect cannot be undone, a power cut before every mutating
// file-system call of the run, and a power cut during the recovery that
// follows. With two sagas, two agents' sagas run interleaved on disjoint
// actuators in every order and the first agent's lease expires after each
// of its steps in turn; and, in the zone cases, the zone holding the first
// saga's shoulder halts after each step of the run in turn, with and without
// a zone reset before the commits, while the second saga steps on in the
// other zone.
//
// Halts at a sync (HaltCases): on every crash-free run — and on every
// interleaving of two sagas that both commit (TwoSagaCommitCases) — an
// e-stop latches the full halt from another goroutine (Engine.Latch) while
// the k-th Journal.Sync of the run is under way, for every k: the engine's
// lock released, the records being synced not yet durable. In two-saga
// cases without a scheduled zone halt the same is done with a zone's
// halt (Engine.ZoneLatch), of the zone "arm" (the shoulder, safe value)
// and of the zone "root" (the base, safe policy hold). Each is run with the
// disk alive and with it dying at that sync (EIO on every later call, a
// dead disk), and each is followed by a restart on what the disk holds.
// The sync that latched waits until the halt has been applied, or, when
// the halt must wait for that sync's own effect (a step's INTENT), until
// the halt's own sync has returned, so these runs are deterministic too
// (syncJournal). They are not cut by power cuts: the crash points are
// the crash-free runs' (Config.HaltSyncSteps bounds the runs they are
// laid on; Config.NoHaltSync leaves them out).
//
// Every case is checked against the invariants listed in Invariants: some
// at the moment of each driver call (the intent is durable, nothing moves
// after a halt), some on every RollbackReport (when it is delivered, a
// report names a saga whose BEGIN is durable) and every saga id Begin
// hands out, some after the last recovery against the journal, the
// rebuilt engine and the simulated world, and, for crash-free cases
// without a halt at a sync, against an independent model of what the case
// must do.
//
// A case prints as an id (Case.String) that ParseCase reads back, so that a
// counterexample is replayed with `go run ./cmd/saga-modelcheck --case ID`.
package modelcheck
