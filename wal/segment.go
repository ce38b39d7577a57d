package wal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"strconv"
	"strings"
)

// Segment header layout (little endian), see doc.go:
//
//	off 0   magic     [8]byte "SAGAWAL\x00"
//	off 8   version   uint32  1
//	off 12  hdrSize   uint32  64
//	off 16  firstSeq  uint64  seq of the first record in the segment
//	off 24  prevHash  [32]byte hash of record firstSeq-1 (genesis for 1)
//	off 56  crc32c    uint32  over bytes [0, 56)
//	off 60  zero      [4]byte  must be zero (outside the CRC, checked on its own)
const (
	segHeaderSize = 64
	segVersion    = 1
	segMagic      = "SAGAWAL\x00"
	segExt        = ".wal"
	tmpExt        = ".tmp"
	brokenExt     = ".broken"
	segNameDigits = 16
)

// segHeader is the decoded header of a segment file.
type segHeader struct {
	firstSeq uint64
	prevHash [32]byte
}

func (h *segHeader) encode(b []byte) {
	clear(b[:segHeaderSize])
	copy(b, segMagic)
	binary.LittleEndian.PutUint32(b[8:], segVersion)
	binary.LittleEndian.PutUint32(b[12:], segHeaderSize)
	binary.LittleEndian.PutUint64(b[16:], h.firstSeq)
	copy(b[24:56], h.prevHash[:])
	binary.LittleEndian.PutUint32(b[56:], crc32.Checksum(b[:56], castagnoli))
}

// decodeSegHeader checks and parses a segment header. The CRC comes first
// so that a damaged header is reported as damage, not as a wrong version.
func decodeSegHeader(b []byte) (segHeader, error) {
	if len(b) < segHeaderSize {
		return segHeader{}, fmt.Errorf("segment shorter than its %d-byte header", segHeaderSize)
	}
	if crc32.Checksum(b[:56], castagnoli) != binary.LittleEndian.Uint32(b[56:]) {
		return segHeader{}, fmt.Errorf("segment header CRC32C mismatch")
	}
	if string(b[:8]) != segMagic {
		return segHeader{}, fmt.Errorf("bad segment magic %q", b[:8])
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != segVersion {
		return segHeader{}, fmt.Errorf("unsupported segment version %d", v)
	}
	if s := binary.LittleEndian.Uint32(b[12:]); s != segHeaderSize {
		return segHeader{}, fmt.Errorf("unsupported segment header size %d", s)
	}
	// Outside the CRC, so checked on their own: version 1 writes zeros.
	if z := b[60:64]; z[0]|z[1]|z[2]|z[3] != 0 {
		return segHeader{}, fmt.Errorf("segment header bytes 60-63 are % x, not zero", z)
	}
	h := segHeader{firstSeq: binary.LittleEndian.Uint64(b[16:])}
	copy(h.prevHash[:], b[24:56])
	return h, nil
}

// segName is the file name of the segment whose first record is seq:
// 16 lower-case hex digits, so names sort in seq order.
func segName(seq uint64) string {
	s := strconv.FormatUint(seq, 16)
	return strings.Repeat("0", segNameDigits-len(s)) + s + segExt
}

// parseSegName returns the first seq encoded in a segment file name.
func parseSegName(name string) (uint64, bool) {
	base, ok := strings.CutSuffix(name, segExt)
	if !ok || len(base) != segNameDigits {
		return 0, false
	}
	for _, c := range base {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return 0, false // upper case or anything else is not ours
		}
	}
	seq, err := strconv.ParseUint(base, 16, 64)
	return seq, err == nil
}

// segRef names a segment file found in the directory.
type segRef struct {
	name  string
	first uint64
}

// listSegments returns the segment files of dir in seq order. Other files
// (.broken copies, temporaries, anything foreign) are ignored.
func listSegments(fsys FS, dir string) ([]segRef, error) {
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var segs []segRef
	for _, n := range names {
		if first, ok := parseSegName(n); ok {
			segs = append(segs, segRef{name: n, first: first})
		}
	}
	slices.SortFunc(segs, func(a, b segRef) int {
		switch {
		case a.first < b.first:
			return -1
		case a.first > b.first:
			return 1
		}
		return 0
	})
	return segs, nil
}

// Present reports whether dir holds a journal: it exists and has at least
// one segment file. Tools that take over an existing journal (recover,
// repair) ask first, so that a mistyped path fails instead of starting a
// new, empty journal there. fsys nil means OSFS{}.
func Present(fsys FS, dir string) (bool, error) {
	if fsys == nil {
		fsys = OSFS{}
	}
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, n := range names {
		if _, ok := parseSegName(n); ok {
			return true, nil
		}
	}
	return false, nil
}
