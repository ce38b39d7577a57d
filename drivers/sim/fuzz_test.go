package sim

import (
	"math"
	"testing"
)

// FuzzDecodeFile feeds arbitrary bytes to the world file reader: whatever is
// found on disk, OpenWorld must answer with an error, never a panic, and
// whatever it accepts must survive being written back.
func FuzzDecodeFile(f *testing.F) {
	var hdr, slot [slotSize]byte
	encodeHeader(&hdr)
	encodeSlot(&slot, "base", &state{kind: kindServo, commanded: 90, from: 12, since: 1e18, slew: 60})
	valid := append(hdr[:], slot[:]...)
	f.Add(valid)
	f.Add(hdr[:])
	f.Add(valid[:len(valid)-1])
	f.Add([]byte("SAGASIMW"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		names, states, err := decodeFile(data)
		if err != nil {
			return
		}
		for i := range names {
			st := states[i]
			if !st.kind.valid() || math.IsNaN(st.position(st.since+1e9)) {
				t.Fatalf("accepted an unusable state %+v", st)
			}
			var b [slotSize]byte
			encodeSlot(&b, names[i], &st)
			n2, st2, err := decodeSlot(b[:])
			if err != nil || n2 != names[i] || st2 != st {
				t.Fatalf("round trip of %q %+v gave %q %+v, %v", names[i], st, n2, st2, err)
			}
		}
	})
}
