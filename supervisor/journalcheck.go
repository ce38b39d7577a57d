package supervisor

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync/atomic"

	"github.com/saga-supervisor/saga-supervisor/wal"
)

// Journal verification after start. Recovery starts from the newest
// checkpoint and reads only the records after it, so damage to older
// segments — a segment deleted behind the checkpoint, a flipped byte in an
// old record — does not stop the start (the state comes from the
// verified checkpoint). It must still not go unnoticed: once the daemon
// serves, one pass of wal.Verify reads every record (as `verify` does),
// off every serving path, and its verdict goes to the log and to
// saga_journal_verified.
const (
	journalVerifyPending = -1 // not finished yet (or stopped by Close)
	journalVerifyDamaged = 0
	journalVerifyClean   = 1
)

// verifyJournal runs the pass; Close stops it through the file system it
// reads with.
func (s *Supervisor) verifyJournal(verdict *atomic.Int64) {
	defer close(s.verified)
	fsys := stoppableFS{FS: s.opt.WAL.FS, stop: s.stop}
	if fsys.FS == nil {
		fsys.FS = wal.OSFS{}
	}
	opt := s.opt.WAL
	opt.FS = fsys
	var rep wal.VerifyReport
	var err error
	var upTo uint64
	for range 3 { // retention may delete a segment under the pass
		// Up to what is durable as the pass begins: the batch being
		// written after it may be half on disk as the pass reads it.
		upTo = s.journal.DurableSeq()
		if rep, err = wal.VerifyTo(s.opt.JournalDir, opt, upTo); !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	switch {
	case errors.Is(err, errStopped):
		return
	case err != nil:
		s.log.Error("journal verification could not read the journal", "err", err)
		return
	}
	var damage []string
	if b := rep.Broken; b != nil {
		damage = append(damage, fmt.Sprintf("record %d in %s at offset %d: %s", b.Seq, b.Segment, b.Offset, b.Reason))
	}
	if l := rep.Lost; l != nil {
		damage = append(damage, l.Reason)
	}
	if rep.Broken == nil && rep.Lost == nil && rep.LastSeq < upTo {
		damage = append(damage, fmt.Sprintf("the journal ends at record %d, but records up to %d were durable when the pass began", rep.LastSeq, upTo))
	}
	for _, d := range rep.CheckpointsDamaged {
		damage = append(damage, "checkpoint "+d.String())
	}
	if len(damage) > 0 {
		verdict.Store(journalVerifyDamaged)
		s.log.Error("journal verification found damage the start did not need to read (the state came from a checkpoint that matches the journal); keep a copy and run `saga-supervisor verify`",
			"damage", strings.Join(damage, "; "))
		return
	}
	verdict.Store(journalVerifyClean)
	s.log.Info("journal verified", "records", rep.Records, "first_seq", rep.FirstSeq, "last_seq", rep.LastSeq)
}

var errStopped = errors.New("supervisor stopping")

// stoppableFS fails every call once stop is closed, so that a pass of
// wal.Verify ends soon after Close begins.
type stoppableFS struct {
	wal.FS
	stop <-chan struct{}
}

func (f stoppableFS) stopped() bool {
	select {
	case <-f.stop:
		return true
	default:
		return false
	}
}

func (f stoppableFS) OpenFile(name string, flag int, perm fs.FileMode) (wal.File, error) {
	if f.stopped() {
		return nil, errStopped
	}
	fl, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return stoppableFile{File: fl, fs: f}, nil
}

func (f stoppableFS) ReadDir(dir string) ([]string, error) {
	if f.stopped() {
		return nil, errStopped
	}
	return f.FS.ReadDir(dir)
}

type stoppableFile struct {
	wal.File
	fs stoppableFS
}

func (f stoppableFile) ReadAt(p []byte, off int64) (int, error) {
	if f.fs.stopped() {
		return 0, errStopped
	}
	return f.File.ReadAt(p, off)
}
