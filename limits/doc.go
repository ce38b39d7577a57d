// Package limits makes the pure decisions of the gate: whether a command is
// inside an actuator's bounds, step and slew limits, and whether a supply's
// voltage permits motion. It does no I/O and reads no clock: the caller
// passes the time in, so every decision is a function of its arguments and
// is tested with tables.
package limits
