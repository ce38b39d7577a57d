// Package pca9685 drives the NXP PCA9685 16-channel, 12-bit PWM controller
// over I2C — the chip on most Raspberry Pi servo hats and bonnets — written
// against periph.io/x/conn/v3 from the chip's data sheet (periph's devices
// module is not used).
//
// Open configures a Board; Board.Servo gives a channel as a hobby servo
// whose value is an angle in degrees, Board.PWM a channel as a plain duty
// cycle 0..1 (an LED, an ESC, a motor driver's PWM input). Both implement
// actuators.Driver and actuators.ReadBacker. All 16 channels share one
// frequency (50 Hz for servos) and one mutex: every transaction to the chip
// is serialised. Package pca9685test is an in-memory chip for tests.
//
// # Registers
//
// Registers are 8 bits. A write sends the register address then the data;
// with MODE1's AI bit set the address auto-increments, so a channel's four
// registers go in one transaction. A read writes the address, then reads.
//
//	0x00 MODE1   RESTART(7) EXTCLK(6, sticky) AI(5) SLEEP(4) SUB1..3(3:1)
//	             ALLCALL(0); power-on 0x11 (asleep)
//	0x01 MODE2   bits 7:5 reserved (read 0), INVRT(4), OCH(3) (0: outputs
//	             change at the I2C stop), OUTDRV(2) (1: totem pole),
//	             OUTNE(1:0); power-on 0x04
//	0x06+4n      LEDn_ON_L, LEDn_ON_H, LEDn_OFF_L, LEDn_OFF_H, n = 0..15:
//	             12-bit ON and OFF counts of the 4096-count period; ON_H
//	             bit 4 is full on, OFF_H bit 4 full off (which wins), bits
//	             7:5 reserved. Power-on: every channel full off.
//	0xFA..0xFD   ALL_LED_ON_L..ALL_LED_OFF_H: written into every channel,
//	             read as 0
//	0xFE         PRE_SCALE: frequency = oscillator / (4096 (PRE_SCALE+1));
//	             writable only while SLEEP is set; minimum 3; power-on 30
//
// This package always writes ON = 0 and OFF = the pulse's length in counts;
// it decodes any ON/OFF pair (high time = OFF - ON mod 4096), so a channel
// set by another program reads back correctly.
//
// # Open
//
// Open reads MODE1, MODE2 and PRE_SCALE. A NAK is "nothing at this
// address"; MODE2's reserved bits set or PRE_SCALE below 3 is "not a
// PCA9685" (ErrWrongDevice), before anything is written. A chip already
// awake, auto-incrementing, with MODE2 0x04 and the wanted PRE_SCALE is
// left as it is: reopening after a supervisor restart moves nothing.
// Otherwise Open writes
//
//	ALL_LED_OFF_H = 0x10                every channel full off
//	MODE1 = SLEEP | AI | (SUB/ALLCALL bits as found)     0x31 from power-on
//	PRE_SCALE = round(osc / (4096 f)) - 1                121 for 50 Hz
//	MODE2 = 0x04
//	MODE1 = AI | (SUB/ALLCALL bits)      wake; 0x21 from power-on
//
// waits 500 µs for the oscillator, clears RESTART if it reads 1 (by
// writing 1 to it), and reads MODE1, MODE2 and PRE_SCALE back
// (ErrWrongDevice if they do not hold). There is no software reset: the
// SWRST general call would reset every device on the bus that honours it.
//
// # Set, ReadBack, Halt
//
// Set reads MODE1 first: a chip found asleep lost power or was reset since
// Open (ErrChipReset) — its outputs are off and its prescaler back at 200
// Hz — and Set refuses rather than write pulses that would run at the wrong
// period. It then writes the four channel registers in one transaction; the
// chip applies them together at the I2C stop (OCH = 0). Refusals before the
// write wrap actuators.ErrNotApplied; a failed write is in doubt and wraps
// actuators.ErrLinkLost.
//
// ReadBack reads the channel registers: it reports the pulse the chip is
// producing, converted to degrees (or a duty cycle), not a measured
// position. Halt sets the channel's full-off bit (one one-byte write): the
// servo gets no more pulses and goes limp — the detach safe policy.
// Board.HaltAll does it for all 16 channels through ALL_LED_OFF_H.
//
// Close only releases the board (Set then fails with ErrClosed); it writes
// nothing, because the supervisor parks every actuator at its own safe
// policy first and a "hold" must not be undone.
package pca9685
