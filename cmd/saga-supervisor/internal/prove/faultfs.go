package prove

import (
	"errors"
	"io/fs"
	"os"
	"sync/atomic"

	"github.com/saga-supervisor/saga-supervisor/wal"
)

// severableFS is the operating system's file system until the process using
// it crashes; from then on every write, sync and directory change fails.
type severableFS struct {
	wal.OSFS
	cut atomic.Bool
}

var errSevered = errors.New("prove: the process crashed; nothing more reaches the disk")

func (f *severableFS) check() error {
	if f.cut.Load() {
		return errSevered
	}
	return nil
}

// unlessCut runs op, a call that writes, syncs or changes a directory,
// unless the process has crashed: then it fails with errSevered.
func (f *severableFS) unlessCut(op func() error) error {
	if err := f.check(); err != nil {
		return err
	}
	return op()
}

func (f *severableFS) OpenFile(name string, flag int, perm fs.FileMode) (wal.File, error) {
	if flag&(os.O_RDWR|os.O_WRONLY|os.O_CREATE|os.O_TRUNC) != 0 {
		if err := f.check(); err != nil {
			return nil, err
		}
	}
	file, err := f.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &severableFile{File: file, fs: f}, nil
}

func (f *severableFS) Rename(o, n string) error {
	return f.unlessCut(func() error { return f.OSFS.Rename(o, n) })
}

func (f *severableFS) Remove(name string) error {
	return f.unlessCut(func() error { return f.OSFS.Remove(name) })
}

func (f *severableFS) MkdirAll(dir string, perm fs.FileMode) error {
	return f.unlessCut(func() error { return f.OSFS.MkdirAll(dir, perm) })
}

func (f *severableFS) SyncDir(dir string) error {
	return f.unlessCut(func() error { return f.OSFS.SyncDir(dir) })
}

type severableFile struct {
	wal.File
	fs *severableFS
}

func (s *severableFile) WriteAt(p []byte, off int64) (int, error) {
	if err := s.fs.check(); err != nil {
		return 0, err
	}
	return s.File.WriteAt(p, off)
}

func (s *severableFile) Sync() error {
	return s.fs.unlessCut(s.File.Sync)
}

func (s *severableFile) Truncate(size int64) error {
	return s.fs.unlessCut(func() error { return s.File.Truncate(size) })
}

func (s *severableFile) Allocate(size int64) error {
	return s.fs.unlessCut(func() error { return s.File.Allocate(size) })
}
