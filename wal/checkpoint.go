package wal

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// A checkpoint is a caller's snapshot (an opaque payload: for the daemon,
// the engine's state) bound to the position of the last record it covers:
// that record's seq, hash and frame offset. Open starts from the newest
// checkpoint that verifies — it checks that the frame at the offset is that
// record, with that hash — and walks only the records after it, so start-up
// does not grow with the journal's length; Options.Retention may then
// delete (or archive) the segments wholly behind the oldest checkpoint kept.
//
// A checkpoint file is written atomically (name.tmp, fdatasync, rename,
// directory fsync) and named by the seq it covers, 16 lower-case hex digits
// and ".ckpt". The newest KeepCheckpoints are kept; so one damaged
// checkpoint leaves an older one to start from, which retention never
// outruns. Layout (little endian):
//
//	off 0   magic     [8]byte "SAGACKPT"
//	off 8   version   uint32  1
//	off 12  size      uint32  80 (header size)
//	off 16  seq       uint64  the last record covered (≥ 1)
//	off 24  hash      [32]byte its chain hash
//	off 56  offset    uint64  where its frame starts, in the segment holding it
//	off 64  length    uint32  payload length
//	off 68  crc32c    uint32  over bytes [0, 68)
//	off 72  zero      [8]byte must be zero
//	off 80  payload   [length]byte
//	then    sha256    [32]byte over bytes [0, 80+length)
//
// The file is exactly 80+length+32 bytes.
const (
	ckptExt        = ".ckpt"
	ckptMagic      = "SAGACKPT"
	ckptVersion    = 1
	ckptHeaderSize = 80
	// KeepCheckpoints is how many checkpoint files are kept.
	KeepCheckpoints = 2
	// maxCheckpointPayload bounds what a checkpoint may carry (and so what
	// reading a damaged length can make a reader allocate).
	maxCheckpointPayload = 256 << 20
)

// Position names a durable record: its seq and hash, and the offset of its
// frame in the segment that holds it (the last segment whose first seq is
// at most Seq). The zero Position is the start of the journal, before
// record 1.
type Position struct {
	Seq    uint64
	Hash   [32]byte
	Offset int64
}

// Checkpoint is a checkpoint file read back.
type Checkpoint struct {
	Name    string
	At      Position
	Payload []byte
}

// CheckpointDamage is a checkpoint file that cannot be used: it does not
// decode, or it does not match the journal.
type CheckpointDamage struct {
	Name   string
	Reason string
}

func (d CheckpointDamage) String() string { return d.Name + ": " + d.Reason }

func ckptName(seq uint64) string {
	s := strconv.FormatUint(seq, 16)
	return strings.Repeat("0", segNameDigits-len(s)) + s + ckptExt
}

func parseCkptName(name string) (uint64, bool) {
	base, ok := strings.CutSuffix(name, ckptExt)
	if !ok {
		return 0, false
	}
	return parseSegName(base + segExt)
}

func encodeCheckpoint(at Position, payload []byte) []byte {
	b := make([]byte, ckptHeaderSize, ckptHeaderSize+len(payload)+sha256.Size)
	copy(b, ckptMagic)
	binary.LittleEndian.PutUint32(b[8:], ckptVersion)
	binary.LittleEndian.PutUint32(b[12:], ckptHeaderSize)
	binary.LittleEndian.PutUint64(b[16:], at.Seq)
	copy(b[24:56], at.Hash[:])
	binary.LittleEndian.PutUint64(b[56:], uint64(at.Offset))
	binary.LittleEndian.PutUint32(b[64:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[68:], crc32.Checksum(b[:68], castagnoli))
	b = append(b, payload...)
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

// decodeCheckpoint checks and parses a whole checkpoint file.
func decodeCheckpoint(b []byte) (Position, []byte, error) {
	if len(b) < ckptHeaderSize+sha256.Size {
		return Position{}, nil, fmt.Errorf("%d bytes, shorter than a checkpoint", len(b))
	}
	if crc32.Checksum(b[:68], castagnoli) != binary.LittleEndian.Uint32(b[68:]) {
		return Position{}, nil, errors.New("header CRC32C mismatch")
	}
	if string(b[:8]) != ckptMagic {
		return Position{}, nil, fmt.Errorf("bad magic %q", b[:8])
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != ckptVersion {
		return Position{}, nil, fmt.Errorf("unsupported version %d", v)
	}
	if s := binary.LittleEndian.Uint32(b[12:]); s != ckptHeaderSize {
		return Position{}, nil, fmt.Errorf("unsupported header size %d", s)
	}
	for _, z := range b[72:80] {
		if z != 0 {
			return Position{}, nil, fmt.Errorf("header bytes 72-79 are % x, not zero", b[72:80])
		}
	}
	n := int64(binary.LittleEndian.Uint32(b[64:]))
	if int64(len(b)) != ckptHeaderSize+n+sha256.Size {
		return Position{}, nil, fmt.Errorf("%d bytes, but the header says %d", len(b), ckptHeaderSize+n+sha256.Size)
	}
	body := b[:ckptHeaderSize+n]
	if sum := sha256.Sum256(body); string(sum[:]) != string(b[ckptHeaderSize+n:]) {
		return Position{}, nil, errors.New("SHA-256 mismatch")
	}
	at := Position{Seq: binary.LittleEndian.Uint64(b[16:]), Offset: int64(binary.LittleEndian.Uint64(b[56:]))}
	copy(at.Hash[:], b[24:56])
	if at.Seq == 0 || at.Offset < segHeaderSize {
		return Position{}, nil, fmt.Errorf("position seq %d offset %d is not a record's", at.Seq, at.Offset)
	}
	return at, body[ckptHeaderSize:], nil
}

// readCheckpoints reads every checkpoint file in dir, newest first. Files
// that do not decode (or whose name disagrees with their seq) are returned
// as damage, not as an error: the error is for I/O only.
func readCheckpoints(fsys FS, dir string) (good []Checkpoint, bad []CheckpointDamage, err error) {
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	for _, n := range names {
		seq, ok := parseCkptName(n)
		if !ok {
			continue
		}
		b, err := readWhole(fsys, filepath.Join(dir, n), ckptHeaderSize+maxCheckpointPayload+sha256.Size)
		if err != nil {
			return nil, nil, err
		}
		at, payload, derr := decodeCheckpoint(b)
		switch {
		case derr != nil:
			bad = append(bad, CheckpointDamage{n, derr.Error()})
		case at.Seq != seq:
			bad = append(bad, CheckpointDamage{n, fmt.Sprintf("covers record %d, but its name says %d", at.Seq, seq)})
		default:
			good = append(good, Checkpoint{Name: n, At: at, Payload: payload})
		}
	}
	slices.SortFunc(good, func(a, b Checkpoint) int { return cmp.Compare(b.At.Seq, a.At.Seq) })
	return good, bad, nil
}

// readWhole reads a small file whole, refusing one larger than limit
// (reported as a file of limit+1 bytes, which no decoder accepts).
func readWhole(fsys FS, name string, limit int64) ([]byte, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	size = min(size, limit+1)
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, err
	}
	return b, nil
}

// Checkpoints reads dir's checkpoint files without changing anything, for
// tools: the ones that decode, newest first, and the damaged ones. Whether
// a checkpoint matches the segments is Verify's (and Open's) question.
func Checkpoints(dir string, opt Options) ([]Checkpoint, []CheckpointDamage, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, nil, err
	}
	return readCheckpoints(opt.FS, dir)
}

// WriteCheckpoint stores payload as the checkpoint covering every record
// up to and including at, which must be durable (at.Seq ≤ DurableSeq) and
// come from this journal (a Position a Follow returned). It is written
// atomically; then checkpoints beyond the newest KeepCheckpoints are
// deleted, and then Options.Retention is applied (see RetentionReport).
// It is meant for one goroutine at a time, off the append path: the
// writer is not involved.
func (l *Log) WriteCheckpoint(at Position, payload []byte) (RetentionReport, error) {
	if at.Seq == 0 || at.Seq > l.DurableSeq() {
		return RetentionReport{}, fmt.Errorf("wal: checkpoint at record %d, but the journal is durable up to %d", at.Seq, l.DurableSeq())
	}
	if len(payload) > maxCheckpointPayload {
		return RetentionReport{}, fmt.Errorf("wal: checkpoint payload of %d bytes, more than %d", len(payload), maxCheckpointPayload)
	}
	l.ckptMu.Lock()
	defer l.ckptMu.Unlock()
	name := ckptName(at.Seq)
	err := writeAtomic(l.fsys, l.dir, name, func(f File) error {
		_, err := f.WriteAt(encodeCheckpoint(at, payload), 0)
		return err
	})
	if err != nil {
		return RetentionReport{}, fmt.Errorf("wal: writing checkpoint %s: %w", name, err)
	}
	l.mu.Lock()
	l.stats.Checkpoints++
	l.stats.CheckpointSeq = at.Seq
	l.mu.Unlock()
	return l.retain()
}

// matchPosition checks that the journal holds the record at: the frame at
// at.Offset in the segment holding at.Seq is that record, with that hash.
// gone: there is no such record (its segment is missing, or the journal
// ends before it); differs: another record (or damage) is there.
func matchPosition(fsys FS, dir string, segs []segRef, at Position) (gone, differs bool, err error) {
	i := -1
	for j, s := range segs {
		if s.first <= at.Seq {
			i = j
		}
	}
	if i < 0 {
		return true, false, nil
	}
	f, err := fsys.OpenFile(filepath.Join(dir, segs[i].name), os.O_RDONLY, 0)
	if err != nil {
		return false, false, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return false, false, err
	}
	var rd segReader
	rd.reset(f, size)
	if at.Offset >= size {
		return true, false, nil
	}
	rec, _, err := rd.frameAt(at.Offset)
	switch {
	case err != nil && !isFrameError(err):
		return false, false, err
	case err != nil:
		lnz, lerr := rd.lastNonZero(at.Offset)
		if lerr != nil {
			return false, false, lerr
		}
		return lnz < 0, lnz >= 0, nil
	case rec.Seq != at.Seq || rec.Hash != at.Hash:
		return false, true, nil
	}
	return false, false, nil
}

// startPoint is where Open (and Verify) start: the newest checkpoint that
// matches the journal, or the journal's start if none does, and the
// checkpoints that decode but do not match (durable records they vouch for
// are gone or differ: a loss).
type startPoint struct {
	ckpt     *Checkpoint
	damaged  []CheckpointDamage // do not decode: skipped, nothing is lost by it
	mismatch []CheckpointDamage // decode but the journal lacks or differs at their record
	segs     []segRef
}

func findStart(fsys FS, dir string) (startPoint, error) {
	var sp startPoint
	good, bad, err := readCheckpoints(fsys, dir)
	if err != nil {
		return sp, err
	}
	sp.damaged = bad
	if sp.segs, err = listSegments(fsys, dir); err != nil {
		return sp, err
	}
	for i := range good {
		c := &good[i]
		gone, differs, err := matchPosition(fsys, dir, sp.segs, c.At)
		if err != nil {
			return sp, err
		}
		switch {
		case gone:
			sp.mismatch = append(sp.mismatch, CheckpointDamage{c.Name, fmt.Sprintf("it covers record %d, which the journal no longer holds (a segment deleted, or an older copy of the journal)", c.At.Seq)})
		case differs:
			sp.mismatch = append(sp.mismatch, CheckpointDamage{c.Name, fmt.Sprintf("it covers record %d, but the journal's record there is another one: another or an older copy of the journal", c.At.Seq)})
		case sp.ckpt == nil:
			sp.ckpt = c
		}
	}
	return sp, nil
}

// walkOpts returns the options of a walk from sp (hashAt: the anchor's
// record, 0 if none).
func (sp *startPoint) walkOpts(hashAt uint64) walkOpts {
	wo := walkOpts{from: 1, hashAt: hashAt}
	if sp.ckpt != nil {
		wo.base, wo.from = &sp.ckpt.At, sp.ckpt.At.Seq+1
	}
	return wo
}

// loss is the LossError a mismatching checkpoint means, or one for
// segments missing at the start with no checkpoint standing in for them;
// nil if neither.
func (sp *startPoint) loss(lastSeq uint64) *LossError {
	if len(sp.mismatch) > 0 {
		m := sp.mismatch[0]
		seq, _ := parseCkptName(m.Name)
		return &LossError{AnchorSeq: seq, LastSeq: lastSeq, Reason: "checkpoint " + m.Name + ": " + m.Reason}
	}
	if sp.ckpt == nil && len(sp.segs) > 0 && sp.segs[0].first > 1 {
		return &LossError{LastSeq: lastSeq, Reason: fmt.Sprintf("records 1 to %d are not in the journal (its first segment is %s) and no checkpoint that matches the journal stands in for them", sp.segs[0].first-1, sp.segs[0].name)}
	}
	return nil
}

// Follow calls fn for every durable record after from, in order, verifying
// the chain from from on, and returns the position of the last one (from
// itself if there was none). The zero Position follows from the start of
// the journal. It reads the segment files, beside the writer, and is meant
// for the goroutine that keeps a checkpoint's state: not the append path.
func (l *Log) Follow(from Position, fn func(Record) error) (Position, error) {
	upTo := l.DurableSeq()
	if from.Seq >= upTo {
		return from, nil
	}
	wo := walkOpts{from: 1, fn: fn, stopBefore: upTo + 1, trustFirst: true}
	if from.Seq > 0 {
		wo.base, wo.from = &from, from.Seq+1
	}
	res, err := walk(l.fsys, l.dir, wo)
	switch {
	case err != nil:
		return from, err
	case res.baseGone || res.baseDiffers:
		return from, fmt.Errorf("wal: Follow: record %d is not where its position says", from.Seq)
	case res.corrupt != nil:
		return from, res.corrupt
	case res.lastSeq < upTo:
		return from, fmt.Errorf("wal: Follow: the journal ended at record %d, before the durable record %d", res.lastSeq, upTo)
	}
	return Position{Seq: res.lastSeq, Hash: res.lastHash, Offset: res.lastOff}, nil
}

// setAsideCheckpoints renames checkpoints an accepted loss made wrong to
// NAME.broken (kept, as evidence), so that the next Open does not find the
// same loss again.
func setAsideCheckpoints(fsys FS, dir string, cs []CheckpointDamage) error {
	for _, c := range cs {
		bname, err := brokenName(fsys, dir, c.Name)
		if err != nil {
			return err
		}
		if err := fsys.Rename(filepath.Join(dir, c.Name), filepath.Join(dir, bname)); err != nil {
			return err
		}
	}
	if len(cs) > 0 {
		return fsys.SyncDir(dir)
	}
	return nil
}
