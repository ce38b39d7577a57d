package wal

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"testing"
)

// The genesis hash is part of the on-disk format: pin its value, so that
// a change to genesisText (which would orphan every journal) is caught.
func TestGenesisHashIsPinned(t *testing.T) {
	const want = "e7faab1758495c0cf2e2718a4f384f504cabbff44b52a07c05743f32d1e0778d"
	g := GenesisHash()
	if got := hex.EncodeToString(g[:]); got != want {
		t.Fatalf("GenesisHash = %s, want %s", got, want)
	}
}

func encode(t testing.TB, prev [32]byte, seq uint64, typ uint8, payload []byte) ([]byte, [32]byte) {
	t.Helper()
	buf, h := appendFrame(nil, sha256.New(), &prev, seq, typ, payload)
	return buf, h
}

func TestFrameLayout(t *testing.T) {
	prev := GenesisHash()
	payload := []byte("hello")
	f, h := encode(t, prev, 7, 3, payload)
	if len(f) != frameOverhead+len(payload) {
		t.Fatalf("frame length %d", len(f))
	}
	if got := binary.LittleEndian.Uint32(f[4:]); got != 5 {
		t.Fatalf("length field %d", got)
	}
	if got := binary.LittleEndian.Uint64(f[8:]); got != 7 {
		t.Fatalf("seq field %d", got)
	}
	if f[16] != 3 || !bytes.Equal(f[17:22], payload) {
		t.Fatal("type/payload misplaced")
	}
	if h != ChainHash(prev, 7, 3, payload) || !bytes.Equal(f[22:], h[:]) {
		t.Fatal("hash is not ChainHash(prev, seq, type, payload)")
	}
	if crc32.Checksum(f[4:], crc32.MakeTable(crc32.Castagnoli)) != binary.LittleEndian.Uint32(f) {
		t.Fatal("CRC is not CRC32C over bytes 4..end")
	}
}

func TestFrameRoundTripAndChain(t *testing.T) {
	prev := GenesisHash()
	var log []byte
	sha := sha256.New()
	for seq := uint64(1); seq <= 50; seq++ {
		p := bytes.Repeat([]byte{byte(seq)}, int(seq*7%300))
		log, prev = appendFrame(log, sha, &prev, seq, uint8(seq%255+1), p)
	}
	ln := newLinker()
	prev = GenesisHash()
	for seq := uint64(1); seq <= 50; seq++ {
		rec, n, err := decodeFrame(log)
		if err != nil {
			t.Fatalf("seq %d: %v", seq, err)
		}
		if rec.Seq != seq || rec.Type != uint8(seq%255+1) || len(rec.Payload) != int(seq*7%300) {
			t.Fatalf("seq %d decoded as %+v", seq, rec)
		}
		if !ln.check(&prev, log[:n]) {
			t.Fatalf("seq %d: chain link rejected", seq)
		}
		wrong := prev
		wrong[0] ^= 1
		if ln.check(&wrong, log[:n]) {
			t.Fatalf("seq %d: link accepted with the wrong previous hash", seq)
		}
		prev = rec.Hash
		log = log[n:]
	}
	if len(log) != 0 {
		t.Fatal("bytes left over")
	}
}

func TestDecodeRejects(t *testing.T) {
	f, _ := encode(t, GenesisHash(), 1, 1, []byte("payload"))
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, errShortHeader},
		{"short header", f[:10], errShortHeader},
		{"zeros", make([]byte, 200), errZeroType},
		{"truncated", f[:len(f)-1], errBadLength},
		{"crc", func() []byte { b := bytes.Clone(f); b[20] ^= 0x10; return b }(), errBadCRC},
		{"length grown", func() []byte { b := bytes.Clone(f); b = append(b, 0); b[4]++; return b }(), errBadCRC},
		{"huge length", func() []byte { b := bytes.Clone(f); b[7] = 0xff; return b }(), errBadLength},
	}
	for _, c := range cases {
		if _, _, err := decodeFrame(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
}

// Every single-bit flip anywhere in a frame is rejected by decodeFrame
// (CRC32C detects all 1-bit errors; flips in the length are caught by the
// length check or the CRC).
func TestEverySingleBitFlipRejected(t *testing.T) {
	f, _ := encode(t, GenesisHash(), 99, 9, []byte("a record of moderate length"))
	for i := range len(f) * 8 {
		b := bytes.Clone(f)
		b[i/8] ^= 1 << (i % 8)
		if _, _, err := decodeFrame(b); err == nil {
			t.Fatalf("flip of bit %d accepted", i)
		}
	}
}

func TestSegHeader(t *testing.T) {
	h := segHeader{firstSeq: 1234, prevHash: GenesisHash()}
	b := make([]byte, segHeaderSize)
	h.encode(b)
	got, err := decodeSegHeader(b)
	if err != nil || got != h {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	// Every bit of the header, the reserved bytes 60-63 included:
	// unchecked, damage there would go unnoticed.
	for i := range segHeaderSize * 8 {
		c := bytes.Clone(b)
		c[i/8] ^= 1 << (i % 8)
		if _, err := decodeSegHeader(c); err == nil {
			t.Fatalf("header flip of bit %d (byte %d) accepted", i, i/8)
		}
	}
	if _, err := decodeSegHeader(b[:63]); err == nil {
		t.Fatal("short header accepted")
	}
}

func TestSegName(t *testing.T) {
	for _, seq := range []uint64{1, 0x3e8, 1 << 40, ^uint64(0)} {
		n := segName(seq)
		if len(n) != 20 {
			t.Fatalf("%q", n)
		}
		got, ok := parseSegName(n)
		if !ok || got != seq {
			t.Fatalf("parse %q = %d %v", n, got, ok)
		}
	}
	if segName(1) != "0000000000000001.wal" {
		t.Fatal(segName(1))
	}
	for _, bad := range []string{"1.wal", "000000000000000G.wal", "00000000000000A1.wal", "0000000000000001.wal.broken", "0000000000000001.wal.tmp", "next.wal.tmp"} {
		if _, ok := parseSegName(bad); ok {
			t.Fatalf("%q accepted", bad)
		}
	}
}

// FuzzDecodeRecord checks the frame decoder on arbitrary bytes: it must
// never panic, never accept a frame whose CRC or length field disagree
// with its bytes, and whatever it accepts must re-encode to the same bytes.
// Separately, frames built by the encoder from the fuzzed payload must
// decode to the same record, and must be rejected after any bit flip.
func FuzzDecodeRecord(f *testing.F) {
	valid, _ := appendFrame(nil, sha256.New(), new([32]byte), 1, 1, []byte("seed payload"))
	f.Add(valid, uint64(1), uint8(1), uint(0))
	f.Add(valid[:20], uint64(2), uint8(2), uint(17))
	f.Add(make([]byte, 64), uint64(0), uint8(0), uint(3))
	f.Add([]byte{}, uint64(1<<63), uint8(255), uint(1000))
	big, _ := appendFrame(nil, sha256.New(), new([32]byte), 42, 200, bytes.Repeat([]byte{0xab}, 300))
	f.Add(append(big, valid...), uint64(42), uint8(200), uint(123))
	torn := bytes.Clone(big)
	binary.LittleEndian.PutUint32(torn[4:], 1<<31)
	f.Add(torn, uint64(7), uint8(7), uint(7))

	f.Fuzz(func(t *testing.T, data []byte, seq uint64, typ uint8, flip uint) {
		// 1. Arbitrary bytes.
		rec, n, err := decodeFrame(data)
		if err == nil {
			if n < frameOverhead || n > len(data) {
				t.Fatalf("accepted frame length %d of %d bytes", n, len(data))
			}
			if int64(n) != frameLen(data) || len(rec.Payload) != n-frameOverhead {
				t.Fatalf("length field %d disagrees with accepted frame %d", frameLen(data), n)
			}
			if crc32.Checksum(data[4:n], castagnoli) != binary.LittleEndian.Uint32(data) {
				t.Fatal("accepted a frame whose CRC does not match")
			}
			if rec.Type == 0 {
				t.Fatal("accepted type 0")
			}
			re := rawFrame(rec)
			if !bytes.Equal(re, data[:n]) {
				t.Fatal("accepted frame does not re-encode to the same bytes")
			}
		}

		// 2. Encode then decode.
		if typ == 0 {
			typ = 1
		}
		prev := GenesisHash()
		enc, h := appendFrame(nil, sha256.New(), &prev, seq, typ, data)
		got, m, err := decodeFrame(enc)
		if err != nil || m != len(enc) || got.Seq != seq || got.Type != typ || got.Hash != h || !bytes.Equal(got.Payload, data) {
			t.Fatalf("round trip failed: %v", err)
		}
		if !newLinker().check(&prev, enc) {
			t.Fatal("round trip breaks the chain")
		}
		// 3. Any single bit flip is rejected.
		bit := flip % uint(len(enc)*8)
		enc[bit/8] ^= 1 << (bit % 8)
		if _, _, err := decodeFrame(enc); err == nil {
			t.Fatalf("bit flip %d accepted", bit)
		}
	})
}

// rawFrame re-encodes a decoded record with its stored hash (no chaining).
func rawFrame(r Record) []byte {
	b := make([]byte, frameOverhead+len(r.Payload))
	binary.LittleEndian.PutUint32(b[4:], uint32(len(r.Payload)))
	binary.LittleEndian.PutUint64(b[8:], r.Seq)
	b[16] = r.Type
	copy(b[17:], r.Payload)
	copy(b[17+len(r.Payload):], r.Hash[:])
	binary.LittleEndian.PutUint32(b, crc32.Checksum(b[4:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// BenchmarkAppendFrame is the CPU cost of one 150-byte record's frame:
// copy, SHA-256 chain hash, CRC32C. It is most of Enqueue's cost.
func BenchmarkAppendFrame(b *testing.B) {
	sha := sha256.New()
	prev := GenesisHash()
	buf := make([]byte, 0, 1<<20)
	p := make([]byte, 150)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if len(buf) > 1<<19 {
			buf = buf[:0]
		}
		buf, prev = appendFrame(buf, sha, &prev, uint64(i+1), 1, p)
	}
}
