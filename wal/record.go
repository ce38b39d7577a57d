package wal

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"hash/crc32"
)

// Record is one journal entry.
type Record struct {
	Seq     uint64   // 1-based, contiguous across segments
	Type    uint8    // caller-defined; 0 is reserved (never valid)
	Payload []byte   // opaque to the journal
	Hash    [32]byte // SHA-256 chain hash, see the package doc
}

// Frame layout (little endian), see doc.go:
//
//	off 0   crc32c  uint32  Castagnoli CRC over bytes [4, frameLen)
//	off 4   length  uint32  payload length L
//	off 8   seq     uint64
//	off 16  type    uint8   never 0
//	off 17  payload [L]byte
//	off 17+L hash   [32]byte
const (
	frameHeaderSize = 17
	frameOverhead   = frameHeaderSize + sha256.Size // 49: a frame is frameOverhead+L bytes

	offCRC  = 0
	offLen  = 4
	offSeq  = 8
	offType = 16
)

// genesisText is hashed to give the hash that record 1 chains from. It is
// versioned so a future incompatible chain cannot be confused with this one.
const genesisText = "saga-supervisor wal genesis v1"

// GenesisHash returns SHA-256("saga-supervisor wal genesis v1"), the
// "previous hash" of record 1. It is a function rather than a variable so
// no caller can change it.
func GenesisHash() [32]byte { return sha256.Sum256([]byte(genesisText)) }

// castagnoli is the CRC32C table; crc32 uses the CPU instruction when it
// exists. It is never written after initialisation.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ChainHash returns the hash a record with this seq, type and payload has
// when it follows a record whose hash is prev:
// SHA-256(prev || seq as 8 bytes little endian || type || payload).
func ChainHash(prev [32]byte, seq uint64, typ uint8, payload []byte) [32]byte {
	h := sha256.New()
	var hdr [9]byte
	binary.LittleEndian.PutUint64(hdr[:8], seq)
	hdr[8] = typ
	h.Write(prev[:])
	h.Write(hdr[:])
	h.Write(payload)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// appendFrame appends the frame of (seq, typ, payload) chained after prev to
// dst and returns the grown slice and the record's hash. It is the hot path
// of Enqueue: the frame is built in place so the seq/type/payload bytes
// already in dst are hashed directly, and sha (a reusable digest, guarded by
// the caller) avoids allocating. The payload is copied, so the caller may
// reuse it at once.
func appendFrame(dst []byte, sha hash.Hash, prev *[32]byte, seq uint64, typ uint8, payload []byte) ([]byte, [32]byte) {
	n := len(dst)
	total := frameOverhead + len(payload)
	if cap(dst)-n < total {
		grown := make([]byte, n, 2*cap(dst)+total)
		copy(grown, dst)
		dst = grown
	}
	dst = dst[:n+total]
	f := dst[n:]
	binary.LittleEndian.PutUint32(f[offLen:], uint32(len(payload)))
	binary.LittleEndian.PutUint64(f[offSeq:], seq)
	f[offType] = typ
	end := frameHeaderSize + copy(f[frameHeaderSize:], payload)
	sha.Reset()
	sha.Write(prev[:])
	sha.Write(f[offSeq:end])
	sha.Sum(f[end:end]) // writes the 32 hash bytes in place: capacity is there
	binary.LittleEndian.PutUint32(f[offCRC:], crc32.Checksum(f[offLen:], castagnoli))
	var h [32]byte
	copy(h[:], f[end:])
	return dst, h
}

// frameError says why bytes are not a self-consistent frame.
type frameError string

func (e frameError) Error() string { return string(e) }

const (
	errShortHeader frameError = "truncated frame header"
	errZeroType    frameError = "record type 0 (zero-filled or torn)"
	errBadLength   frameError = "frame length exceeds the available bytes"
	errBadCRC      frameError = "frame CRC32C mismatch"
)

// frameLen returns the whole frame length announced by the header in b
// (len(b) >= frameHeaderSize).
func frameLen(b []byte) int64 {
	return frameOverhead + int64(binary.LittleEndian.Uint32(b[offLen:]))
}

// decodeFrame parses the frame at the start of b. It checks only what a
// frame can say about itself — header present, type not 0, length within b,
// CRC32C — and not the hash chain, which needs the previous record (see
// checkLink). On success the Record's Payload aliases b and n is the frame
// length.
func decodeFrame(b []byte) (rec Record, n int, err error) {
	if len(b) < frameHeaderSize {
		return Record{}, 0, errShortHeader
	}
	if b[offType] == 0 {
		return Record{}, 0, errZeroType
	}
	total := frameLen(b)
	if total > int64(len(b)) {
		return Record{}, 0, errBadLength
	}
	n = int(total)
	if crc32.Checksum(b[offLen:n], castagnoli) != binary.LittleEndian.Uint32(b[offCRC:]) {
		return Record{}, 0, errBadCRC
	}
	rec.Seq = binary.LittleEndian.Uint64(b[offSeq:])
	rec.Type = b[offType]
	rec.Payload = b[frameHeaderSize : n-sha256.Size : n-sha256.Size]
	copy(rec.Hash[:], b[n-sha256.Size:n])
	return rec, n, nil
}

// linker verifies chain hashes without allocating per record: the digest
// and the output buffer live on the heap once, and the hashed bytes are
// taken straight from the frame (seq, type and payload are contiguous).
type linker struct {
	sha hash.Hash
	sum []byte
}

func newLinker() *linker { return &linker{sha: sha256.New(), sum: make([]byte, 0, sha256.Size)} }

// check reports whether frame (a frame accepted by decodeFrame) hashes to
// its stored hash when chained after prev.
func (k *linker) check(prev *[32]byte, frame []byte) bool {
	n := len(frame)
	k.sha.Reset()
	k.sha.Write(prev[:])
	k.sha.Write(frame[offSeq : n-sha256.Size])
	k.sum = k.sha.Sum(k.sum[:0])
	return string(k.sum) == string(frame[n-sha256.Size:])
}
