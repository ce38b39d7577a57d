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
// Every case is checked against the invariants listed in Invariants: some
// at the moment of each driver call (the intent is durable, nothing moves
// after a halt), some on every RollbackReport, some after the last
// recovery against the journal and the simulated world, and, for crash-free
// cases, against an independent model of what the case must do.
//
// A case prints as an id (Case.String) that ParseCase reads back, so that a
// counterexample is replayed with `go run ./cmd/saga-modelcheck --case ID`.
package modelcheck
