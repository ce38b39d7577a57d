// Package actuators defines what the supervisor drives: the small Driver
// interface a hardware or simulated driver implements, the Actuator that
// wraps a driver with its name, kind, limits and safe policy, and a Registry
// of actuators by name.
//
// Drivers know nothing of sagas, journals or limits. They set a value, may
// read one back, and can always be made inert with Halt (the periph habit:
// every resource can be stopped). Cross-cutting rules — limits, journaling,
// timeouts — are applied around drivers by the rollback engine, never inside.
package actuators
