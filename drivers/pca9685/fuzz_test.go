package pca9685

import (
	"errors"
	"math"
	"testing"
)

// FuzzServoTicks checks the angle-to-count conversion over arbitrary
// calibrations and angles: an angle in range gives a count between the
// calibrated ends (so within 1..4095), converts back to within half a
// count's angle, and never panics; one out of range, NaN or Inf is
// refused with ErrInvalidValue.
func FuzzServoTicks(f *testing.F) {
	f.Add(102.46, 512.3, -90.0, 90.0, 0.0)
	f.Add(512.3, 102.46, 0.0, 180.0, 180.0)
	f.Add(1.0, 4095.0, 0.0, 1e-9, 5e-10)
	f.Add(204.9, 409.8, -1e300, 1e300, 1e299)
	f.Add(204.9, 409.8, 0.0, 180.0, math.NaN())
	f.Fuzz(func(t *testing.T, minT, maxT, minA, maxA, angle float64) {
		lo, hi := min(minT, maxT), max(minT, maxT)
		if !finite(minT) || !finite(maxT) || lo < 0.5 || hi >= steps-0.5 || hi-lo < 1 ||
			!finite(minA) || !finite(maxA) || minA >= maxA || !finite(maxA-minA) {
			return // Board.servoMap refuses these calibrations
		}
		m := servoMap{minA: minA, maxA: maxA, minT: minT, maxT: maxT}
		n, err := m.ticks(angle)
		inRange := finite(angle) && angle >= minA && angle <= maxA
		if !inRange {
			if !errors.Is(err, ErrInvalidValue) {
				t.Fatalf("ticks(%g) outside %g..%g = %d, %v", angle, minA, maxA, n, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("ticks(%g) in %g..%g: %v", angle, minA, maxA, err)
		}
		if float64(n) < math.Round(lo) || float64(n) > math.Round(hi) || n < 1 || n > steps-1 {
			t.Fatalf("ticks(%g) = %d outside %g..%g", angle, n, lo, hi)
		}
		back := m.angle(n)
		perTick := (maxA - minA) / (hi - lo)
		if math.Abs(back-angle) > perTick*0.5*(1+1e-9)+1e-9*math.Max(math.Abs(minA), math.Abs(maxA)) {
			t.Fatalf("angle(ticks(%g) = %d) = %g, more than half a count (%g°) away", angle, n, back, perTick)
		}
		if l, err := decodeLED(encodeLED(n)); err != nil || l.high() != n {
			t.Fatalf("encode/decode %d: %d, %v", n, l.high(), err)
		}
	})
}

// FuzzDecodeLED feeds arbitrary channel registers to the decoder: it never
// panics, refuses reserved bits, keeps the high time within 0..4096, and
// what it accepts re-encodes to registers that decode to the same high
// time.
func FuzzDecodeLED(f *testing.F) {
	for _, s := range [][4]byte{{0, 0, 0, 0x10}, {0, 0x10, 0, 0}, {0, 0, 0x33, 0x01}, {100, 0, 0x97, 0x01}, {0xFF, 0x1F, 0xFF, 0x1F}, {0, 0x80, 0, 0}} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, onL, onH, offL, offH byte) {
		b := [4]byte{onL, onH, offL, offH}
		l, err := decodeLED(b)
		if (onH|offH)&ledRsvd != 0 {
			if !errors.Is(err, ErrBadReading) {
				t.Fatalf("decodeLED(% x) accepted reserved bits: %v", b, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("decodeLED(% x): %v", b, err)
		}
		n := l.high()
		if n < 0 || n > steps || (l.fullOff && n != 0) || (l.fullOn && !l.fullOff && n != steps) {
			t.Fatalf("decodeLED(% x).high() = %d", b, n)
		}
		if l2, err := decodeLED(encodeLED(n)); err != nil || l2.high() != n {
			t.Fatalf("re-encode %d: %d, %v", n, l2.high(), err)
		}
	})
}
