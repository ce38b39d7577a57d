// Package gpio drives a robot's local pins: digital outputs such as relays
// and enables (Output), an emergency-stop input (EStop), and hobby servos on
// PWM (Servo). Output and Servo implement actuators.Driver and
// actuators.ReadBacker; EStop is an input the supervisor watches.
//
// # Pins
//
// Pins are found by name through periph.io: the constructors call
// host.Init (idempotent) and look the name up with gpioreg.ByName, so
// anything registered there — a Raspberry Pi's GPIO17, a pin of a USB GPIO
// expander, or a fake pin a test registered — is driven the same way. On a
// machine without GPIO host.Init succeeds and finds nothing; the
// constructors then fail with ErrPinNotFound rather than handing back a pin
// that silently does nothing.
//
// Constructors never drive an output: a relay or servo keeps whatever state
// it had until the first Set or Halt, because nothing may move unless the
// supervisor let it.
//
// # Servo pulses
//
// A Servo maps an angle linearly onto a pulse width (for example -90..90
// degrees onto 500..2500 µs, repeated every 20 ms) and hands the pulse to a
// PulseOutput. Two are provided:
//
//   - PinPWM uses periph's pin.PWM(duty, frequency). It works on a
//     Raspberry Pi up to the 4 (hardware PWM on GPIO12/13/18/19, DMA PWM on
//     other pins) and needs root for /dev/mem. On a Pi 5 periph returns "not
//     implemented".
//   - SysfsPWM writes the kernel's PWM class files,
//     /sys/class/pwm/pwmchipN/pwmM/{period,duty_cycle,enable}, in
//     nanoseconds, exporting the channel first if needed. It is the way on a
//     Pi 5 and without root (with a udev rule giving the gpio group the
//     files; the systemd unit must not set ProtectKernelTunables, which
//     makes /sys read-only). The root directory is configurable so tests run
//     against a fake tree.
//
// Halt detaches a servo: pulses stop and the servo goes limp where it is.
//
// A hobby servo reports nothing back. Servo.ReadBack therefore returns the
// last angle the hardware accepted — a commanded value, not a measured one.
// With SysfsPWM it is decoded from the kernel's duty_cycle file, so it
// survives a restart of this process and shows a pulse someone else wrote;
// with PinPWM it is remembered in memory. A servo that is not being driven
// (never commanded since start, or detached) has no angle to report and
// ReadBack returns ErrNotDriven, which wraps actuators.ErrNoReading: the
// supervisor shows it but does not count it against readiness. With PinPWM,
// a write that failed in doubt (or a failed Halt) leaves the servo possibly
// pulsing: until a Set or Halt succeeds ReadBack then returns an error
// wrapping that failure, never ErrNotDriven.
//
// # Errors and doubt
//
// A value Set refuses (not 0 or 1 for an Output, an angle outside the
// servo's range, NaN) returns an error wrapping ErrInvalidValue and writes
// nothing. That error, and every failure before anything was written (a
// context already done, a missing PWM channel, a file that cannot be
// opened), wraps actuators.ErrNotApplied: the promise that the output did
// not change. A failure of the write itself may or may not have changed the
// output, so it does not (it wraps actuators.ErrLinkLost, which says why):
// the rollback engine treats the step as in doubt and drives the actuator
// back to its prior, which is the safe reading. So is any error that makes
// no promise, such as a wait for a PWM export that ran out of time.
//
// # E-stop
//
// EStop watches an input in its own goroutine: it waits for edges with
// WaitForEdge and, as a backstop for a missed edge, reads the pin at least
// every Poll interval. A change counts only once the line has been quiet for
// Debounce. OnPress is called once for every transition into pressed,
// including a stop found pressed at start. A line that keeps changing for
// ten debounce intervals is taken as pressed: a chattering e-stop must not
// hide a real press.
//
// Ready fails closed: a pin that cannot be found or configured, a pressed
// button and a closed watcher each make it return an error.
//
// periph's Read cannot report failure: a pin that cannot be read returns
// Low. That is why the default is active-low (pressed reads Low): a dead
// input then reads as pressed. With a normally-closed e-stop contact wired
// between the pin and ground and a pull-up, the pressed (open) contact and a
// cut wire both read High; configure that as ActiveHigh — a cut wire then
// also stops the robot, which a normally-open button can never give.
package gpio
