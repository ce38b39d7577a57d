// Package sim provides simulated actuator drivers and a simulated physical
// world for them, so that CI, the crash-recovery tests and the demo can run
// the supervisor without hardware.
//
// A World holds the physical state of every simulated device of a process:
// where each servo is and is heading, what each digital output and setpoint
// is, how many times each pulse output has kicked, and the voltage of each
// supply. Devices are made from a World by name (World.Servo, World.Digital,
// World.Setpoint, World.Pulse, World.Supply) and implement
// actuators.Driver and, where a real device could report its state,
// actuators.ReadBacker.
//
// # Persistence
//
// A World opened with OpenWorld on a file keeps that state in the file, so a
// process killed with SIGKILL leaves behind exactly what it had done to the
// world, and the next process that opens the file finds the arm where it was
// left. That is what crash recovery is tested against. Every change of state
// is written to the file (one small positioned write) before the call that
// made it returns. No fsync is done: the written data sit in the kernel's
// page cache, which outlives the process, and that is all that surviving a
// kill needs. Surviving power loss is not a goal; after a power cut the file
// may miss recent changes or be reported as corrupt, and should be deleted.
//
// Two processes must not open the same world file at the same time: each
// World caches the whole state in memory and would not see the other's
// writes. Where the platform has flock, OpenWorld takes an exclusive lock and
// fails clearly on a file that is already open; the kernel drops the lock
// when the holder dies, so a killed process never blocks the next one.
//
// # Faults
//
// Every device embeds a Faults value, so every device has the same fault
// injection API (FailOnNth, FailAlways, FailWhen, HangNext, LoseLink, ...).
// A Set that a fault fails leaves the world unchanged and says so by
// wrapping actuators.ErrNotApplied; a hang or a lost link is in doubt and
// may apply the effect anyway, which is how tests build the in-doubt steps
// the rollback engine must handle.
//
// Outputs driven by a duty cycle (actuators.PWM) are simulated with Setpoint.
package sim
