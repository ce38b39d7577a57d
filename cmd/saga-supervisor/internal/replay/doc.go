// Package replay is `saga-supervisor replay`: it reads a journal, read-only
// and without locking it, and drives its commands in order into a fresh
// rollback.Engine over an in-memory simulated world built from a
// configuration — the same gate, limits and clamp code the daemon runs —
// to say what that configuration would have done differently: commands it
// refuses that were served then, commands it serves that were refused
// then, targets clamped differently, sagas that end differently, and
// where each actuator's commanded value first parts from the journal's.
//
// # How the journal drives the engine
//
// BEGIN is a Begin for the same owner, INTENT a Step with the requested
// value and command id, a refusal of the engine's gate a Step again,
// COMMIT a Commit, ABORT an Abort (unless the replay already ended the
// saga: a failed step, a halt or a recovery unwinds it by itself), HALT a
// Halt, RESET a Reset, LEASE a RecordLease, OBSERVED an Adopt, SAFE
// records outside a halt the orderly stop's Park, and a RECOVERY record a
// restart: a new engine rebuilt with Apply from what the replay journaled,
// then Recover — what the daemon does when it starts. Outcomes, unwind
// records and safe moves are the engine's own doing and are not driven;
// the replay's engine writes its own into a scratch journal in memory.
//
// The clock is virtual: before each record it is set to the record's wall
// time, so slew limits see the intervals the journal shows. Driver faults
// are taken from the journal: a step that failed then, or was in doubt,
// fails the same way now, and each failed compensation attempt fails again
// (matched by saga and actuator). Supply voltages, deadlines and approvals
// are not in the journal: supplies are nominal, and a command refused then
// for one of those reasons is refused again with the journaled code once
// the limits have been checked anew. Refusals decided by the supervisor
// before the gate (leases, permissions, rates, readiness) are not
// replayed; they are counted.
//
// A window (--from, --to, by seq or RFC 3339 time) selects what is
// reported. Records before the replay's start are applied to the engine as
// recovery would, so the world starts where the journal says it was; a
// saga open at the window's start is replayed from its BEGIN when the
// journal holds it.
//
// # A journal that retention has shortened
//
// A journal whose first record is after seq 1 lost its oldest segments to
// retention, behind a checkpoint. The replay then starts from the oldest
// checkpoint that decodes, whose record the journal holds with the same
// hash, and that lies before the window's end: the replay's engine, the
// journal's view and the engine of every restart are restored from its
// snapshot (rollback.Engine.Restore), the records up to it are not
// replayed, and sagas open in the snapshot are replayed from there as
// sagas begun before the replay, their owners and steps taken from it.
// Work the daemon had in progress where driving starts — a step's outcome,
// an unwind, a halt's safe moves — is finished from the journal's records
// rather than redone. With no usable checkpoint the actuators start from
// the config's initial values and sagas whose BEGIN is gone are skipped
// (and reported); the notes say which it was.
//
// A result written with --write-expect is a fixture: stable, sorted, free
// of paths and durations. --expect replays again and compares, so an
// incident journal and a configuration become a regression test
// (docs/REPLAY.md).
package replay
