// Package limits makes the pure decisions of the gate: whether a command is
// inside an actuator's bounds, step and slew limits, and whether a supply's
// voltage permits motion. It does no I/O and reads no clock: the caller
// passes the time in, so every decision is a function of its arguments and
// is tested with tables.
//
// # Commands
//
// [Check] decides one command against one actuator's [Spec] and the previous
// command on that actuator ([Prev]). The checks run in a fixed order and the
// first one that fails names the refusal, so the same inputs always give the
// same [Code]:
//
//  1. NOT_FINITE: the requested value (or the previous one) is NaN or ±Inf.
//     Always refused, whatever the policy: there is no nearest allowed value
//     to a NaN, and an infinity clamped to a bound is a guess, not a command.
//  2. LIMIT_MIN, then LIMIT_MAX: the value is outside [Min, Max].
//  3. LIMIT_STEP: |requested − prev| exceeds MaxStep (only when prev is known).
//  4. LIMIT_SLEW: |requested − prev| exceeds MaxRate × elapsed (only when prev
//     is known and has a time).
//
// Every limit is inclusive: a value exactly on a bound is allowed.
//
// With the [Clamp] policy the value is first clamped into [Min, Max], then
// moved no further from prev than the tighter of MaxStep and MaxRate ×
// elapsed, toward the requested value. The result is re-checked as if the
// policy were [Reject]; Clamp therefore never yields a value Reject would
// refuse. When no value satisfies every limit (the previous value lies so far
// outside [Min, Max] that one step cannot reach the range) the command is
// refused exactly as Reject would refuse it.
//
// # Supplies
//
// A [Supply] watches one power rail: readings go in with [Supply.Observe] and
// [Supply.State] reports whether the rail is unknown, stale, tripped or fine.
// A violation must last the debounce time before it trips; a trip is latched
// until the voltage is back inside the band narrowed by the hysteresis for the
// debounce time. [CheckSupply] combines a supply's state with an actuator's
// own voltage bounds into the code that allows or refuses a command.
//
// Codes are stable strings: they appear on the wire and in the journal and
// are never renamed.
package limits
