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

// saveBroken copies bytes [from, to) of segment seg (open as f) into a new
// .broken file, atomically: temporary file, fdatasync, rename, directory
// fsync. Only after that may the bytes be removed from the segment, so a
// crash at any point loses nothing.
func saveBroken(fsys FS, dir, seg string, f File, from, to int64) (string, error) {
	name, err := brokenName(fsys, dir, seg)
	if err != nil {
		return "", err
	}
	err = writeAtomic(fsys, dir, name, func(out File) error {
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
	if err != nil {
		return "", err
	}
	return name, nil
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
// removed bytes (up to the last non-zero byte) in a .broken file. It
// returns the .broken name and the number of bytes cut (0, "" if the
// region was already all zeros).
func cutSegment(fsys FS, dir, seg string, off int64, reason string) (*TailCut, error) {
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
	name, err := saveBroken(fsys, dir, seg, f, off, end)
	if err != nil {
		return nil, err
	}
	if err := zeroRange(f, off, end); err != nil {
		return nil, err
	}
	return &TailCut{Segment: seg, Offset: off, Bytes: end - off, BrokenFile: name, Reason: reason}, nil
}

// TruncateAt is the operator's repair: it cuts the journal just before
// record seq, so that seq-1 becomes the last record. Every record before
// seq must verify (otherwise the *CorruptionError is returned and nothing
// changes). The cut bytes are kept: whole later segments are renamed to
// .broken, and the cut part of the segment holding seq is copied to a
// .broken file before being zeroed. Later segments are renamed last-first,
// so a crash part way leaves a shorter but valid journal and TruncateAt can
// simply be run again. seq may be at most LastSeq+1 (which only cuts a torn
// tail, if any). It takes the directory's lock (see Locker) for the cut:
// a journal a Log holds is refused with an error matching ErrLocked.
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
	// Checkpoints covering records the cut removes go first (kept as
	// .broken): one left ahead of the journal would read as a loss. What
	// is left must still be rebuildable: from segment 1, or from a kept
	// checkpoint if retention deleted the first segments.
	good, _, err := readCheckpoints(fsys, dir)
	if err != nil {
		return err
	}
	var drop []CheckpointDamage
	kept := false
	for _, c := range good {
		if c.At.Seq >= seq {
			drop = append(drop, CheckpointDamage{Name: c.Name})
		} else {
			kept = true
		}
	}
	segs, err := listSegments(fsys, dir)
	if err != nil {
		return err
	}
	if !kept && len(segs) > 0 && segs[0].first > 1 {
		return fmt.Errorf("wal: TruncateAt(%d): the journal starts at record %d and no checkpoint before the cut would cover the records before it", seq, segs[0].first)
	}
	res, err := walk(fsys, dir, walkOpts{from: 1, stopBefore: seq, trustFirst: kept})
	if err != nil {
		return err
	}
	if res.corrupt != nil && res.corrupt.Seq < seq {
		return res.corrupt
	}
	if res.lastSeq+1 < seq {
		return fmt.Errorf("wal: TruncateAt(%d): the journal ends at seq %d", seq, res.lastSeq)
	}
	// The operator cuts the journal here: the anchor moves back first, so
	// that neither the cut nor a crash half-way through it is taken for a
	// loss by the next Open (the records it keeps are verified above).
	first := uint64(1)
	if len(segs) > 0 {
		first = segs[0].first
	}
	if err := writeAnchor(fsys, dir, anchor{seq: res.lastSeq, hash: res.lastHash, first: first}); err != nil {
		return err
	}
	if err := setAsideCheckpoints(fsys, dir, drop); err != nil {
		return err
	}
	// Everything after the cut point goes: first whole later segments (or
	// all of them if even the first header is bad), then the tail of the
	// segment holding the cut point.
	firstGone := res.seg + 1
	for i := len(res.segs) - 1; i >= firstGone; i-- {
		name := res.segs[i].name
		bname, err := brokenName(fsys, dir, name)
		if err != nil {
			return err
		}
		if err := fsys.Rename(filepath.Join(dir, name), filepath.Join(dir, bname)); err != nil {
			return err
		}
	}
	if firstGone < len(res.segs) {
		if err := fsys.SyncDir(dir); err != nil {
			return err
		}
	}
	if res.seg < 0 {
		return nil
	}
	_, err = cutSegment(fsys, dir, res.segs[res.seg].name, res.off, fmt.Sprintf("TruncateAt(%d)", seq))
	return err
}
