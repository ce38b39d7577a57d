package rollback

// Guarantees states what the engine (with the supervisor around it)
// enforces before an effect, what holds afterwards, and what is not
// claimed. It is served by `saga-supervisor guarantees` and
// /api/v1/guarantees, so users read the promises from the code that keeps
// them.
type Guarantees struct {
	EnforcedBeforeEffect []string `json:"enforced_before_effect"`
	GuaranteedAfter      []string `json:"guaranteed_after"`
	NotClaimed           []string `json:"not_claimed"`
}

// Promises returns the guarantees.
func Promises() Guarantees {
	return Guarantees{
		EnforcedBeforeEffect: []string{
			"the gate passes: not halted; journal healthy; supervisor ready; lease live (agent, lease id, epoch); saga open, owned and not busy; command id not seen before; deadline not passed; actuator known and not held by another open saga",
			"the value is finite and within min/max, max_step and max_rate — or, for an actuator whose policy is clamp, moved inside them with both values journaled",
			"the actuator's supply is known, fresh, not tripped (unless its action is warn) and within the actuator's own voltage bounds",
			"the INTENT (saga, step, actuator, target, prior, lease, epoch) is fdatasync'd before the driver is called (every-step; first-touch: a saga's first intent on each actuator)",
			"a refused command is journaled and moves nothing",
		},
		GuaranteedAfter: []string{
			"a failed or in-doubt step unwinds its saga: last step first to each step's recorded prior (retrace), or each actuator straight to its pre-saga value (direct)",
			"in-doubt steps (every driver error that does not wrap actuators.ErrNotApplied — a timeout, a lost link, an unexpected error — and a step with no outcome before a crash) are compensated like applied ones",
			"every compensation is journaled durably before its effect; a step whose compensation settled is never driven again, across crashes",
			"compensation retries are bounded; one that still fails sends the actuator to its safe policy and, by default, halts",
			"every step of an unwound saga lands in exactly one bucket (compensated, fallback_safe, compensation_failed, orphaned, unresolved); a report is clean only if every step was compensated",
			"a lease's end (expiry, bye, MQTT will, a new hello, shutdown) unwinds its agent's open sagas, newest first",
			"after a crash, recovery finishes every open saga before the supervisor serves a command or reports ready",
			"a write or fsync error of the journal stops all motion; a journal corrupt before its tail refuses to start; a torn tail is cut, kept in a .broken file and reported",
			"a journal holding a record the engine never writes where it stands (an END with no ABORT, a COMMIT after one, a second outcome...) refuses to start, and verify and certify refuse it by the same rules",
			"a lease epoch (fencing token) is never granted twice, across crashes",
			"a halt journals, durably, which actuators it sends to their safe policies before it moves any; a supervisor restarted on a latched halt applies them again, so the journal and the world agree",
		},
		NotClaimed: []string{
			"that the disk honours fdatasync: a volatile write cache can lose acknowledged records",
			"that a simulated driver behaves like the hardware it stands for",
			"that a driver error wrapping actuators.ErrNotApplied really left the output unchanged: that is the driver's promise, and such a step is not driven again",
			"that a pulse (irreversible) step can be undone: it is reported orphaned",
			"in first-touch durability, that the journal knows every step after a crash: a saga's later steps on an actuator may be missing, and if that saga's unwind is then partial the actuator may be where a missing step put it (the report says partial and the supervisor halts)",
			"that a configured safe policy is safe for your machine",
			"that an actuator reached its commanded value, unless it can be read back",
			"real-time bounds: a hung driver is waited for up to its timeout on every attempt",
			"behaviour beyond the model check's bound: `go run ./cmd/saga-modelcheck --max-steps 6 --sagas 2 --durability both` runs every case up to 6 steps with a power cut before every journal file-system call (one cut point per recovery; --all-recovery-crashes for all), in the retrace order with halt on compensation failure, in every-step and first-touch durability; longer sagas, the direct order, continue-on-failure and concurrency beyond two interleaved sagas are tested, not model-checked (docs/PROOF.md)",
			"that the simulated world file survives power loss (it survives a process kill)",
			"that a software e-stop replaces a hardwired one: the supervisor's e-stop input halts and refuses commands, but only a circuit that cuts actuator power stops a robot whose computer has failed",
			"that a microcontroller's firmware keeps the serial protocol's side of the bargain (its own watchdog, answering a retransmission from its cache, reporting what it applied): the reference sketch and the simulated MCU do; other firmware must be tested against docs/SERIAL.md",
			"that a servo is where its pulse says: PWM read-back reports the pulse being produced, not a measured angle",
		},
	}
}
