// Package crashfs is an in-memory file system (a wal.FS) that models what
// a real disk keeps when the power goes, for crash testing the journal and
// anything built on it (the rollback engine, model checkers).
//
// The model:
//
//   - Every file has durable content (what its last Sync — fdatasync —
//     made durable) and current content (what reads return now). Writes,
//     Truncate and Allocate change only the current content.
//   - Directory entries (a file created, renamed or removed, a directory
//     made) have the same split: they change the current namespace at
//     once and the durable namespace only when the directory is synced
//     (SyncDir). A file whose name was never made durable is lost in a
//     crash even if its data was synced, as on ext4/xfs.
//   - Crash(inj) returns the file system after a power cut: the durable
//     namespace, with each file's content decided by an Injector from its
//     durable and current content (drop unsynced bytes, keep a torn prefix,
//     zeros, a flipped bit...). The FS it was called on is unchanged.
//   - CutPower and CutPowerAt(n) also kill this FS: from the cut on, every
//     mutating call fails with ErrPowerCut, so the code under test can
//     acknowledge nothing after the moment the crash image was taken.
//   - Faults (FailWriteAfter, FailSyncAfter, SetFault) make chosen calls
//     fail, for fail-stop tests.
//
// Paths use forward slashes; relative paths are taken from "/". All
// methods are safe for concurrent use.
package crashfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/saga-supervisor/saga-supervisor/wal"
)

var (
	// ErrInjected is returned by a call that a fault made fail.
	ErrInjected = errors.New("crashfs: injected I/O error")
	// ErrPowerCut is returned by every mutating call after the power cut.
	ErrPowerCut = errors.New("crashfs: power cut")
)

// OpKind names a mutating file-system call.
type OpKind int

// The mutating calls, as seen by SetFault and counted by Ops.
const (
	OpCreate   OpKind = iota + 1 // OpenFile that creates or truncates
	OpWrite                      // File.WriteAt
	OpSync                       // File.Sync
	OpTruncate                   // File.Truncate
	OpAllocate                   // File.Allocate
	OpRename                     // FS.Rename
	OpRemove                     // FS.Remove
	OpMkdir                      // FS.MkdirAll
	OpSyncDir                    // FS.SyncDir
)

var opNames = [...]string{"", "create", "write", "sync", "truncate", "allocate", "rename", "remove", "mkdir", "syncdir"}

func (k OpKind) String() string {
	if int(k) < len(opNames) && k > 0 {
		return opNames[k]
	}
	return fmt.Sprintf("OpKind(%d)", int(k))
}

// Op is one mutating call: its kind and the path it acts on.
type Op struct {
	Kind OpKind
	Path string
}

// node is a file or a directory. A node outlives its names: an open file
// keeps working after it is renamed or removed, as on POSIX.
type node struct {
	dir     bool
	durable []byte
	current []byte
	// dirty is the range of current written since the last sync, so Sync
	// copies only that much (sizes changed => full copy).
	dirtyLo, dirtyHi int
}

func (n *node) markDirty(lo, hi int) {
	if n.dirtyLo >= n.dirtyHi {
		n.dirtyLo, n.dirtyHi = lo, hi
		return
	}
	n.dirtyLo, n.dirtyHi = min(n.dirtyLo, lo), max(n.dirtyHi, hi)
}

func (n *node) sync() {
	if len(n.durable) != len(n.current) {
		n.durable = append(n.durable[:0], n.current...)
	} else if n.dirtyLo < n.dirtyHi {
		copy(n.durable[n.dirtyLo:n.dirtyHi], n.current[n.dirtyLo:n.dirtyHi])
	}
	n.dirtyLo, n.dirtyHi = 0, 0
}

// FS is the in-memory crash-modelling file system. Create it with New.
type FS struct {
	mu  sync.Mutex
	cur map[string]*node // current namespace: path -> node
	dur map[string]*node // durable namespace
	// locks are the directories locked (wal.Locker). Like a process's
	// flocks they die with it: the FS Crash returns holds none.
	locks map[string]bool

	ops          int // mutating calls so far
	writes       int
	syncs        int
	failWriteAt  int // fail the write whose number this is (0: never)
	failSyncAt   int
	fault        func(Op) error
	cutAt        int // cut the power at this op number (0: never)
	cutInj       Injector
	dead         bool
	afterCrash   *FS
	crashedAtOp  int
	crashedOnOp  Op
	crashedValid bool
}

// New returns an empty file system holding only the root directory "/".
func New() *FS {
	root := &node{dir: true}
	return &FS{
		cur: map[string]*node{"/": root},
		dur: map[string]*node{"/": root},
	}
}

func clean(name string) string { return path.Clean("/" + name) }

// parentOf returns the directory holding p ("/" for "/").
func parentOf(p string) string { return path.Dir(p) }

// mutate runs the bookkeeping of one mutating call, with fs.mu held: power
// cut, then injected faults. A non-nil error means the call must fail
// without effect.
func (fs *FS) mutate(op Op) error {
	if fs.dead {
		return ErrPowerCut
	}
	fs.ops++
	if fs.cutAt != 0 && fs.ops >= fs.cutAt {
		fs.cutLocked(fs.cutInj)
		fs.crashedAtOp, fs.crashedOnOp, fs.crashedValid = fs.ops, op, true
		return ErrPowerCut
	}
	switch op.Kind {
	case OpWrite:
		fs.writes++
		if fs.writes == fs.failWriteAt {
			return fmt.Errorf("%w: write #%d to %s", ErrInjected, fs.writes, op.Path)
		}
	case OpSync:
		fs.syncs++
		if fs.syncs == fs.failSyncAt {
			return fmt.Errorf("%w: sync #%d of %s", ErrInjected, fs.syncs, op.Path)
		}
	}
	if fs.fault != nil {
		return fs.fault(op)
	}
	return nil
}

// OpenFile opens or creates a file. Supported flags: os.O_RDONLY, O_WRONLY,
// O_RDWR, O_CREATE, O_EXCL, O_TRUNC (O_APPEND is rejected: the journal
// never uses it and modelling it adds nothing).
func (fs *FS) OpenFile(name string, flag int, perm fs.FileMode) (wal.File, error) {
	if flag&os.O_APPEND != 0 {
		return nil, &os.PathError{Op: "open", Path: name, Err: errors.New("crashfs: O_APPEND not supported")}
	}
	p := clean(name)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	perr := func(err error) error { return &os.PathError{Op: "open", Path: name, Err: err} }
	if d, ok := fs.cur[parentOf(p)]; !ok || !d.dir {
		return nil, perr(fs.notExistOrNotDir(parentOf(p)))
	}
	n, exists := fs.cur[p]
	switch {
	case exists && n.dir:
		return nil, perr(errors.New("is a directory"))
	case exists && flag&(os.O_CREATE|os.O_EXCL) == os.O_CREATE|os.O_EXCL:
		return nil, perr(os.ErrExist)
	case !exists && flag&os.O_CREATE == 0:
		return nil, perr(os.ErrNotExist)
	}
	writable := flag&(os.O_WRONLY|os.O_RDWR) != 0
	if !exists || (flag&os.O_TRUNC != 0 && writable) {
		if err := fs.mutate(Op{OpCreate, p}); err != nil {
			return nil, perr(err)
		}
		if !exists {
			n = &node{}
			fs.cur[p] = n
		} else if len(n.current) > 0 {
			n.current = n.current[:0]
		}
	}
	return &file{fs: fs, n: n, name: p, writable: writable, readable: flag&os.O_WRONLY == 0}, nil
}

func (fs *FS) notExistOrNotDir(p string) error {
	if n, ok := fs.cur[p]; ok && !n.dir {
		return errors.New("not a directory")
	}
	return os.ErrNotExist
}

// Rename moves a file to a new name (replacing a file there). Directories
// cannot be renamed. Durable once the directories involved are synced.
func (fs *FS) Rename(oldname, newname string) error {
	op, np := clean(oldname), clean(newname)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	lerr := func(err error) error { return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err} }
	n, ok := fs.cur[op]
	if !ok {
		return lerr(os.ErrNotExist)
	}
	if n.dir {
		return lerr(errors.New("crashfs: renaming directories is not supported"))
	}
	if d, ok := fs.cur[parentOf(np)]; !ok || !d.dir {
		return lerr(fs.notExistOrNotDir(parentOf(np)))
	}
	if t, ok := fs.cur[np]; ok && t.dir {
		return lerr(errors.New("is a directory"))
	}
	if err := fs.mutate(Op{OpRename, op + " -> " + np}); err != nil {
		return lerr(err)
	}
	delete(fs.cur, op)
	fs.cur[np] = n
	return nil
}

// Remove deletes a file or an empty directory. Durable once its directory
// is synced.
func (fs *FS) Remove(name string) error {
	p := clean(name)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	perr := func(err error) error { return &os.PathError{Op: "remove", Path: name, Err: err} }
	n, ok := fs.cur[p]
	if !ok || p == "/" {
		return perr(os.ErrNotExist)
	}
	if n.dir && len(fs.childrenLocked(fs.cur, p)) > 0 {
		return perr(errors.New("directory not empty"))
	}
	if err := fs.mutate(Op{OpRemove, p}); err != nil {
		return perr(err)
	}
	delete(fs.cur, p)
	return nil
}

func (fs *FS) childrenLocked(ns map[string]*node, dir string) []string {
	var names []string
	for p := range ns {
		if p != "/" && parentOf(p) == dir {
			names = append(names, path.Base(p))
		}
	}
	slices.Sort(names)
	return names
}

// ReadDir returns the sorted names in dir (current namespace).
func (fs *FS) ReadDir(dir string) ([]string, error) {
	p := clean(dir)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, ok := fs.cur[p]
	if !ok {
		return nil, &os.PathError{Op: "readdir", Path: dir, Err: os.ErrNotExist}
	}
	if !n.dir {
		return nil, &os.PathError{Op: "readdir", Path: dir, Err: errors.New("not a directory")}
	}
	return fs.childrenLocked(fs.cur, p), nil
}

// MkdirAll creates dir and missing parents. Each new directory's entry is
// durable once its parent is synced.
func (fs *FS) MkdirAll(dir string, perm fs.FileMode) error {
	p := clean(dir)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var missing []string
	for q := p; ; q = parentOf(q) {
		if n, ok := fs.cur[q]; ok {
			if !n.dir {
				return &os.PathError{Op: "mkdir", Path: q, Err: errors.New("not a directory")}
			}
			break
		}
		missing = append(missing, q)
	}
	if len(missing) == 0 {
		return nil
	}
	if err := fs.mutate(Op{OpMkdir, p}); err != nil {
		return &os.PathError{Op: "mkdir", Path: dir, Err: err}
	}
	for _, q := range missing {
		fs.cur[q] = &node{dir: true}
	}
	return nil
}

// SyncDir makes the current entries of dir durable (fsync of a directory).
func (fs *FS) SyncDir(dir string) error {
	p := clean(dir)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if n, ok := fs.cur[p]; !ok || !n.dir {
		return &os.PathError{Op: "fsync", Path: dir, Err: fs.notExistOrNotDir(p)}
	}
	if err := fs.mutate(Op{OpSyncDir, p}); err != nil {
		return &os.PathError{Op: "fsync", Path: dir, Err: err}
	}
	for q := range fs.dur {
		if q != "/" && parentOf(q) == p {
			if _, ok := fs.cur[q]; !ok {
				delete(fs.dur, q)
			}
		}
	}
	for q, n := range fs.cur {
		if q != "/" && parentOf(q) == p {
			fs.dur[q] = n
		}
	}
	return nil
}

// FailWriteAfter makes the nth File.WriteAt from now (1 = the next one)
// fail with ErrInjected, without writing. Only that one call fails: it is
// up to the code under test to stop trusting the file. n <= 0 disarms.
func (fs *FS) FailWriteAfter(n int) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.failWriteAt = 0
	if n > 0 {
		fs.failWriteAt = fs.writes + n
	}
}

// FailSyncAfter makes the nth File.Sync from now (1 = the next one) fail
// with ErrInjected; the file's unsynced data stays unsynced. Only that one
// call fails. n <= 0 disarms.
func (fs *FS) FailSyncAfter(n int) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.failSyncAt = 0
	if n > 0 {
		fs.failSyncAt = fs.syncs + n
	}
}

// SetFault installs fn, called before every mutating call (after power-cut
// and FailWriteAfter/FailSyncAfter checks); a non-nil error makes that call
// fail without effect. fn runs with the FS locked and must not call the
// FS. nil removes it.
func (fs *FS) SetFault(fn func(Op) error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.fault = fn
}

// Ops returns how many mutating calls have been made (the numbering that
// CutPowerAt uses).
func (fs *FS) Ops() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.ops
}

// Crash returns the file system as it would be found after a power cut
// now, with file contents decided by inj (nil means DropUnsynced). fs
// itself is not changed and stays usable (see CutPower to also kill it).
func (fs *FS) Crash(inj Injector) *FS {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.crashLocked(inj)
}

// CutPower is Crash plus death: every later mutating call on fs fails with
// ErrPowerCut, so nothing can be acknowledged after the image was taken.
func (fs *FS) CutPower(inj Injector) *FS {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if !fs.dead {
		fs.cutLocked(inj)
	}
	return fs.afterCrash
}

// CutPowerAt arms a power cut just before the nth mutating call from now
// (1 = the next one): that call and all later ones fail with ErrPowerCut,
// and the crash image (taken with inj) is returned by AfterCrash.
func (fs *FS) CutPowerAt(n int, inj Injector) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.cutAt, fs.cutInj = 0, nil
	if n > 0 {
		fs.cutAt, fs.cutInj = fs.ops+n, inj
	}
}

// AfterCrash returns the image taken by CutPower or CutPowerAt, nil if the
// power has not been cut yet.
func (fs *FS) AfterCrash() *FS {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.afterCrash
}

// CutOp returns the call CutPowerAt stopped (ok false if none yet).
func (fs *FS) CutOp() (op Op, n int, ok bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.crashedOnOp, fs.crashedAtOp, fs.crashedValid
}

func (fs *FS) cutLocked(inj Injector) {
	fs.afterCrash = fs.crashLocked(inj)
	fs.dead = true
}

// crashLocked builds the post-crash FS: durable names whose parents are all
// durable, each file with the content inj gives it.
func (fs *FS) crashLocked(inj Injector) *FS {
	reachable := func(p string) bool {
		for q := p; q != "/"; q = parentOf(q) {
			if _, ok := fs.dur[q]; !ok {
				return false
			}
		}
		return true
	}
	paths := make([]string, 0, len(fs.dur))
	for p := range fs.dur {
		if reachable(p) {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	var images []FileImage
	index := map[*node]int{}
	for _, p := range paths {
		n := fs.dur[p]
		if n.dir {
			continue
		}
		if _, seen := index[n]; !seen {
			index[n] = len(images)
			images = append(images, FileImage{Path: p, Durable: n.durable, Current: n.current})
		}
	}
	var contents [][]byte
	if inj == nil {
		inj = DropUnsynced()
	}
	contents = inj.Crash(images)
	if len(contents) != len(images) {
		panic(fmt.Sprintf("crashfs: injector %s returned %d contents for %d files", inj.Name(), len(contents), len(images)))
	}
	out := New()
	made := map[*node]*node{}
	for _, p := range paths {
		old := fs.dur[p]
		if p == "/" {
			continue
		}
		nn, ok := made[old]
		if !ok {
			nn = &node{dir: old.dir}
			if !old.dir {
				c := contents[index[old]]
				nn.durable = slices.Clone(c)
				nn.current = slices.Clone(c)
			}
			made[old] = nn
		}
		out.cur[p] = nn
		out.dur[p] = nn
	}
	return out
}

// Lock locks dir (wal.Locker) in memory: a second Lock of the same dir
// fails with an error matching wal.ErrLocked until the first is released.
// It is not a mutating call (not counted by Ops, never faulted or cut):
// a lock is the process's, not the disk's, and the image Crash returns
// holds none, as the kernel drops a dead process's flocks.
func (fs *FS) Lock(dir string) (func() error, error) {
	p := clean(dir)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.locks[p] {
		return nil, fmt.Errorf("%w (%s, this process)", wal.ErrLocked, dir)
	}
	if fs.locks == nil {
		fs.locks = map[string]bool{}
	}
	fs.locks[p] = true
	var once sync.Once
	return func() error {
		once.Do(func() {
			fs.mu.Lock()
			delete(fs.locks, p)
			fs.mu.Unlock()
		})
		return nil
	}, nil
}

// ReadFile returns the current content of a file.
func (fs *FS) ReadFile(name string) ([]byte, error) {
	p := clean(name)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, ok := fs.cur[p]
	if !ok || n.dir {
		return nil, &os.PathError{Op: "read", Path: name, Err: os.ErrNotExist}
	}
	return slices.Clone(n.current), nil
}

// WriteFile replaces (or creates) a file with data, durably: content and
// directory entry both survive a crash. For setting up test cases (it is
// not counted as an operation and ignores faults); the parent must exist.
func (fs *FS) WriteFile(name string, data []byte) error {
	p := clean(name)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if d, ok := fs.cur[parentOf(p)]; !ok || !d.dir {
		return &os.PathError{Op: "write", Path: name, Err: os.ErrNotExist}
	}
	n, ok := fs.cur[p]
	if ok && n.dir {
		return &os.PathError{Op: "write", Path: name, Err: errors.New("is a directory")}
	}
	if !ok {
		n = &node{}
		fs.cur[p] = n
	}
	n.current = slices.Clone(data)
	n.sync()
	fs.dur[p] = n
	return nil
}

// Files returns the paths of all files (not directories) in the current
// namespace, sorted.
func (fs *FS) Files() []string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var out []string
	for p, n := range fs.cur {
		if !n.dir {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// String lists the files with their current and durable sizes; handy in
// test failure messages.
func (fs *FS) String() string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var paths []string
	for p := range fs.cur {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var b strings.Builder
	for _, p := range paths {
		n := fs.cur[p]
		if n.dir {
			fmt.Fprintf(&b, "%s/\n", p)
			continue
		}
		_, durable := fs.dur[p]
		fmt.Fprintf(&b, "%s current=%d durable=%d name-durable=%v\n", p, len(n.current), len(n.durable), durable)
	}
	return b.String()
}

// file is an open file of an FS.
type file struct {
	fs       *FS
	n        *node
	name     string
	writable bool
	readable bool
	closed   bool
}

func (f *file) check(write bool) error {
	switch {
	case f.closed:
		return os.ErrClosed
	case write && !f.writable:
		return errors.New("crashfs: file not open for writing")
	case !write && !f.readable:
		return errors.New("crashfs: file not open for reading")
	}
	return nil
}

// ReadAt reads current content; io.EOF when fewer than len(p) bytes exist.
func (f *file) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(false); err != nil {
		return 0, &os.PathError{Op: "read", Path: f.name, Err: err}
	}
	if off < 0 {
		return 0, &os.PathError{Op: "read", Path: f.name, Err: errors.New("negative offset")}
	}
	if off >= int64(len(f.n.current)) {
		return 0, io.EOF
	}
	n := copy(p, f.n.current[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// WriteAt writes into current content (growing the file if needed).
func (f *file) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(true); err != nil {
		return 0, &os.PathError{Op: "write", Path: f.name, Err: err}
	}
	if off < 0 {
		return 0, &os.PathError{Op: "write", Path: f.name, Err: errors.New("negative offset")}
	}
	if err := f.fs.mutate(Op{OpWrite, f.name}); err != nil {
		return 0, &os.PathError{Op: "write", Path: f.name, Err: err}
	}
	end := int(off) + len(p)
	if end > len(f.n.current) {
		f.n.current = resize(f.n.current, end)
	}
	copy(f.n.current[off:], p)
	f.n.markDirty(int(off), end)
	return len(p), nil
}

// Sync makes the file's current content durable (fdatasync).
func (f *file) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return &os.PathError{Op: "sync", Path: f.name, Err: os.ErrClosed}
	}
	if err := f.fs.mutate(Op{OpSync, f.name}); err != nil {
		return &os.PathError{Op: "sync", Path: f.name, Err: err}
	}
	f.n.sync()
	return nil
}

// Truncate sets the current size.
func (f *file) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.changeLocked(OpTruncate); err != nil {
		return err
	}
	f.n.current = resize(f.n.current, int(size))
	return nil
}

// Allocate grows the current size to at least size (zeros).
func (f *file) Allocate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.changeLocked(OpAllocate); err != nil {
		return err
	}
	if int(size) > len(f.n.current) {
		f.n.current = resize(f.n.current, int(size))
	}
	return nil
}

// changeLocked admits a change of kind k (truncate, allocate) to the file:
// the handle must be open for writing, and the file system counts the call,
// which a fault or a crash may fail. The caller holds f.fs.mu.
func (f *file) changeLocked(k OpKind) error {
	if err := f.check(true); err != nil {
		return &os.PathError{Op: k.String(), Path: f.name, Err: err}
	}
	if err := f.fs.mutate(Op{k, f.name}); err != nil {
		return &os.PathError{Op: k.String(), Path: f.name, Err: err}
	}
	return nil
}

// resize returns b with length n, new bytes zero.
func resize(b []byte, n int) []byte {
	if n <= len(b) {
		return b[:n]
	}
	old := len(b)
	b = slices.Grow(b, n-old)[:n]
	clear(b[old:])
	return b
}

// Size returns the current size.
func (f *file) Size() (int64, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, &os.PathError{Op: "stat", Path: f.name, Err: os.ErrClosed}
	}
	return int64(len(f.n.current)), nil
}

// Close closes the handle; unsynced data stays unsynced.
func (f *file) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return &os.PathError{Op: "close", Path: f.name, Err: os.ErrClosed}
	}
	f.closed = true
	return nil
}

var _ wal.FS = (*FS)(nil)
