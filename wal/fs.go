package wal

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// FS is the file-system surface the journal uses. It is small on purpose:
// everything the journal's durability argument depends on (write at an
// offset, fdatasync, rename, directory fsync) is explicit, so an in-memory
// implementation (package crashfs) can model exactly what survives a crash.
type FS interface {
	// OpenFile opens name with os.O_* flags (O_RDONLY, O_RDWR, O_CREATE,
	// O_EXCL, O_TRUNC are used).
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	// Rename atomically replaces newname by oldname. The new directory
	// entry is durable only after SyncDir of its directory.
	Rename(oldname, newname string) error
	// Remove deletes a file. Durable only after SyncDir.
	Remove(name string) error
	// ReadDir returns the names of the entries of dir, sorted.
	ReadDir(dir string) ([]string, error)
	// MkdirAll creates dir and any missing parents.
	MkdirAll(dir string, perm fs.FileMode) error
	// SyncDir makes the entries of dir (creations, renames, removals)
	// durable: fsync on the directory.
	SyncDir(dir string) error
}

// File is an open file of an FS.
type File interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	// Sync makes the file's data durable, and the metadata needed to read
	// it back (size), but not timestamps: fdatasync(2). Segments are
	// preallocated so their size never changes while records are written,
	// which is what keeps this cheap.
	Sync() error
	Truncate(size int64) error
	// Allocate makes the file at least size bytes long, the new part
	// reading as zeros, with its blocks allocated and initialised so that
	// writing into them later changes no file-system metadata (OSFS:
	// fallocate(2) plus zeros written). It never shrinks the file.
	Allocate(size int64) error
	Size() (int64, error)
	Close() error
}

// The journal is private to the daemon's user: it records every command
// and who sent it. Its directory is created 0700 and its files 0600.
const (
	dirPerm  fs.FileMode = 0o700
	filePerm fs.FileMode = 0o600
)

// PermFS is implemented by an FS whose files have permission bits (OSFS).
// Open uses it to tighten a journal an earlier version (or a hand) left
// more open than dirPerm and filePerm.
type PermFS interface {
	// Restrict clears the permission bits of name outside dirAllowed if
	// it is a directory, outside fileAllowed if it is a regular file; a
	// symbolic link or any other kind of file is left alone.
	Restrict(name string, dirAllowed, fileAllowed fs.FileMode) error
}

// Restrict clears the permission bits outside those allowed (chmod); a
// file already within them is not touched.
func (OSFS) Restrict(name string, dirAllowed, fileAllowed fs.FileMode) error {
	st, err := os.Lstat(name)
	if err != nil {
		return err
	}
	allowed := fileAllowed
	switch {
	case st.Mode().IsDir():
		allowed = dirAllowed
	case !st.Mode().IsRegular():
		return nil
	}
	if perm := st.Mode().Perm(); perm&^allowed != 0 {
		return os.Chmod(name, perm&allowed)
	}
	return nil
}

// tightenPerms makes an existing journal directory 0700 and its files
// 0600 at most, on a file system with permissions. The policy is to
// tighten rather than refuse: a journal written by an older version
// (0755/0644) is still the robot's only record of open sagas, and refusing
// it would keep the robot from recovering them. Only a failed chmod is an
// error.
func tightenPerms(fsys FS, dir string) error {
	pfs, ok := fsys.(PermFS)
	if !ok {
		return nil
	}
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return err
	}
	paths := []string{dir}
	for _, n := range names {
		paths = append(paths, filepath.Join(dir, n))
	}
	for _, p := range paths {
		if err := pfs.Restrict(p, dirPerm, filePerm); err != nil {
			return fmt.Errorf("wal: restricting the permissions of %s: %w", p, err)
		}
	}
	return nil
}

// OSFS is the operating system's file system. The zero value is ready to
// use; Options.FS == nil means OSFS{}.
type OSFS struct{}

// OpenFile opens a real file.
func (OSFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &osFile{f: f, fd: int(f.Fd())}, nil
}

// Rename is os.Rename (rename(2), atomic on POSIX file systems).
func (OSFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }

// Remove is os.Remove.
func (OSFS) Remove(name string) error { return os.Remove(name) }

// ReadDir lists the names in dir, sorted.
func (OSFS) ReadDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	slices.Sort(names)
	return names, nil
}

// MkdirAll is os.MkdirAll.
func (OSFS) MkdirAll(dir string, perm fs.FileMode) error { return os.MkdirAll(dir, perm) }

// SyncDir fsyncs the directory itself, which is what makes a rename or a
// new file's name survive a power cut.
func (OSFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// osFile is a File backed by *os.File. The descriptor is cached because
// Sync and Allocate go straight to the system calls.
type osFile struct {
	f  *os.File
	fd int
}

func (o *osFile) ReadAt(p []byte, off int64) (int, error)  { return o.f.ReadAt(p, off) }
func (o *osFile) WriteAt(p []byte, off int64) (int, error) { return o.f.WriteAt(p, off) }
func (o *osFile) Truncate(size int64) error                { return o.f.Truncate(size) }
func (o *osFile) Close() error                             { return o.f.Close() }
func (o *osFile) Sync() error                              { return fdatasync(o) }

func (o *osFile) Allocate(size int64) error {
	if size <= 0 {
		return nil
	}
	return allocate(o, size)
}

func (o *osFile) Size() (int64, error) {
	st, err := o.f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// writeZeros writes zeros over [from, to) of f: blocks really allocated
// and initialised, so later writes into them change no metadata.
func writeZeros(f File, from, to int64) error {
	buf := make([]byte, min(to-from, 256<<10))
	for off := from; off < to; {
		n := min(int64(len(buf)), to-off)
		if _, err := f.WriteAt(buf[:n], off); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// ancestorsToCreate lists dir and those of its parents that do not exist,
// deepest first, so that after MkdirAll each new entry can be made durable.
func ancestorsToCreate(fsys FS, dir string) []string {
	var missing []string
	for d := filepath.Clean(dir); ; {
		if _, err := fsys.ReadDir(d); err == nil || !errors.Is(err, fs.ErrNotExist) {
			return missing
		}
		missing = append(missing, d)
		parent := filepath.Dir(d)
		if parent == d {
			return missing
		}
		d = parent
	}
}
