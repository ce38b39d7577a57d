package gpio

import (
	"strconv"
	"testing"
)

// FuzzDecodePulse feeds arbitrary bytes as the kernel's period, duty_cycle
// and enable files: decoding never panics, and what it accepts is a
// consistent pulse that reads the same when written back.
func FuzzDecodePulse(f *testing.F) {
	f.Add([]byte("20000000\n"), []byte("1500000\n"), []byte("1\n"))
	f.Add([]byte("0\n"), []byte("0\n"), []byte("0\n"))
	f.Add([]byte("20000000"), []byte("30000000"), []byte("1"))
	f.Add([]byte("18446744073709551615\n"), []byte("-1\n"), []byte("2\n"))
	f.Add([]byte(" 1\n"), []byte("+1"), []byte("1\n\n"))
	f.Fuzz(func(t *testing.T, periodB, dutyB, enableB []byte) {
		w, p, on, err := decodePulse(periodB, dutyB, enableB)
		if err != nil {
			if w != 0 || p != 0 || on {
				t.Fatalf("error %v with a value: %s %s %t", err, w, p, on)
			}
			return
		}
		if w < 0 || p < 0 || w > p {
			t.Fatalf("accepted an impossible pulse %s in %s", w, p)
		}
		w2, p2, on2, err := decodePulse([]byte(strconv.FormatInt(int64(p), 10)), []byte(strconv.FormatInt(int64(w), 10)+"\n"), []byte(map[bool]string{false: "0", true: "1"}[on]))
		if err != nil || w2 != w || p2 != p || on2 != on {
			t.Fatalf("round trip: %s %s %t -> %s %s %t %v", w, p, on, w2, p2, on2, err)
		}
		// Whatever the kernel shows, the angle it decodes to is a number.
		if a := sg90.AngleFor(w); !finite(a) {
			t.Fatalf("AngleFor(%s) = %g", w, a)
		}
		if p > 0 {
			if d := DutyFor(w, p); d < 0 || d > 1<<24 {
				t.Fatalf("DutyFor(%s, %s) = %d", w, p, d)
			}
		}
	})
}
