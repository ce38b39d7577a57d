package wal

import (
	"bytes"
	"testing"
)

// The small files beside the segments are decoded from whatever the disk
// holds: a damaged one is refused with an error, never a panic, and what
// decodes encodes back to the same bytes (one layout, no slack).

func FuzzDecodeCheckpoint(f *testing.F) {
	at := Position{Seq: 40, Offset: 1000}
	at.Hash[0] = 7
	f.Add(encodeCheckpoint(at, []byte("state")))
	f.Add(encodeCheckpoint(Position{Seq: 1, Offset: segHeaderSize}, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		at, payload, err := decodeCheckpoint(b)
		if err != nil {
			return
		}
		if again := encodeCheckpoint(at, payload); !bytes.Equal(again, b) {
			t.Fatalf("decoded %+v and %d payload bytes, which encode to other bytes", at, len(payload))
		}
	})
}

func FuzzDecodeAnchor(f *testing.F) {
	f.Add(anchor{seq: 3, first: 1}.encode())
	f.Add(anchor{seq: 1 << 40, first: 1 << 30}.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeAnchor(b)
		if err != nil {
			return
		}
		if a.first == 0 {
			t.Fatalf("decoded an anchor with first record 0: %+v", a)
		}
		if len(b) == anchorSize && !bytes.Equal(a.encode(), b) {
			t.Fatalf("decoded %+v, which encodes to other bytes", a)
		}
	})
}

func FuzzDecodeCutNote(f *testing.F) {
	n := cutNote{segment: "0000000000000001.wal", offset: 4096, bytes: 1200, reason: "torn tail"}
	f.Add(n.encode())
	f.Add([]byte(cutNoteMagic + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := decodeCutNote(b)
		if err != nil {
			return
		}
		if _, err := decodeCutNote(n.encode()); err != nil {
			t.Fatalf("decoded %+v, whose encoding does not decode: %v", n, err)
		}
	})
}
