package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"path/filepath"
	"time"
)

// The anchor is a small file beside the segments naming a record the
// journal is known to have made durable: its seq and hash. Segments prove
// what they hold, but not that nothing after them existed: the newest
// segment deleted, every segment deleted, or an older copy of the journal
// put back all left a journal that verified clean, with durable records
// gone. Open and Verify check the segments against the anchor.
//
// The anchor is rewritten atomically (ANCHOR.tmp, fdatasync, rename,
// directory fsync) and never names a record before it is durable: at every
// rollover (a record of the new segment), every AnchorEvery while records
// are written (by a goroutine of its own, off the append path), and at
// Close. So what it protects is every record older than the last anchor
// write: a crash loses nothing it names, and the newest second or so of
// records is protected only by the segments themselves, as before.
//
// It also names the first record retention keeps (see Retention): records
// before it were deleted on purpose, behind a checkpoint; a first segment
// starting later than that was deleted by something else, and is a loss
// like the newest one's. Retention moves it forward before it deletes.
//
// Layout (little endian, 80 bytes):
//
//	off 0   magic     [8]byte "SAGAANCH"
//	off 8   version   uint32  2
//	off 12  size      uint32  80
//	off 16  seq       uint64  a durable record (0: none yet)
//	off 24  hash      [32]byte its hash (GenesisHash() for seq 0)
//	off 56  first     uint64  the first record retention keeps (≥ 1)
//	off 64  crc32c    uint32  over bytes [0, 64)
//	off 68  zero      [12]byte must be zero
//
// Version 1 (64 bytes, written before retention existed: seq and hash as
// above, the CRC32C over [0, 56) at 56, zeros at 60-63) is still read, as
// first = 1.
const (
	anchorName    = "ANCHOR"
	anchorSize    = 80
	anchorMagic   = "SAGAANCH"
	anchorVersion = 2
	anchorV1Size  = 64
)

// DefaultAnchorEvery is the default Options.AnchorEvery.
const DefaultAnchorEvery = time.Second

// ErrLost is matched (errors.Is) by a *LossError.
var ErrLost = errors.New("wal: durable records lost")

// LossError reports that records the anchor says were durable are not in
// the journal, or differ: segments deleted, an older or another copy of the
// journal put in place, or the anchor itself damaged (then whether records
// were lost cannot be told). Open refuses such a journal unless
// Options.AcceptLoss, an operator's explicit decision.
type LossError struct {
	AnchorSeq uint64 // the record the anchor names (0 if the anchor is damaged)
	LastSeq   uint64 // the last record the segments hold
	Reason    string
}

func (e *LossError) Error() string {
	return fmt.Sprintf("wal: durable records lost: %s", e.Reason)
}

// Is makes errors.Is(err, ErrLost) true.
func (e *LossError) Is(target error) bool { return target == ErrLost }

type anchor struct {
	seq   uint64
	hash  [32]byte
	first uint64 // the first record retention keeps
}

func (a anchor) encode() []byte {
	b := make([]byte, anchorSize)
	copy(b, anchorMagic)
	binary.LittleEndian.PutUint32(b[8:], anchorVersion)
	binary.LittleEndian.PutUint32(b[12:], anchorSize)
	binary.LittleEndian.PutUint64(b[16:], a.seq)
	copy(b[24:56], a.hash[:])
	binary.LittleEndian.PutUint64(b[56:], max(a.first, 1))
	binary.LittleEndian.PutUint32(b[64:], crc32.Checksum(b[:64], castagnoli))
	return b
}

func decodeAnchor(b []byte) (anchor, error) {
	size, crcAt := anchorSize, 64
	if len(b) >= 16 && binary.LittleEndian.Uint32(b[8:]) == 1 {
		size, crcAt = anchorV1Size, 56
	}
	switch {
	case len(b) != size:
		return anchor{}, fmt.Errorf("%d bytes, want %d", len(b), size)
	case crc32.Checksum(b[:crcAt], castagnoli) != binary.LittleEndian.Uint32(b[crcAt:]):
		return anchor{}, errors.New("CRC32C mismatch")
	case string(b[:8]) != anchorMagic:
		return anchor{}, fmt.Errorf("bad magic %q", b[:8])
	case binary.LittleEndian.Uint32(b[8:]) != anchorVersion && size == anchorSize:
		return anchor{}, fmt.Errorf("unsupported version %d", binary.LittleEndian.Uint32(b[8:]))
	case int(binary.LittleEndian.Uint32(b[12:])) != size:
		return anchor{}, fmt.Errorf("unsupported size %d", binary.LittleEndian.Uint32(b[12:]))
	}
	for _, z := range b[crcAt+4 : size] {
		if z != 0 {
			return anchor{}, fmt.Errorf("bytes %d-%d are % x, not zero", crcAt+4, size-1, b[crcAt+4:size])
		}
	}
	a := anchor{seq: binary.LittleEndian.Uint64(b[16:]), first: 1}
	copy(a.hash[:], b[24:56])
	if size == anchorSize {
		if a.first = binary.LittleEndian.Uint64(b[56:]); a.first == 0 {
			return anchor{}, errors.New("first record 0")
		}
	}
	return a, nil
}

// readAnchor reads dir's anchor: nil without error if there is none (a new
// journal, or one written before anchors), an error wrapping the damage if
// it does not decode.
func readAnchor(fsys FS, dir string) (*anchor, error) {
	b, err := readWhole(fsys, filepath.Join(dir, anchorName), anchorSize) // too long: decode says so
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	a, err := decodeAnchor(b)
	if err != nil {
		return nil, &anchorDamage{err}
	}
	return &a, nil
}

// anchorDamage is an anchor file that does not decode.
type anchorDamage struct{ err error }

func (e *anchorDamage) Error() string { return "the anchor file is damaged: " + e.err.Error() }

// writeAnchor replaces dir's anchor with a, atomically.
func writeAnchor(fsys FS, dir string, a anchor) error {
	err := writeAtomic(fsys, dir, anchorName, func(f File) error {
		_, err := f.WriteAt(a.encode(), 0)
		return err
	})
	if err != nil {
		return fmt.Errorf("wal: writing the anchor: %w", err)
	}
	return nil
}

// checkAnchor compares the segments (walked into res, hashAt being the
// hash of record a.seq if the walk passed it) with the anchor read from the
// directory; nil if they agree or there is no anchor.
func checkAnchor(a *anchor, aerr error, res walkResult, hashAt *[32]byte) *LossError {
	var dmg *anchorDamage
	switch {
	case errors.As(aerr, &dmg):
		return &LossError{LastSeq: res.lastSeq, Reason: dmg.Error() + ": whether durable records were lost cannot be told"}
	case a == nil:
		return nil
	case a.seq > res.lastSeq:
		what := fmt.Sprintf("records %d to %d at least", res.lastSeq+1, a.seq)
		if a.seq == res.lastSeq+1 {
			what = fmt.Sprintf("record %d at least", a.seq)
		}
		return &LossError{AnchorSeq: a.seq, LastSeq: res.lastSeq,
			Reason: fmt.Sprintf("the anchor says record %d was durable, but the journal ends at record %d: %s are gone (a segment deleted, or an older copy of the journal)", a.seq, res.lastSeq, what)}
	case len(res.segs) > 0 && res.segs[0].first > a.first:
		return &LossError{AnchorSeq: a.seq, LastSeq: res.lastSeq,
			Reason: fmt.Sprintf("records %d to %d are gone: the first segment is %s, but retention kept records from %d on (a segment deleted by hand, or an older copy)", a.first, res.segs[0].first-1, res.segs[0].name, a.first)}
	case hashAt != nil && *hashAt != a.hash:
		return &LossError{AnchorSeq: a.seq, LastSeq: res.lastSeq,
			Reason: fmt.Sprintf("record %d is not the one the anchor names (its hash differs): another or an older copy of the journal", a.seq)}
	}
	return nil
}

// anchorer moves the anchor to the newest durable record every interval
// while records are written, off the append path.
func (l *Log) anchorer(every time.Duration) {
	defer close(l.anchorDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.anchorStop:
			return
		case <-t.C:
		}
		l.mu.Lock()
		a, failed := anchor{seq: l.durable, hash: l.durableH}, l.fatal != nil
		l.mu.Unlock()
		if !failed {
			l.anchorTo(a)
		}
	}
}

// anchorTo moves the anchor forward to the durable record a. A failure is
// counted (Stats.AnchorFailures), not fatal: the old anchor still names a
// durable record, so it only protects less.
func (l *Log) anchorTo(a anchor) {
	l.anchorMu.Lock()
	defer l.anchorMu.Unlock()
	if a.seq <= l.anchor.seq {
		return
	}
	a.first = l.anchor.first
	if err := writeAnchor(l.fsys, l.dir, a); err != nil {
		l.mu.Lock()
		l.stats.AnchorFailures++
		l.mu.Unlock()
		return
	}
	l.anchor = a
}
