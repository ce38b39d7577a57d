package serial

import (
	"bytes"
	"testing"
)

// FuzzDecoder: whatever arrives on the line, the decoder never panics, and
// every frame it returns re-encodes to exactly the bytes it was found in.
// Feeding the same bytes in pieces finds the same frames.
func FuzzDecoder(f *testing.F) {
	a := mustFrame(f, 1, TypePing, nil)
	b := mustFrame(f, 200, TypeTelemetry, bytes.Repeat([]byte{Sync, 0}, 30))
	f.Add(a, uint8(1))
	f.Add(append(append([]byte("junk\xa5\x03"), a...), b...), uint8(3))
	f.Add(append(b[:10], a...), uint8(0))
	f.Add([]byte{Sync, 0xff, Sync, 0, 0, 0}, uint8(2))
	f.Fuzz(func(t *testing.T, in []byte, split uint8) {
		var whole Decoder
		frames := decodeAll(&whole, in)
		for _, fr := range frames {
			raw, err := fr.MarshalBinary()
			if err != nil {
				t.Fatalf("decoded frame does not encode: %v", err)
			}
			if !bytes.Contains(in, raw) {
				t.Fatalf("frame %+v re-encodes to % x, not in the input", fr, raw)
			}
		}
		// In pieces of split+1 bytes (Abandon never called: no gaps).
		var pieces Decoder
		var chunks [][]byte
		for i := 0; i < len(in); i += int(split) + 1 {
			chunks = append(chunks, in[i:min(i+int(split)+1, len(in))])
		}
		again := decodeAll(&pieces, chunks...)
		if len(again) != len(frames) {
			t.Fatalf("whole: %d frames, in pieces: %d", len(frames), len(again))
		}
		for i := range frames {
			if frames[i].Seq != again[i].Seq || frames[i].Type != again[i].Type || !bytes.Equal(frames[i].Payload, again[i].Payload) {
				t.Fatalf("frame %d differs: %+v vs %+v", i, frames[i], again[i])
			}
		}
		s := whole.Stats()
		if s.Frames != uint64(len(frames)) {
			t.Fatalf("stats count %d frames, returned %d", s.Frames, len(frames))
		}
	})
}

// FuzzMessages: every payload decoder refuses or accepts arbitrary bytes
// without panicking, and what it accepts re-encodes to the same bytes.
func FuzzMessages(f *testing.F) {
	f.Add(uint8(TypeTelemetry), []byte("\x00\x00\x02\x34\x30\x00\x00\x00\x00\x00\x80\x02\x00\xe8\x03\x00\x00\x02\xff\xff\xff\xff"))
	f.Add(uint8(TypeHelloAck), []byte("\x01\x04\x02\x04\xf4\x01\x64\x00\x02\x00"))
	f.Add(uint8(TypeSet), []byte("\x03\x24\xfa\xff\xff"))
	f.Add(uint8(TypeNak), []byte("\x02\x02"))
	f.Fuzz(func(t *testing.T, typ uint8, p []byte) {
		d := decoderFor(Type(typ))
		if d == nil {
			return
		}
		if err := d.UnmarshalBinary(p); err != nil {
			return
		}
		again, err := d.(message).AppendBinary(nil)
		if err != nil || !bytes.Equal(again, p) {
			t.Fatalf("%v: accepted % x, re-encoded % x (%v)", Type(typ), p, again, err)
		}
	})
}
