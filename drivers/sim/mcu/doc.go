// Package mcu is a simulated microcontroller that speaks the serial
// protocol of docs/SERIAL.md (package drivers/serial) from the MCU's side:
// channels with values and safe values, supplies with settable voltages,
// periodic telemetry, the session rules (HELLO, in-order requests, the
// duplicate cache that answers a retransmitted request without acting
// twice) and the MCU's link watchdog: with no valid frame within
// MaxDuration every output goes to its safe value and the session ends.
//
// Channels may be typed as the reference firmware's are (firmware/saga_mcu:
// servo with a pulse calibration, PWM, digital, active-low), and then
// answer DESCRIBE, quantise and drive their pins (Drive) exactly as it
// does: a differential test (firmware_test.go) runs the firmware's C core
// and this package on the same scripts and one virtual clock, and demands
// byte-identical replies.
//
// An MCU outlives its connections, as a board with its own power supply
// does: Serve runs it over one byte stream (one end of a net.Pipe in unit
// tests, a pty or a real serial port through ServePort), and may be called
// again after the stream fails. The watchdog runs whether or not anything
// is connected.
//
// Faults for tests: drop or corrupt frames, delay replies, "unplug" (fall
// silent), refuse a channel (NAK), restart (Reset), raise fault flags and
// write garbage onto the line. Everything else a test needs to check is
// observable: each output's value and whether it is detached, and counters
// of what the MCU received, applied and refused (Stats).
//
// Nothing here is a test helper in disguise: the same code would serve as
// a stand-in MCU in a separate process (a hidden CLI command can call
// New and ServePort).
package mcu
