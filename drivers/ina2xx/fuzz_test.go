package ina2xx

import (
	"encoding/binary"
	"math"
	"testing"
)

// FuzzDecode feeds arbitrary register bytes to every decoder: none panics,
// each returns either an error and no value or a finite value within what
// the register can express.
func FuzzDecode(f *testing.F) {
	for _, seed := range [][]byte{{0, 0}, {0xff, 0xff}, {0x5d, 0xc2}, {0x80, 0x00}, {0x7f, 0xff}, {0x0f, 0xa0}, {0x00, 0x0c}} {
		f.Add(seed, uint8(3))
	}
	f.Fuzz(func(t *testing.T, b []byte, pga uint8) {
		if len(b) < 2 {
			return
		}
		raw := binary.BigEndian.Uint16(b)
		check := func(name string, v float64, err error, max float64) {
			t.Helper()
			if err != nil && v != 0 {
				t.Fatalf("%s(%#04x) = %g with error %v", name, raw, v, err)
			}
			if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > max {
				t.Fatalf("%s(%#04x) = %g, beyond ±%g", name, raw, v, max)
			}
		}
		v, _, err := decodeBus219(raw)
		check("decodeBus219", v, err, 32.764)
		if err == nil && raw&ina219OVF != 0 {
			t.Fatalf("decodeBus219(%#04x) ignored OVF", raw)
		}
		v, err = decodeShunt219(raw, int(pga))
		check("decodeShunt219", v, err, 0.32)
		v, err = decodeBus226(raw)
		check("decodeBus226", v, err, 40.96)
		v, err = decodeShunt226(raw)
		check("decodeShunt226", v, err, 0.08192)
		if _, err := decodeMask226(raw); (err == nil) == (raw&ina226OVF != 0) {
			t.Fatalf("decodeMask226(%#04x) = %v", raw, err)
		}
	})
}
