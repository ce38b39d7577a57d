package mcu

import (
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/drivers/serial"
)

// FuzzMCU: whatever arrives on the line, the MCU never panics, answers only
// with valid frames, and changes an output only for a valid, in-order SET
// (or HALT) — never for garbage.
func FuzzMCU(f *testing.F) {
	for _, in := range fuzzMCUSeeds() {
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := New(Options{Channels: []ChannelSpec{{Safe: 90}, {Min: -1, Max: 1}}, Supplies: []float64{12}, MaxDuration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		var seen serial.Decoder // the frames the MCU could have acted on
		seen.Write(in)
		acts := 0
		for {
			fr, ok := seen.Next()
			if !ok {
				break
			}
			if fr.Type == serial.TypeSet || fr.Type == serial.TypeHalt {
				acts++
			}
		}
		var dec serial.Decoder
		m.mu.Lock()
		out := m.receiveLocked(&dec, in, time.Now())
		m.mu.Unlock()
		for _, b := range out {
			var check serial.Decoder
			check.Write(b)
			if fr, ok := check.Next(); !ok || !fr.Type.FromMCU() || check.Pending() {
				t.Fatalf("answer % x is not one valid MCU frame", b)
			}
		}
		s := m.Stats()
		if int(s.Sets+s.Halts) > acts {
			t.Fatalf("%d sets and halts applied, %d in the input", s.Sets, acts)
		}
		if s.Sets+s.Halts == 0 {
			for ch, want := range []float64{90, 0} {
				if v, detached := m.Output(ch); v != want || detached {
					t.Fatalf("channel %d moved to %v (detached %v) with no set or halt applied", ch, v, detached)
				}
			}
		}
	})
}

// fuzzMCUSeeds are FuzzMCU's seeds; the differential test runs them too.
func fuzzMCUSeeds() [][]byte {
	frame := func(seq uint8, t serial.Type, p []byte) []byte {
		b, _ := serial.Frame{Seq: seq, Type: t, Payload: p}.MarshalBinary()
		return b
	}
	hello := frame(0, serial.TypeHello, []byte{1})
	set := frame(1, serial.TypeSet, []byte{0, 0x10, 0x27, 0, 0})
	return [][]byte{
		append(append([]byte{}, hello...), set...),
		append(append(append([]byte{}, hello...), set...), set...),
		append(append([]byte("\xa5\x05junk"), hello...), frame(1, serial.TypeHalt, []byte{1})...),
		set,
		append(append([]byte{}, hello...), frame(1, serial.TypeDescribe, []byte{0})...),
	}
}
