// Package serial is the host side of the framed serial link to
// microcontrollers (Arduino, RP2040, ESP32 on USB serial) that drive motors
// and servos and report supply voltages. docs/SERIAL.md is the protocol
// specification for firmware authors; firmware/saga_mcu is the reference
// firmware (an Arduino library for the Uno and Nano), and drivers/sim/mcu a
// simulated MCU that speaks it, byte for byte alike (its differential test).
//
// # Frames
//
// A frame is SYNC (0xA5), LEN, SEQ, TYPE, LEN payload bytes, and a
// CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF, no reflection, no final
// XOR; check value 0x29B1) over LEN..payload, low byte first. The Decoder
// hunts for the sync byte, so it resynchronises after garbage; a frame with
// a bad LEN or CRC is counted and dropped, never acted on, and the hunt
// resumes one byte after its sync byte.
//
// # Sessions, acks and retransmission
//
// The host opens a session with HELLO; the MCU answers with its protocol
// version, channel and supply counts, window and watchdog (max_duration).
// Every request (SET, HALT, PING) carries the next sequence number and is
// answered by the MCU with the same number: an ack carrying the channel's
// state after the request (for SET, the value actually applied), or a NAK
// that promises nothing changed; a Set's error then wraps
// actuators.ErrNotApplied. NAK NO_SESSION is the exception: the MCU sends it
// to every request after a restart or a watchdog trip, also to the
// retransmission of a SET it had acted on, so it ends the session and the
// Set in doubt like a lost link. Up to Window requests are in flight. The
// MCU takes requests strictly in order and answers a retransmitted one from
// a small cache without acting on it again, so an unanswered request can
// be resent (go-back-N, at most Retries times) without moving anything
// twice. A request still unanswered after that ends the session; so do
// silence for LinkTimeout, a lost port, and an MCU that reports a restart
// or a watchdog trip. Every request in flight then fails in doubt, and the
// host says HELLO again (reopening the port first if it failed — by name,
// or by USB VID/PID/serial number through go.bug.st/serial/enumerator).
//
// # Watchdogs both ways
//
// The host counts the link lost when no valid frame arrives for
// LinkTimeout: Set fails wrapping actuators.ErrLinkLost, ReadBack and
// Volts fail, Ready reports it. The MCU puts every output to its safe
// value when no valid frame arrives within its max_duration; the host
// sends PING whenever it has been silent for a quarter of the smaller of
// the two, so an idle but healthy link never trips either.
//
// # Actuators and supplies
//
// Link.Channel returns an actuators.Driver and actuators.ReadBacker for
// one MCU channel; Link.Supply a voltage source for the supervisor. Values
// are float64 in the actuator's unit and travel as int32 thousandths; a
// value that does not fit is refused before anything is sent. Every error
// of this package is an *Error with a stable Code (CodeOf).
package serial
