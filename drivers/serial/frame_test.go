package serial

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
)

func mustFrame(t testing.TB, seq uint8, typ Type, payload []byte) []byte {
	t.Helper()
	b, err := Frame{Seq: seq, Type: typ, Payload: payload}.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWorkedExample pins the frame docs/SERIAL.md works through byte by
// byte: SET channel 2 to 90.5 (degrees) with sequence number 7.
func TestWorkedExample(t *testing.T) {
	p, _ := SetRequest{Channel: 2, Value: 90500}.AppendBinary(nil)
	got := hex.EncodeToString(mustFrame(t, 7, TypeSet, p))
	const want = "a50507020284610100a427"
	if got != want {
		t.Fatalf("worked example = %s, want %s (update docs/SERIAL.md if the format changed on purpose)", got, want)
	}
	var d Decoder
	raw, _ := hex.DecodeString(want)
	d.Write(raw)
	f, ok := d.Next()
	var s SetRequest
	if !ok || f.Seq != 7 || f.Type != TypeSet || s.UnmarshalBinary(f.Payload) != nil || s != (SetRequest{2, 90500}) {
		t.Fatalf("decoded %+v %v, set %+v", f, ok, s)
	}
}

func TestFrameTooLong(t *testing.T) {
	if _, err := (Frame{Payload: make([]byte, MaxPayload+1)}).MarshalBinary(); !errors.Is(err, ErrPayloadTooLong) {
		t.Fatalf("err = %v", err)
	}
	if b, err := (Frame{Payload: make([]byte, MaxPayload)}).MarshalBinary(); err != nil || len(b) != MaxFrameLen {
		t.Fatalf("max frame: %d bytes, %v", len(b), err)
	}
}

func decodeAll(d *Decoder, chunks ...[]byte) []Frame {
	var out []Frame
	for _, c := range chunks {
		d.Write(c)
		for {
			f, ok := d.Next()
			if !ok {
				break
			}
			out = append(out, f)
		}
	}
	return out
}

func TestDecoder(t *testing.T) {
	a := mustFrame(t, 1, TypePing, nil)
	b := mustFrame(t, 2, TypeSet, []byte{0, 1, 2, 3, 4})
	c := mustFrame(t, 3, TypeTelemetry, bytes.Repeat([]byte{Sync}, 40)) // sync bytes inside a payload
	badCRC := append([]byte{}, b...)
	badCRC[len(badCRC)-1] ^= 1
	badPayload := append([]byte{}, b...)
	badPayload[5] ^= 0x80
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

	for _, tc := range []struct {
		name  string
		in    []byte
		seqs  []uint8
		stats DecoderStats
	}{
		{"one", a, []uint8{1}, DecoderStats{Frames: 1}},
		{"three back to back", cat(a, b, c), []uint8{1, 2, 3}, DecoderStats{Frames: 3}},
		{"garbage before", cat([]byte("hello\x00\xff"), a), []uint8{1}, DecoderStats{Frames: 1, Skipped: 7}},
		{"bad CRC dropped, next found", cat(badCRC, a), []uint8{1}, DecoderStats{Frames: 1, BadCRC: 1, Skipped: uint64(len(badCRC) - 1)}},
		{"flipped payload bit dropped", cat(badPayload, c), []uint8{3}, DecoderStats{Frames: 1, BadCRC: 1, Skipped: uint64(len(badPayload) - 1)}},
		{"bad length dropped", cat([]byte{Sync, MaxPayload + 1}, a), []uint8{1}, DecoderStats{Frames: 1, BadLength: 1, Skipped: 1}},
		// A frame that starts inside a torn one is still found: the torn
		// frame's LEN swallows the good one, the CRC fails, and the hunt
		// resumes one byte after the false sync.
		{"frame inside a torn frame", cat(a[:3], b), []uint8{2}, DecoderStats{Frames: 1, BadCRC: 1, Skipped: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, split := range []int{0, 1, 3} { // whole, byte by byte, 3-byte chunks
				var d Decoder
				var chunks [][]byte
				if split == 0 {
					chunks = [][]byte{tc.in}
				} else {
					for i := 0; i < len(tc.in); i += split {
						chunks = append(chunks, tc.in[i:min(i+split, len(tc.in))])
					}
				}
				got := decodeAll(&d, chunks...)
				var seqs []uint8
				for _, f := range got {
					seqs = append(seqs, f.Seq)
				}
				if !bytes.Equal(seqs, tc.seqs) {
					t.Fatalf("split %d: seqs %v, want %v", split, seqs, tc.seqs)
				}
				if d.Stats() != tc.stats {
					t.Fatalf("split %d: stats %+v, want %+v", split, d.Stats(), tc.stats)
				}
			}
		})
	}
}

// TestDecoderAbandon: false sync bytes followed by plausible LENs hold back
// the good frames behind them until Abandon gives up on every one.
func TestDecoderAbandon(t *testing.T) {
	var d Decoder
	a := mustFrame(t, 9, TypePing, nil)
	b := mustFrame(t, 10, TypePing, nil)
	if got := decodeAll(&d, []byte{Sync, 100, 0x33}, a, []byte{Sync, 50}, b, []byte{0x44, Sync}); len(got) != 0 {
		t.Fatalf("frame found inside a partial frame that is not complete yet: %v", got)
	}
	if !d.Pending() {
		t.Fatal("no partial frame pending")
	}
	d.Abandon()
	got := decodeAll(&d, nil)
	if len(got) != 2 || got[0].Seq != 9 || got[1].Seq != 10 {
		t.Fatalf("after Abandon: %+v", got)
	}
	// Two false starts and the lone sync byte at the end; 100, 0x33, 50, 0x44 skipped.
	if s := d.Stats(); s.Truncated != 3 || s.Skipped != 4 {
		t.Fatalf("stats %+v", s)
	}
	if d.Pending() {
		t.Fatal("pending after everything was decoded")
	}
	d.Abandon() // nothing pending: no effect on what comes next
	// After a Write the decoder waits for partial frames again.
	if got := decodeAll(&d, []byte{Sync, 3}); len(got) != 0 || !d.Pending() {
		t.Fatalf("a partial frame written after Abandon was dropped: %v", got)
	}
	if d.Stats().Truncated != 3 {
		t.Fatalf("stats %+v", d.Stats())
	}
}

// TestDecoderMemoryBounded: a stream of garbage is not kept.
func TestDecoderMemoryBounded(t *testing.T) {
	var d Decoder
	junk := bytes.Repeat([]byte{0x00, Sync, 0x05, 0x11}, 4096)
	for range 10 {
		decodeAll(&d, junk)
	}
	if len(d.buf)-d.r > MaxFrameLen || cap(d.buf) > 4*len(junk) {
		t.Fatalf("decoder holds %d bytes (cap %d)", len(d.buf)-d.r, cap(d.buf))
	}
}
