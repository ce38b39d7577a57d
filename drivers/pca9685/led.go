package pca9685

import (
	"fmt"
	"math"
)

// Register addresses and bits, from the NXP PCA9685 data sheet.
const (
	regMode1     = 0x00
	regMode2     = 0x01
	regLED0      = 0x06 // LEDn_ON_L is regLED0 + 4n; ON_H, OFF_L, OFF_H follow
	regAllOffH   = 0xFD // ALL_LED_OFF_H: written into every LEDn_OFF_H
	regPrescale  = 0xFE
	mode1Restart = 0x80
	mode1ExtClk  = 0x40
	mode1AI      = 0x20
	mode1Sleep   = 0x10
	mode1Addr    = 0x0F // SUB1, SUB2, SUB3, ALLCALL: kept as found
	mode2Default = 0x04 // OUTDRV totem pole; not inverted; change on STOP
	mode2Rsvd    = 0xE0
	ledFull      = 0x10 // bit 4 of LEDn_ON_H (full on) and LEDn_OFF_H (full off)
	ledRsvd      = 0xE0 // bits 7:5 of LEDn_ON_H and LEDn_OFF_H read 0
	minPrescale  = 3    // the chip clamps lower values to 3
	steps        = 4096 // counts in one PWM period
)

// Channels is the number of outputs on one chip.
const Channels = 16

func ledReg(ch int) byte { return byte(regLED0 + 4*ch) }

// led is the decoded content of one channel's four registers.
type led struct {
	on, off         uint16 // 12-bit counts
	fullOn, fullOff bool
}

// decodeLED decodes LEDn_ON_L, ON_H, OFF_L, OFF_H. Reserved bits set are
// an error: the chip reads them as zero.
func decodeLED(b [4]byte) (led, error) {
	if b[1]&ledRsvd != 0 || b[3]&ledRsvd != 0 {
		return led{}, fmt.Errorf("%w: reserved bits set in % x", ErrBadReading, b[:])
	}
	return led{
		on:      uint16(b[0]) | uint16(b[1]&0x0F)<<8,
		off:     uint16(b[2]) | uint16(b[3]&0x0F)<<8,
		fullOn:  b[1]&ledFull != 0,
		fullOff: b[3]&ledFull != 0,
	}, nil
}

// high reports how many of the 4096 counts of a period the output is high
// for: 0 when full off (which wins over full on), 4096 when full on,
// otherwise OFF - ON modulo 4096. The chip's phase (the ON count) does not
// matter to a servo or to a duty cycle.
func (l led) high() int {
	switch {
	case l.fullOff:
		return 0
	case l.fullOn:
		return steps
	}
	return (int(l.off) - int(l.on) + steps) % steps
}

// encodeLED returns the four register bytes that make the output high for
// n counts from the start of the period: 0 is full off, 4096 (or more) full
// on.
func encodeLED(n int) [4]byte {
	switch {
	case n <= 0:
		return [4]byte{0, 0, 0, ledFull}
	case n >= steps:
		return [4]byte{0, ledFull, 0, 0}
	}
	return [4]byte{0, 0, byte(n), byte(n >> 8)}
}

// servoMap maps angles linearly onto counts: minT counts at minA, maxT at
// maxA. minT may be the larger (a servo mounted the other way round).
type servoMap struct {
	minA, maxA, minT, maxT float64
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// ticks returns the count for angle, or an error wrapping ErrInvalidValue
// for an angle outside [minA, maxA] or not finite.
func (m servoMap) ticks(angle float64) (int, error) {
	if !finite(angle) || angle < m.minA || angle > m.maxA {
		return 0, fmt.Errorf("%w: angle %g outside %g..%g", ErrInvalidValue, angle, m.minA, m.maxA)
	}
	frac := (angle - m.minA) / (m.maxA - m.minA)
	return int(math.Round(m.minT + frac*(m.maxT-m.minT))), nil
}

// angle is the inverse of ticks: the angle a count commands. It lies
// outside the angle range for a count outside the calibrated counts.
func (m servoMap) angle(n int) float64 {
	frac := (float64(n) - m.minT) / (m.maxT - m.minT)
	return m.minA + frac*(m.maxA-m.minA)
}

// dutyTicks returns the counts for a duty cycle in [0, 1], or an error
// wrapping ErrInvalidValue.
func dutyTicks(duty float64) (int, error) {
	if !finite(duty) || duty < 0 || duty > 1 {
		return 0, fmt.Errorf("%w: duty cycle %g outside 0..1", ErrInvalidValue, duty)
	}
	return int(math.Round(duty * steps)), nil
}
