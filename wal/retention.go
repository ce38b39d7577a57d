package wal

import (
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Retention bounds the journal's disk use. Only closed segments wholly
// behind the oldest checkpoint kept — every record in them covered by it,
// the checkpoint's own record in a later segment — may go, oldest first,
// and only while the journal is over MaxBytes or the segment is older than
// MaxAge. What the segments held then survives only in the checkpoints
// (and the archive, if any): tools that read the whole history (verify,
// certify, export, replay) see the journal from its first segment on.
type Retention struct {
	// MaxBytes bounds the segment files' total size (they are
	// preallocated, so this is their disk use); 0: no bound by size.
	MaxBytes int64
	// MaxAge deletes segments whose last write is older; 0: no bound by
	// age. Needs a file system that reports modification times (OSFS).
	MaxAge time.Duration
	// ArchiveDir, if set, keeps each segment gzip-compressed there
	// (SEGMENT.wal.gz, written atomically) before it is deleted. The
	// archive is not bounded by the journal: it is the operator's.
	ArchiveDir string
}

// RetentionReport is what one retention pass did.
type RetentionReport struct {
	Deleted  []string // segments deleted (after archiving, if configured)
	Segments int      // segment files left
	Bytes    int64    // their total size
	FirstSeq uint64   // the first seq the journal still holds
}

// modTimer is the optional file-system method retention's MaxAge needs.
type modTimer interface {
	ModTime(name string) (time.Time, error)
}

// ModTime returns name's modification time.
func (OSFS) ModTime(name string) (time.Time, error) {
	st, err := os.Stat(name)
	if err != nil {
		return time.Time{}, err
	}
	return st.ModTime(), nil
}

// retain applies Options.Retention after a checkpoint: it deletes the
// checkpoints beyond KeepCheckpoints, then the segments it may. Every
// deletion is followed by a directory fsync, oldest first, so a crash at
// any point leaves a journal whose segments still run without a gap from
// a first one that a kept checkpoint covers. Callers hold ckptMu.
func (l *Log) retain() (RetentionReport, error) {
	var rep RetentionReport
	good, _, err := readCheckpoints(l.fsys, l.dir)
	if err != nil {
		return rep, err
	}
	for len(good) > KeepCheckpoints {
		old := good[len(good)-1]
		if err := l.fsys.Remove(filepath.Join(l.dir, old.Name)); err != nil {
			return rep, err
		}
		if err := l.fsys.SyncDir(l.dir); err != nil {
			return rep, err
		}
		good = good[:len(good)-1]
	}
	segs, err := listSegments(l.fsys, l.dir)
	if err != nil || len(segs) == 0 {
		return rep, err
	}
	sizes := make([]int64, len(segs))
	for i, s := range segs {
		if sizes[i], err = fileSize(l.fsys, filepath.Join(l.dir, s.name)); err != nil {
			return rep, err
		}
		rep.Bytes += sizes[i]
	}
	gone := 0
	if len(good) > 0 {
		oldest := good[len(good)-1].At.Seq
		mt, _ := l.fsys.(modTimer)
		now := time.Now()
		for i := 0; i+1 < len(segs) && segs[i+1].first <= oldest; i++ {
			over := l.retention.MaxBytes > 0 && rep.Bytes > l.retention.MaxBytes
			old := false
			if l.retention.MaxAge > 0 && mt != nil {
				t, err := mt.ModTime(filepath.Join(l.dir, segs[i].name))
				if err != nil {
					return rep, err
				}
				old = now.Sub(t) > l.retention.MaxAge
			}
			if !over && !old {
				break
			}
			rep.Bytes -= sizes[i]
			gone++
		}
	}
	if gone > 0 {
		// The anchor's first record moves before anything is deleted:
		// a crash in between leaves segments it no longer needs (the
		// next pass deletes them), never a gap it would take for a loss.
		if err := l.retainFrom(segs[gone].first); err != nil {
			return rep, err
		}
		for _, s := range segs[:gone] {
			if err := l.dropSegment(s.name); err != nil {
				return rep, err
			}
			rep.Deleted = append(rep.Deleted, s.name)
		}
	}
	rep.Segments = len(segs) - gone
	rep.FirstSeq = segs[gone].first
	l.mu.Lock()
	l.stats.SegmentsDeleted += uint64(gone)
	// Adjusted, not set: the writer counts segments it installs since.
	for i := range gone {
		l.stats.SegmentBytes -= sizes[i]
	}
	l.stats.SegmentFiles -= gone
	l.stats.FirstSeq = rep.FirstSeq
	l.mu.Unlock()
	return rep, nil
}

// dropSegment archives (if configured) and deletes one segment.
func (l *Log) dropSegment(name string) error {
	if dir := l.retention.ArchiveDir; dir != "" {
		if err := makeDir(l.fsys, dir); err != nil {
			return err
		}
		if err := archiveSegment(l.fsys, l.dir, name, dir); err != nil {
			return fmt.Errorf("wal: archiving %s: %w", name, err)
		}
	}
	if err := l.fsys.Remove(filepath.Join(l.dir, name)); err != nil {
		return err
	}
	return l.fsys.SyncDir(l.dir)
}

// archiveSegment writes dir/name gzip-compressed to archive/name.gz,
// atomically.
func archiveSegment(fsys FS, dir, name, archive string) error {
	in, err := fsys.OpenFile(filepath.Join(dir, name), os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	size, err := in.Size()
	if err != nil {
		return err
	}
	return writeAtomic(fsys, archive, name+".gz", func(out File) error {
		zw := gzip.NewWriter(&fileWriter{f: out})
		if _, err := io.Copy(zw, io.NewSectionReader(in, 0, size)); err != nil {
			return err
		}
		return zw.Close()
	})
}

// fileWriter writes to a File from offset 0 on.
type fileWriter struct {
	f   File
	off int64
}

func (w *fileWriter) Write(p []byte) (int, error) {
	n, err := w.f.WriteAt(p, w.off)
	w.off += int64(n)
	return n, err
}

func fileSize(fsys FS, name string) (int64, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.Size()
}

// retainFrom moves the anchor's first record to first (its seq and hash
// stay), durably.
func (l *Log) retainFrom(first uint64) error {
	l.anchorMu.Lock()
	defer l.anchorMu.Unlock()
	a := l.anchor
	if a.seq == 0 {
		// No anchor yet: name the durable head (it is durable).
		l.mu.Lock()
		a.seq, a.hash = l.durable, l.durableH
		l.mu.Unlock()
	}
	a.first = first
	if err := writeAnchor(l.fsys, l.dir, a); err != nil {
		return err
	}
	l.anchor = a
	return nil
}
