package wal

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// brokenName picks a name for keeping cut bytes of segment seg: seg.broken,
// or seg.broken.N if earlier cuts of the same segment are already kept. Old
// .broken files are never overwritten: they are evidence.
func brokenName(fsys FS, dir, seg string) (string, error) {
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return "", err
	}
	name := seg + brokenExt
	for n := 1; slices.Contains(names, name); n++ {
		name = seg + brokenExt + "." + strconv.Itoa(n)
	}
	return name, nil
}

// saveBroken copies bytes [from, to) of a segment (open as f) into the new
// .broken file name, atomically: temporary file, fdatasync, rename,
// directory fsync. Only after that may the bytes be removed from the
// segment, so a crash at any point loses nothing.
func saveBroken(fsys FS, dir, name string, f File, from, to int64) error {
	return writeAtomic(fsys, dir, name, func(out File) error {
		buf := make([]byte, min(to-from, readWindow))
		for off := from; off < to; {
			n := min(int64(len(buf)), to-off)
			if _, err := f.ReadAt(buf[:n], off); err != nil {
				return err
			}
			if _, err := out.WriteAt(buf[:n], off-from); err != nil {
				return err
			}
			off += n
		}
		return nil
	})
}

// writeAtomic creates dir/name with what write puts in it, atomically: a
// temporary file (name.tmp, which Open removes if a crash leaves it), write,
// fdatasync, rename, directory fsync. Until the rename the old file, if
// any, stands whole.
func writeAtomic(fsys FS, dir, name string, write func(File) error) error {
	tmp := filepath.Join(dir, name+tmpExt)
	out, err := fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, filePerm)
	if err != nil {
		return err
	}
	err = write(out)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(tmp, filepath.Join(dir, name))
	}
	if err == nil {
		err = fsys.SyncDir(dir)
	}
	if err != nil {
		_ = fsys.Remove(tmp) // best effort; Open removes stray temporaries anyway
	}
	return err
}

// zeroRange overwrites [from, to) of f with zeros and syncs, so the region
// after the cut reads as the clean end of a preallocated segment again.
func zeroRange(f File, from, to int64) error {
	if err := writeZeros(f, from, to); err != nil {
		return err
	}
	return f.Sync()
}

// cutSegment removes everything from off on in segment seg, keeping the
// removed bytes (up to the last non-zero byte) in a .broken file with its
// cut note. It returns the .broken name and the number of bytes cut (nil
// if the region was already all zeros). Open cuts a torn tail with it:
// by the torn tail's definition no frame after off checks, so the note
// counts no record (TruncateAt counts them: cutSegmentNoted).
func cutSegment(fsys FS, dir, seg string, off int64, reason string) (*TailCut, error) {
	return cutSegmentNoted(fsys, dir, seg, off, reason, nil)
}

// cutSegmentNoted is cutSegment with the last record kept before the cut
// given (nil: read from the segment) and the frames in the cut bytes
// counted when last is given.
func cutSegmentNoted(fsys FS, dir, seg string, off int64, reason string, last *anchor) (*TailCut, error) {
	f, err := fsys.OpenFile(filepath.Join(dir, seg), os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	var rd segReader
	rd.reset(f, size)
	lnz, err := rd.lastNonZero(off)
	if err != nil || lnz < 0 {
		return nil, err
	}
	end := lnz + 1
	note := cutNote{segment: seg, offset: off, bytes: end - off, reason: reason}
	if last != nil {
		note.last, note.lastKnown = *last, true
		if note.count, err = countFrames(&rd, off, last.seq); err != nil {
			return nil, err
		}
	} else if note.last, note.lastKnown, err = lastRecordBefore(&rd, off); err != nil {
		return nil, err
	}
	name, err := brokenName(fsys, dir, seg)
	if err != nil {
		return nil, err
	}
	// The note first: a crash before the copy leaves a note without its
	// .broken file, which the next cut of this segment (taking the same
	// name) replaces and Cuts ignores meanwhile.
	if err := writeCutNote(fsys, dir, name, note); err != nil {
		return nil, err
	}
	if err := saveBroken(fsys, dir, name, f, off, end); err != nil {
		return nil, err
	}
	if err := zeroRange(f, off, end); err != nil {
		return nil, err
	}
	return &TailCut{Segment: seg, Offset: off, Bytes: end - off, BrokenFile: name, Reason: reason}, nil
}

// TruncateAt is the operator's cut: it cuts the journal just before
// record seq, so that seq-1 becomes the last record. Every record before
// seq must verify (otherwise the *CorruptionError is returned and nothing
// changes). The cut bytes are kept: whole later segments are renamed to
// .broken, and the cut part of the segment holding seq is copied to a
// .broken file before being zeroed; each .broken file gets its cut note
// (see Cuts). Later segments are renamed last-first, so a crash part way
// leaves a shorter but valid journal and TruncateAt can simply be run
// again. seq may be at most LastSeq+1 (which only cuts a torn tail, if
// any). It takes the directory's lock (see Locker) for the cut: a journal
// a Log holds is refused with an error matching ErrLocked. Repair cuts a
// damaged journal at its first bad record the same way.
func TruncateAt(dir string, opt Options, seq uint64) (err error) {
	opt, err = opt.withDefaults()
	if err != nil {
		return err
	}
	if seq == 0 {
		return fmt.Errorf("wal: TruncateAt: seq 0 does not exist (seqs start at 1)")
	}
	fsys := opt.FS
	if _, err := fsys.ReadDir(dir); err != nil {
		return err // no journal there: do not create a lock file
	}
	unlock, err := lockDir(fsys, dir)
	if err != nil {
		return err
	}
	defer func() {
		if uerr := unlock(); err == nil {
			err = uerr
		}
	}()
	_, err = truncateLocked(fsys, dir, seq, fmt.Sprintf("TruncateAt(%d)", seq))
	return err
}

// truncateLocked is TruncateAt once the lock is held. It returns the names
// of the .broken files it kept the cut bytes in.
func truncateLocked(fsys FS, dir string, seq uint64, reason string) ([]string, error) {
	// Checkpoints covering records the cut removes go first (kept as
	// .broken): one left ahead of the journal would read as a loss. What
	// is left must still be rebuildable: from segment 1, or from a kept
	// checkpoint if retention deleted the first segments.
	good, _, err := readCheckpoints(fsys, dir)
	if err != nil {
		return nil, err
	}
	var drop []CheckpointDamage
	keptCkpt := false
	for _, c := range good {
		if c.At.Seq >= seq {
			drop = append(drop, CheckpointDamage{Name: c.Name})
		} else {
			keptCkpt = true
		}
	}
	segs, err := listSegments(fsys, dir)
	if err != nil {
		return nil, err
	}
	if !keptCkpt && len(segs) > 0 && segs[0].first > 1 {
		return nil, fmt.Errorf("wal: TruncateAt(%d): the journal starts at record %d and no checkpoint before the cut would cover the records before it", seq, segs[0].first)
	}
	res, err := walk(fsys, dir, walkOpts{from: 1, stopBefore: seq, trustFirst: keptCkpt})
	if err != nil {
		return nil, err
	}
	if res.corrupt != nil && res.corrupt.Seq < seq {
		return nil, res.corrupt
	}
	if res.lastSeq+1 < seq {
		return nil, fmt.Errorf("wal: TruncateAt(%d): the journal ends at seq %d", seq, res.lastSeq)
	}
	// The operator cuts the journal here: the anchor moves back first, so
	// that neither the cut nor a crash half-way through it is taken for a
	// loss by the next Open (the records it keeps are verified above).
	first := uint64(1)
	if len(segs) > 0 {
		first = segs[0].first
	}
	last := anchor{seq: res.lastSeq, hash: res.lastHash, first: first}
	if err := writeAnchor(fsys, dir, last); err != nil {
		return nil, err
	}
	if err := setAsideCheckpoints(fsys, dir, drop); err != nil {
		return nil, err
	}
	// Everything after the cut point goes: first whole later segments (or
	// all of them if even the first header is bad), then the tail of the
	// segment holding the cut point.
	var kept []string
	firstGone := res.seg + 1
	for i := len(res.segs) - 1; i >= firstGone; i-- {
		name := res.segs[i].name
		c, err := wholeSegmentCut(fsys, dir, name, res.lastSeq)
		if err != nil {
			return kept, err
		}
		bname, err := brokenName(fsys, dir, name)
		if err != nil {
			return kept, err
		}
		note := cutNote{segment: name, bytes: c.Bytes, whole: true, last: last, lastKnown: true, count: c, reason: reason}
		if err := writeCutNote(fsys, dir, bname, note); err != nil {
			return kept, err
		}
		if err := fsys.Rename(filepath.Join(dir, name), filepath.Join(dir, bname)); err != nil {
			return kept, err
		}
		kept = append(kept, bname)
	}
	if firstGone < len(res.segs) {
		if err := fsys.SyncDir(dir); err != nil {
			return kept, err
		}
	}
	if res.seg < 0 {
		return kept, nil
	}
	cut, err := cutSegmentNoted(fsys, dir, res.segs[res.seg].name, res.off, reason, &last)
	if cut != nil {
		kept = append(kept, cut.BrokenFile)
	}
	return kept, err
}

// SegmentCut is what cutting the journal removes from one segment file.
type SegmentCut struct {
	Segment string // the segment file's name
	Offset  int64  // where in it the cut begins (0 with Whole)
	// Bytes is how many bytes go: up to the last non-zero byte, or the
	// whole file's size with Whole.
	Bytes int64
	Whole bool // the whole file goes (renamed to .broken)
	// Records counts the frames in the removed bytes that check on their
	// own (CRC, and a seq after the last record kept): records the
	// journal held whole, which the cut removes too. FirstRecord and
	// LastRecord are the lowest and highest of their seqs.
	Records                 int
	FirstRecord, LastRecord uint64
}

// RepairPlan is what repairing a journal cuts: everything from its first
// bad record on, the way TruncateAt cuts.
type RepairPlan struct {
	// Report is what Verify found. Its LastSeq and LastHash are the last
	// good record, the one the repaired journal ends with.
	Report VerifyReport
	// CutAt is the first record the cut removes: the damaged one
	// (Report.Broken), or the one a torn tail was to hold. 0 when there is
	// nothing to cut: the journal is intact, or records its anchor vouches
	// for are gone (Report.Lost), which no cut mends.
	CutAt uint64
	// AnchorSeq is the record the anchor names as durable (0: none). A cut
	// at or below it removes records that were acknowledged.
	AnchorSeq uint64
	// Cuts lists what goes, segment by segment, in seq order.
	Cuts []SegmentCut
	// BrokenFiles names the .broken files Repair kept the cut bytes in;
	// empty for PlanRepair.
	BrokenFiles []string
}

// PlanRepair says, without changing anything or taking the lock, what
// Repair would cut. It may run beside the daemon; a batch the daemon is
// writing then looks like a torn tail.
func PlanRepair(dir string, opt Options) (RepairPlan, error) {
	return PlanCut(dir, opt, 0)
}

// PlanCut is PlanRepair for an operator's cut just before record at (0:
// the first bad record, as PlanRepair): what goes when the journal is cut
// there even though its chain is intact — a record the daemon's rebuild
// refuses, say. at must lie in the journal (from its first record to one
// past its last) and not after its damage, if any.
func PlanCut(dir string, opt Options, at uint64) (RepairPlan, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return RepairPlan{}, err
	}
	return planRepair(dir, opt, at)
}

// Repair cuts a journal that Open refuses as corrupt, or that ends in a
// torn tail, just before its first bad record, keeping every cut byte in
// .broken files with their cut notes (see TruncateAt), and returns what it
// cut. It takes the directory's lock for the plan and the cut together, so
// a journal the daemon changed since an earlier PlanRepair is planned
// again. A journal that lost records its anchor vouches for is not cut:
// the plan's Report.Lost says so (an operator accepts a loss with
// Options.AcceptLoss instead). An intact journal is left alone.
func Repair(dir string, opt Options) (plan RepairPlan, err error) {
	return Cut(dir, opt, 0)
}

// Cut is Repair at the operator's chosen record (see PlanCut; 0: the first
// bad record).
func Cut(dir string, opt Options, at uint64) (plan RepairPlan, err error) {
	opt, err = opt.withDefaults()
	if err != nil {
		return RepairPlan{}, err
	}
	fsys := opt.FS
	if _, err := fsys.ReadDir(dir); err != nil {
		return RepairPlan{}, err // no journal there: do not create a lock file
	}
	unlock, err := lockDir(fsys, dir)
	if err != nil {
		return RepairPlan{}, err
	}
	defer func() {
		if uerr := unlock(); err == nil {
			err = uerr
		}
	}()
	plan, err = planRepair(dir, opt, at)
	if err != nil || plan.CutAt == 0 {
		return plan, err
	}
	reason := "repair: torn tail"
	switch b := plan.Report.Broken; {
	case at != 0:
		reason = fmt.Sprintf("repair: the operator's cut before record %d", at)
	case b != nil:
		reason = "repair: " + b.Reason
	}
	plan.BrokenFiles, err = truncateLocked(fsys, dir, plan.CutAt, reason)
	return plan, err
}

func planRepair(dir string, opt Options, at uint64) (RepairPlan, error) {
	fsys := opt.FS
	rep, err := Verify(dir, opt)
	if err != nil {
		return RepairPlan{}, err
	}
	plan := RepairPlan{Report: rep}
	if a, _ := readAnchor(fsys, dir); a != nil {
		plan.AnchorSeq = a.seq
	}
	switch {
	case rep.Lost != nil:
		return plan, nil
	case at != 0:
		last := rep.LastSeq + 1
		if rep.Broken != nil {
			last = rep.Broken.Seq
		}
		if at < max(rep.FirstSeq, 1) || at > last {
			return plan, fmt.Errorf("wal: a cut before record %d: the journal holds records %d to %d (a cut after its damage would not mend it)", at, max(rep.FirstSeq, 1), last-1)
		}
		plan.CutAt = at
	case rep.Broken != nil:
		plan.CutAt = rep.Broken.Seq
	case rep.TornTail != nil:
		plan.CutAt = rep.LastSeq + 1
	default:
		return plan, nil
	}
	res, err := walk(fsys, dir, walkOpts{from: 1, stopBefore: plan.CutAt, trustFirst: rep.Checkpoint != nil})
	if err != nil {
		return plan, err
	}
	if res.seg >= 0 {
		c, err := partialSegmentCut(fsys, dir, res.segs[res.seg].name, res.off, res.lastSeq)
		if err != nil {
			return plan, err
		}
		if c.Bytes > 0 {
			plan.Cuts = append(plan.Cuts, c)
		}
	}
	for _, s := range res.segs[res.seg+1:] {
		c, err := wholeSegmentCut(fsys, dir, s.name, res.lastSeq)
		if err != nil {
			return plan, err
		}
		plan.Cuts = append(plan.Cuts, c)
	}
	return plan, nil
}

// partialSegmentCut is what cutting segment seg from off on removes; after
// is the last record kept.
func partialSegmentCut(fsys FS, dir, seg string, off int64, after uint64) (SegmentCut, error) {
	c := SegmentCut{Segment: seg, Offset: off}
	err := readSegment(fsys, dir, seg, func(rd *segReader) error {
		lnz, err := rd.lastNonZero(off)
		if err != nil || lnz < 0 {
			return err
		}
		c.Bytes = lnz + 1 - off
		cnt, err := countFrames(rd, off, after)
		c.Records, c.FirstRecord, c.LastRecord = cnt.Records, cnt.FirstRecord, cnt.LastRecord
		return err
	})
	return c, err
}

// wholeSegmentCut is what removing segment seg whole removes; after is the
// last record kept.
func wholeSegmentCut(fsys FS, dir, seg string, after uint64) (SegmentCut, error) {
	c := SegmentCut{Segment: seg, Whole: true}
	err := readSegment(fsys, dir, seg, func(rd *segReader) error {
		c.Bytes = rd.size
		cnt, err := countFrames(rd, segHeaderSize, after)
		c.Records, c.FirstRecord, c.LastRecord = cnt.Records, cnt.FirstRecord, cnt.LastRecord
		return err
	})
	return c, err
}

// readSegment opens segment seg read-only for fn.
func readSegment(fsys FS, dir, seg string, fn func(*segReader) error) error {
	f, err := fsys.OpenFile(filepath.Join(dir, seg), os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	size, err := f.Size()
	if err == nil {
		var rd segReader
		rd.reset(f, size)
		err = fn(&rd)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// countFrames counts the frames from offset from on that check on their
// own (CRC) and carry increasing seqs after after, skipping bad bytes
// between them: what a cut from there would remove of records that were
// written whole. Only Records, FirstRecord and LastRecord are set.
func countFrames(rd *segReader, from int64, after uint64) (SegmentCut, error) {
	var c SegmentCut
	prev := after
	for p := from; p+frameHeaderSize <= rd.size; {
		rec, fb, err := rd.frameAt(p)
		if err != nil && !isFrameError(err) {
			return c, err
		}
		if err == nil && rec.Seq > prev {
			if c.Records == 0 {
				c.FirstRecord = rec.Seq
			}
			c.Records++
			c.LastRecord, prev = rec.Seq, rec.Seq
			p += int64(len(fb))
			continue
		}
		// Bad bytes: look for the next frame that checks, unless only the
		// zeros of a preallocated segment follow.
		if lnz, err := rd.lastNonZero(p + 1); err != nil || lnz < 0 {
			return c, err
		}
		q, _, found, err := rd.findFrameAfter(p+1, prev)
		if err != nil || !found {
			return c, err
		}
		p = q
	}
	return c, nil
}

// lastRecordBefore finds the record that ends at off in the segment read
// by rd (the segment header's previous record if off is the first frame's
// place). ok is false if no frame ends exactly there.
func lastRecordBefore(rd *segReader, off int64) (last anchor, ok bool, err error) {
	hb, err := rd.at(0, segHeaderSize)
	if err != nil {
		return anchor{}, false, err
	}
	hdr, herr := decodeSegHeader(hb)
	if herr != nil {
		return anchor{}, false, nil
	}
	last = anchor{seq: hdr.firstSeq - 1, hash: hdr.prevHash}
	p := int64(segHeaderSize)
	for p < off {
		rec, fb, err := rd.frameAt(p)
		if err != nil {
			if isFrameError(err) {
				return anchor{}, false, nil
			}
			return anchor{}, false, err
		}
		last = anchor{seq: rec.Seq, hash: rec.Hash}
		p += int64(len(fb))
	}
	return last, p == off, nil
}
