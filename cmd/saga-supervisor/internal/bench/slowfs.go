package bench

import (
	"io/fs"
	"sync/atomic"
	"time"

	"github.com/saga-supervisor/saga-supervisor/wal"
)

// slowSyncFS is the operating system's file system with every fsync (of a
// file or a directory) delayed by *delay nanoseconds (0: none): the journal
// on a slow SD card, whose fsync takes milliseconds where this machine's
// takes a tenth of one. It embeds wal.OSFS, so the journal's lock and
// permissions work as on the real thing.
type slowSyncFS struct {
	wal.OSFS
	delay *atomic.Int64
}

func (s slowSyncFS) OpenFile(name string, flag int, perm fs.FileMode) (wal.File, error) {
	f, err := s.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return slowSyncFile{File: f, delay: s.delay}, nil
}

func (s slowSyncFS) SyncDir(dir string) error {
	sleepFor(s.delay)
	return s.OSFS.SyncDir(dir)
}

type slowSyncFile struct {
	wal.File
	delay *atomic.Int64
}

func (f slowSyncFile) Sync() error {
	sleepFor(f.delay)
	return f.File.Sync()
}

func sleepFor(d *atomic.Int64) {
	if n := d.Load(); n > 0 {
		time.Sleep(time.Duration(n))
	}
}
