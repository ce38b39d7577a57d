package wal

import (
	"os"
	"path/filepath"
)

// nextTmpName is the one segment file prepared ahead of need. Like every
// *.tmp in the directory it is deleted by Open, so a crash while it exists
// (or before it was renamed into place) leaves nothing behind.
const nextTmpName = "next" + segExt + tmpExt

// prepared is a preallocated, synced, still anonymous segment file.
type prepared struct {
	f    File
	path string
	err  error
}

func (p prepared) discard(fsys FS) {
	if p.f != nil {
		_ = p.f.Close()
		_ = fsys.Remove(p.path) // best effort: Open removes it anyway
	}
}

// preparer makes the next segment file in the background, so that a
// rollover costs a header write, an fdatasync, a rename and a directory
// fsync, but not the preallocation. At most one prepared file exists at a
// time: the writer asks for the next one (request) only after renaming
// the last, and take is only called after a request.
type preparer struct {
	fsys FS
	dir  string
	size int64
	req  chan struct{} // capacity 1: "prepare one"
	out  chan prepared // capacity 1: the result
	quit chan struct{}
	done chan struct{}
	// inline prepares on the caller's goroutine in take, instead of ahead
	// of time (Options.Deterministic).
	inline bool
}

func newPreparer(fsys FS, dir string, size int64, inline bool) *preparer {
	p := &preparer{
		fsys: fsys, dir: dir, size: size,
		req:    make(chan struct{}, 1),
		out:    make(chan prepared, 1),
		quit:   make(chan struct{}),
		done:   make(chan struct{}),
		inline: inline,
	}
	if inline {
		close(p.done)
		return p
	}
	go p.run()
	return p
}

func (p *preparer) run() {
	defer close(p.done)
	for {
		select {
		case <-p.quit:
			return
		case <-p.req:
		}
		r := prepareSegment(p.fsys, p.dir, p.size)
		select {
		case p.out <- r:
		case <-p.quit:
			r.discard(p.fsys)
			return
		}
	}
}

// take returns the prepared file, waiting for it if the preparer is still
// at work.
func (p *preparer) take() prepared {
	if p.inline {
		return prepareSegment(p.fsys, p.dir, p.size)
	}
	return <-p.out
}

// request asks for the next file. The writer calls it only once the file it
// took has been renamed away, as the next one reuses the temporary name.
func (p *preparer) request() {
	if !p.inline {
		p.req <- struct{}{}
	}
}

// stop ends the preparer and deletes a prepared file nobody took.
func (p *preparer) stop() {
	close(p.quit)
	<-p.done
	select {
	case r := <-p.out:
		r.discard(p.fsys)
	default:
	}
}

// prepareSegment creates nextTmpName, preallocates it to size and syncs it,
// so that its size and blocks are durable before any record goes in: later
// fdatasyncs then only flush data.
func prepareSegment(fsys FS, dir string, size int64) prepared {
	path := filepath.Join(dir, nextTmpName)
	f, err := fsys.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, filePerm)
	if err != nil {
		return prepared{path: path, err: &FatalError{Op: "create segment", Path: path, Err: err}}
	}
	if err := f.Allocate(size); err != nil {
		r := prepared{f: f, path: path}
		r.discard(fsys)
		return prepared{path: path, err: &FatalError{Op: "preallocate", Path: path, Err: err}}
	}
	if err := f.Sync(); err != nil {
		r := prepared{f: f, path: path}
		r.discard(fsys)
		return prepared{path: path, err: &FatalError{Op: "sync", Path: path, Err: err}}
	}
	return prepared{f: f, path: path}
}
