package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// readWindow is how much of a segment the reader holds at once. Reading is
// streaming: memory is one window (grown only for a frame larger than it),
// never a whole segment.
const readWindow = 64 << 10

// segReader serves byte ranges of one segment file from a reusable window.
type segReader struct {
	f     File
	size  int64
	buf   []byte
	start int64 // file offset of buf[0]
	n     int   // valid bytes in buf
}

func (r *segReader) reset(f File, size int64) {
	r.f, r.size, r.start, r.n = f, size, 0, 0
}

// at returns the n bytes at off, or fewer if the file ends first. The slice
// is valid until the next call.
func (r *segReader) at(off int64, n int64) ([]byte, error) {
	if rem := r.size - off; n > rem {
		n = max(rem, 0)
	}
	if n <= 0 {
		return nil, nil
	}
	if off >= r.start && off+n <= r.start+int64(r.n) {
		i := off - r.start
		return r.buf[i : i+n], nil
	}
	want := min(max(n, readWindow), r.size-off)
	if int64(cap(r.buf)) < want {
		r.buf = make([]byte, want)
	}
	r.buf = r.buf[:want]
	m, err := r.f.ReadAt(r.buf, off)
	if int64(m) < want {
		r.n = 0
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF // the file shrank under us
		}
		return nil, err
	}
	r.start, r.n = off, m
	return r.buf[:n], nil
}

// zeroBlock is compared against to skip zero regions quickly.
var zeroBlock [4096]byte

// lastNonZero returns the offset of the last non-zero byte in [from, size),
// or -1 if that range is all zeros. It reads backwards because segments are
// preallocated: the zero region after the data is usually the larger part.
func (r *segReader) lastNonZero(from int64) (int64, error) {
	for end := r.size; end > from; {
		start := max(from, end-readWindow)
		b, err := r.at(start, end-start)
		if err != nil {
			return 0, err
		}
		// Skip all-zero blocks with a vectorised comparison; only a block
		// holding data is searched byte by byte. Opening a 16 MiB segment
		// spends most of its time here, so this is the difference between
		// ~1 GB/s and memory speed.
		for hi := len(b); hi > 0; {
			lo := max(0, hi-len(zeroBlock))
			if !bytes.Equal(b[lo:hi], zeroBlock[:hi-lo]) {
				for i := hi - 1; i >= lo; i-- {
					if b[i] != 0 {
						return start + int64(i), nil
					}
				}
			}
			hi = lo
		}
		end = start
	}
	return -1, nil
}

// frameAt reads and self-checks the frame at off. It returns the raw frame
// bytes (valid until the next read) alongside the decoded record.
func (r *segReader) frameAt(off int64) (Record, []byte, error) {
	hb, err := r.at(off, frameHeaderSize)
	if err != nil {
		return Record{}, nil, err
	}
	if len(hb) < frameHeaderSize {
		return Record{}, nil, errShortHeader
	}
	if hb[offType] == 0 {
		return Record{}, nil, errZeroType
	}
	total := frameLen(hb)
	if total > r.size-off {
		return Record{}, nil, errBadLength
	}
	fb, err := r.at(off, total)
	if err != nil {
		return Record{}, nil, err
	}
	rec, _, err := decodeFrame(fb)
	return rec, fb, err
}

// findFrameAfter scans [from, size) byte by byte for a self-consistent frame
// (CRC valid) whose seq is after lastSeq. Finding one proves that the bad
// bytes before it are not a torn tail: the writer only ever writes frames in
// seq order, so a later frame means the earlier bytes were written too and
// have since been damaged. Seqs are bounded by how many frames could still
// fit, which keeps random garbage from triggering CRC checks of huge spans.
func (r *segReader) findFrameAfter(from int64, lastSeq uint64) (off int64, seq uint64, found bool, err error) {
	maxSeq := lastSeq + 1 + uint64(max(r.size-from, 0)/frameOverhead)
	for p := from; p+frameHeaderSize <= r.size; {
		b, err := r.at(p, readWindow)
		if err != nil {
			return 0, 0, false, err
		}
		j := 0
		for ; j+frameHeaderSize <= len(b); j++ {
			if b[j+offType] == 0 {
				continue
			}
			s := binary.LittleEndian.Uint64(b[j+offSeq:])
			if s <= lastSeq || s > maxSeq || frameLen(b[j:]) > r.size-(p+int64(j)) {
				continue
			}
			break
		}
		if j+frameHeaderSize > len(b) {
			p += max(int64(j), 1) // every start in b that has a whole header was tried
			continue
		}
		q := p + int64(j)
		if rec, _, ferr := r.frameAt(q); ferr == nil {
			return q, rec.Seq, true, nil
		} else if !isFrameError(ferr) {
			return 0, 0, false, ferr
		}
		p = q + 1
	}
	return 0, 0, false, nil
}

func isFrameError(err error) bool {
	var fe frameError
	return errors.As(err, &fe)
}

// walkResult is what a pass over the journal found.
type walkResult struct {
	segs     []segRef // every segment file in the directory, in order
	segments int      // segments examined
	records  uint64   // valid records seen (including ones before fromSeq)
	lastSeq  uint64
	lastHash [32]byte

	// Position just after the last valid record (or after the header of
	// the segment it stopped in): where the next frame goes.
	seg     int // index into segs, -1 when there are no segments
	off     int64
	segSize int64

	corrupt *CorruptionError // set: the journal must not be opened
	torn    *TailCut         // set: bytes to cut at (segs[seg], off)
	hashAt  *[32]byte        // the hash of record opts.hashAt, if the walk verified it
	lastOff int64            // where the last valid record's frame starts (in segs[seg])
	// baseGone: the walk from opts.base found no such record (the
	// segment holding it is missing, or the journal ends before it);
	// baseDiffers: the frame there is another record. Either way the
	// walk stopped at once (see walkOpts.base).
	baseGone, baseDiffers bool
}

// walkOpts controls a walk.
type walkOpts struct {
	from uint64 // deliver records from this seq; also skip whole segments before it
	// stopBefore, when non-zero, stops the walk once every record before
	// it has been verified (used by TruncateAt).
	stopBefore uint64
	fn         func(Record) error // may be nil
	hashAt     uint64             // non-zero: keep this record's hash (walkResult.hashAt), to check the anchor
	// base, if set, starts the walk at a known record instead of the
	// start: the frame at base.Offset in the segment holding base.Seq must
	// be that record, with that hash; the walk goes on after it (from is
	// then ignored). A checkpoint's position is a base.
	base *Position
	// trustFirst lets the first segment there is start after seq 1, its
	// (CRC-checked) header then anchoring the chain: the segments before
	// it were deleted by retention behind a checkpoint. Scan always trusts
	// it; Verify and Open only when a checkpoint stands in for them.
	trustFirst bool
}

// walker carries the state of one pass over the journal.
type walker struct {
	fsys FS
	dir  string
	opts walkOpts
	rd   segReader
	ln   *linker
	res  walkResult
}

// walk verifies the journal in dir from the start (or from the segment
// holding opts.from) and classifies how it ends: cleanly, at a torn tail,
// or at corruption. Errors returned are I/O errors (or fn's error); damage
// is reported in the result.
func walk(fsys FS, dir string, opts walkOpts) (walkResult, error) {
	w := &walker{fsys: fsys, dir: dir, opts: opts, ln: newLinker()}
	w.res.seg = -1
	w.res.lastHash = GenesisHash()
	segs, err := listSegments(fsys, dir)
	w.res.segs = segs
	if err != nil {
		return w.res, err
	}
	start := 0
	if opts.base != nil {
		start = -1
		for i, s := range segs {
			if s.first <= opts.base.Seq {
				start = i
			}
		}
		if start < 0 {
			w.res.baseGone = true
			return w.res, nil
		}
	} else if opts.from > 1 {
		// Records before the segment holding from are not re-verified: that
		// is Verify's and Open's job, and it keeps Scan proportional to what
		// it delivers. The start segment's header (CRC-checked) anchors the
		// chain instead.
		for i, s := range segs {
			if s.first <= opts.from {
				start = i
			}
		}
	}
	for i := start; i < len(segs); i++ {
		f, err := fsys.OpenFile(filepath.Join(dir, segs[i].name), os.O_RDONLY, 0)
		if err != nil {
			return w.res, err
		}
		done, err := w.segment(f, i, start)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil || done {
			return w.res, err
		}
	}
	return w.res, nil
}

// fail records corruption at (seg, off); the walk ends there.
func (w *walker) fail(seg string, off int64, reason string) (bool, error) {
	w.res.corrupt = &CorruptionError{Segment: seg, Offset: off, Seq: w.res.lastSeq + 1, Reason: reason}
	return true, nil
}

// segment verifies segment i (open as f); done reports that the walk ends
// here (damage, a torn tail, or opts.stopBefore reached).
func (w *walker) segment(f File, i, start int) (done bool, err error) {
	res, rd, s := &w.res, &w.rd, w.res.segs[i]
	size, err := f.Size()
	if err != nil {
		return true, err
	}
	rd.reset(f, size)
	res.segments++
	hb, err := rd.at(0, segHeaderSize)
	if err != nil {
		return true, err
	}
	hdr, herr := decodeSegHeader(hb)
	switch {
	case herr != nil:
		return w.fail(s.name, 0, herr.Error())
	case hdr.firstSeq != s.first:
		return w.fail(s.name, 0, fmt.Sprintf("segment header says first seq %d, file name says %d", hdr.firstSeq, s.first))
	case i == start && w.opts.base != nil:
		return w.fromBase(s, i)
	case i == start && (start > 0 || w.opts.trustFirst && hdr.firstSeq > 1):
		// Scan from the middle: the CRC-checked header is the anchor.
		res.lastSeq, res.lastHash = hdr.firstSeq-1, hdr.prevHash
	case hdr.firstSeq != res.lastSeq+1:
		what := "missing or extra segment"
		if i == 0 {
			what = "the first segment must start at seq 1"
		}
		return w.fail(s.name, 0, fmt.Sprintf("segment starts at seq %d, want %d (%s)", hdr.firstSeq, res.lastSeq+1, what))
	case hdr.prevHash != res.lastHash:
		return w.fail(s.name, 0, "segment header's previous hash does not match the last record before it")
	}
	res.seg, res.off, res.segSize = i, segHeaderSize, size
	return w.frames(s, i, segHeaderSize)
}

// fromBase starts the walk at opts.base, in segment i (s): the frame there
// must be that record.
func (w *walker) fromBase(s segRef, i int) (done bool, err error) {
	res, b := &w.res, w.opts.base
	rec, fb, err := w.rd.frameAt(b.Offset)
	if err != nil && !isFrameError(err) {
		return true, err
	}
	switch {
	case err != nil && b.Offset >= w.rd.size:
		res.baseGone = true
		return true, nil
	case err != nil:
		// Zeros (the journal ends before it) or damage: which one is
		// the next walk's business; this base cannot be used.
		if lnz, lerr := w.rd.lastNonZero(b.Offset); lerr == nil && lnz < 0 {
			res.baseGone = true
		} else {
			res.baseDiffers = true
		}
		return true, nil
	case rec.Seq != b.Seq || rec.Hash != b.Hash:
		res.baseDiffers = true
		return true, nil
	}
	res.records++
	res.lastSeq, res.lastHash, res.lastOff = rec.Seq, rec.Hash, b.Offset
	if rec.Seq == w.opts.hashAt {
		h := rec.Hash
		res.hashAt = &h
	}
	off := b.Offset + int64(len(fb))
	res.seg, res.off, res.segSize = i, off, w.rd.size
	return w.frames(s, i, off)
}

// frames verifies the frames of segment i (s) from off on.
func (w *walker) frames(s segRef, i int, off int64) (done bool, err error) {
	res, rd := &w.res, &w.rd
	var ferr error
	for {
		if w.opts.stopBefore != 0 && res.lastSeq+1 >= w.opts.stopBefore {
			return true, nil
		}
		rec, fb, err := rd.frameAt(off)
		if err != nil {
			if !isFrameError(err) {
				return true, err
			}
			ferr = err
			break
		}
		if rec.Seq != res.lastSeq+1 {
			return w.fail(s.name, off, fmt.Sprintf("frame has seq %d, want %d", rec.Seq, res.lastSeq+1))
		}
		if !w.ln.check(&res.lastHash, fb) {
			return w.fail(s.name, off, "hash chain broken: stored hash does not follow from the previous record")
		}
		res.records++
		res.lastSeq, res.lastHash, res.lastOff = rec.Seq, rec.Hash, off
		if rec.Seq == w.opts.hashAt {
			h := rec.Hash
			res.hashAt = &h
		}
		off += int64(len(fb))
		res.off = off
		if w.opts.fn != nil && rec.Seq >= w.opts.from {
			if err := w.opts.fn(rec); err != nil {
				return true, err
			}
		}
	}
	// The frame at off does not parse. Zeros from here to the end are the
	// normal end of a preallocated segment; anything else needs a verdict.
	lnz, err := rd.lastNonZero(off)
	if err != nil {
		return true, err
	}
	if lnz < 0 {
		return false, nil
	}
	if i < len(res.segs)-1 {
		// A segment is created only after everything before it is synced,
		// so a later segment proves these bytes were once durable.
		return w.fail(s.name, off, fmt.Sprintf("%v, and segment %s follows", ferr, res.segs[i+1].name))
	}
	q, seq, found, err := rd.findFrameAfter(off+1, res.lastSeq)
	if err != nil {
		return true, err
	}
	if found {
		return w.fail(s.name, off, fmt.Sprintf("%v, and a valid frame with seq %d follows at offset %d", ferr, seq, q))
	}
	res.torn = &TailCut{Segment: s.name, Offset: off, Bytes: lnz + 1 - off, Reason: ferr.Error()}
	return true, nil
}

// Scan calls fn for every valid record with Seq >= fromSeq, in order,
// reading one window at a time (memory does not grow with the log).
// Record.Payload is only valid during the call. Scan starts reading at the
// segment that holds fromSeq and verifies the hash chain from that
// segment's header on (Verify checks the whole log). It stops at the first
// invalid byte: mid-log corruption returns a *CorruptionError, a torn tail
// ends the scan quietly. An error from fn stops the scan and is returned.
// Scan may run while a Log is open on dir; records still being written
// then look like a torn tail and end the scan.
func Scan(dir string, opt Options, fromSeq uint64, fn func(Record) error) error {
	opt, err := opt.withDefaults()
	if err != nil {
		return err
	}
	res, err := walk(opt.FS, dir, walkOpts{from: max(fromSeq, 1), fn: fn, trustFirst: true})
	if err != nil {
		return err
	}
	if res.corrupt != nil {
		return res.corrupt
	}
	return nil
}
