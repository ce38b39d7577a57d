// Package rollback is the saga engine: it runs the step protocol (gate →
// durable INTENT → effect → outcome), unwinds sagas last step first, latches
// halt, and rebuilds its state from the journal after a crash. Only this
// package decides order; drivers only set values and the journal only
// stores bytes.
//
// # Step protocol
//
// Step refuses with a coded *Error and moves nothing when the engine is
// halted or its journal failed, the saga is unknown, another owner's or busy,
// the command id was seen in the saga, its deadline passed, the actuator is
// unknown or held by another saga, or package limits refuses the value or the
// supply. Refusals are journaled without waiting. Otherwise the INTENT is
// journaled and — in every-step durability, or on the saga's first touch of
// the actuator — fdatasync'd before the driver is called. The outcome
// (APPLIED or FAILED) is journaled without waiting: it rides the next group
// commit. A driver error is in doubt — treated as applied, so the unwind
// drives the actuator back — unless it wraps actuators.ErrNotApplied, the
// driver's promise that the output did not change: only such a step is
// failed and not driven again. A failed or in-doubt step unwinds the saga; a
// COMMIT is durable before Commit returns.
//
// # Unwind
//
// Retrace order undoes steps last first, each to the prior its INTENT
// recorded; direct order moves each actuator once, straight to its pre-saga
// value, in reverse order of first touch. Each compensation is journaled
// durably (COMP_INTENT) before its effect and settled with COMP_DONE, so a
// crash mid-unwind resumes where it stopped and no settled step is driven
// again. A failing compensation is retried with doubling backoff; when the
// attempts are spent the actuator goes to its safe policy and, by default,
// the engine halts: the steps not yet attempted are unresolved. Every step
// lands in exactly one Bucket; Report.Clean is derived from them.
//
// # Journal records
//
// Each record is one wal record: the wal type is the RecordType, the payload
// is a presence mask (uvarint) followed by the present fields in this order:
// saga (uvarint), step (uvarint), actuator (string), target, prior,
// requested (float64 bits, little endian), agent, lease (string), epoch
// (uvarint), command id, code, message (string), attempt (uvarint), flags
// (byte), wall time (varint Unix ns, audit only). A string is a uvarint
// length and bytes (at most 64 KiB). Unknown types, unknown fields, short or
// trailing bytes are rejected.
//
//	type  name         fields                                              durable before
//	1     BEGIN        saga, agent, lease, epoch                            Begin returns
//	2     INTENT       saga, step, actuator, target, prior, requested,      the effect
//	                   lease, epoch, command id, flags (clamped, first touch)
//	3     APPLIED      saga, step                                           (rides)
//	4     FAILED       saga, step, code, message, flags (in doubt)          (rides)
//	5     REFUSED      saga, actuator, requested, agent, lease, epoch,      (rides)
//	                   command id, code, message
//	6     COMMIT       saga                                                 Commit returns
//	7     ABORT        saga, message (why)                                  (rides)
//	8     COMP_INTENT  saga, step, actuator, target, attempt                the compensation
//	9     COMP_DONE    saga, step, actuator, code (bucket; "" = a failed    (rides)
//	                   attempt), attempt, message
//	10    END          saga, code ("clean" or "partial")                    the report
//	11    HALT         message                                              (synced by Halt)
//	12    RESET        agent (who)                                          Reset returns
//	13    RECOVERY     message                                              (synced at the end)
//	14    SAFE         actuator, target, code (safe mode)                   the safe policy is applied
//	15    LEASE        agent, lease, epoch                                  the agent hears of it
//	16    OBSERVED     actuator, target, message (why)                      the value is adopted
//	27    ZONE_HALT    code (the zone), message (why)                       (synced by the zone's halt)
//	28    ZONE_RESET   code (the zone), agent (who)                         ZoneReset returns
//
// The rebuild at start (Engine.Apply, then Engine.Recover) brings back
// commanded values, open sagas with their steps, outcomes and unwind
// progress, and the halt latch. A step whose INTENT has no outcome is in
// doubt. A SAFE record makes its safe value the actuator's commanded value,
// and Recover applies the safe policies again when the journal ends halted,
// so that the record is true of the world even if the process died before
// moving the actuator.
//
// The rebuild also refuses a record the engine never writes where it
// stands — END, COMP_INTENT or COMP_DONE of a saga never aborted, COMMIT
// after ABORT or over a step not applied, a second BEGIN, ABORT, outcome or
// bucket, a step after ABORT or while the previous one has no outcome, an
// END verdict its buckets contradict — and the daemon then does not start.
// The rules read no configuration, so Validator, a scratch engine never
// served, applies the very same ones for the journal tools (verify,
// certify).
package rollback
