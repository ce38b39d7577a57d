package wal

import (
	"path/filepath"
	"runtime"
	"sync/atomic"
	"time"
)

const (
	// maxPending bounds the bytes waiting for the writer. Beyond it
	// Enqueue blocks until the writer takes the batch: memory stays
	// bounded however fast producers are.
	maxPending = 4 << 20

	// gatherMin and gatherMax bound how long the writer waits for
	// appenders it has just released to come back before it starts the
	// next batch (see gather); within them the bound is the duration of
	// the last batch write.
	gatherMin = 20 * time.Microsecond
	gatherMax = 2 * time.Millisecond
)

// batch is a run of encoded frames written with one pwrite and one
// fdatasync (plus a rollover, rarely). Two batches alternate: Enqueue fills
// one while the writer writes the other, and their buffers are reused, so
// the steady state allocates nothing.
type batch struct {
	buf   []byte
	off   int64    // offset in the writer's current segment for buf[0]
	rolls []roll   // segments that start inside buf
	last  uint64   // seq of the last record in buf
	lastH [32]byte // its hash
	// ready counts Append/Sync callers waiting on this batch. Written
	// under l.mu; gather reads it without the lock.
	ready atomic.Int32
	// done is closed when the batch is durable (or the Log failed). The
	// first waiter creates it, so a batch nobody waits for costs nothing.
	// A channel rather than a sync.Cond: woken waiters return without
	// re-taking l.mu, which matters when dozens wake at once.
	done chan struct{}
}

// roll marks where, inside a batch, a new segment begins.
type roll struct {
	at    int      // buf offset of the new segment's first frame
	first uint64   // its seq
	prev  [32]byte // hash of the record before it
}

// newBatch starts a batch buffer small: it grows by append to the largest
// batch seen and keeps that capacity across resets, so a busy journal pays
// for the growth once, and an idle or short-lived one (a recovery that finds
// nothing to do, a model-checker run) does not clear 64 KiB it never uses.
func newBatch() *batch { return &batch{buf: make([]byte, 0, 4<<10)} }

func (b *batch) reset() {
	b.buf, b.rolls, b.last, b.lastH, b.done = b.buf[:0], b.rolls[:0], 0, [32]byte{}, nil
	b.ready.Store(0)
}

// release wakes the batch's waiters.
func (b *batch) release() {
	if b.done != nil {
		close(b.done)
		b.done = nil
	}
}

// Enqueue adds a record to the next batch and returns its seq at once; the
// record is written and fdatasynced with that batch, in seq order with all
// other records. Use Sync to wait for it. The payload is copied before
// Enqueue returns. Enqueue blocks only when maxPending bytes are already
// waiting for the writer.
//
// Enqueue does not wake the writer: a record nobody waits for rides the
// next batch somebody does wait for (an Append or Sync), or is flushed
// FlushDelay after it was enqueued, whichever comes first. This is what lets
// a step's outcome share the next step's intent fsync instead of costing an
// fsync of its own that the next intent would have to wait behind.
func (l *Log) Enqueue(typ uint8, payload []byte) (seq uint64, err error) {
	l.mu.Lock()
	seq, err = l.enqueueLocked(typ, payload)
	if err == nil && !l.flushArmed {
		l.flushArmed = true
		l.flushTimer.Reset(l.flushDelay)
	}
	l.mu.Unlock()
	return seq, err
}

// flushLazy is the FlushDelay timer: records enqueued without a waiter are
// written now.
func (l *Log) flushLazy() {
	l.mu.Lock()
	l.flushArmed = false
	if len(l.pend.buf) > 0 {
		l.kickLocked()
	}
	l.mu.Unlock()
}

// writeAloneLocked writes the pending batch on the calling goroutine when
// nobody else is appending, the last batch served at most one caller, and
// the writer is parked. Waking the writer and being woken by it would add
// two cross-thread wake-ups to the fsync; on an idle machine each costs
// tens of microseconds (measured ~34 µs per wake on a 2-vCPU VM, 20% of
// the fsync floor). Writes stay serialised by l.writing. lastReleased keeps
// concurrent appenders, who may all be between two Appends for an instant,
// on the group-commit path. It reports whether it wrote.
func (l *Log) writeAloneLocked() bool {
	if l.deterministic {
		// A lone caller always writes itself, so batches — and the
		// file-system calls — depend on the records alone: first let the
		// writer goroutine park (it may not have yet after Open, or may
		// be finishing a batch it was handed).
		for !l.writerIdle && !l.closing && l.fatal == nil {
			l.mu.Unlock()
			runtime.Gosched()
			l.mu.Lock()
		}
	} else if l.waiters.Load() != 1 || l.lastReleased > 1 || !l.writerIdle {
		return false
	}
	if l.writing || l.closing || l.fatal != nil || len(l.pend.buf) == 0 {
		return false
	}
	l.pend.ready.Add(1)
	l.writeLocked()
	return true
}

// Append adds a record and returns once it is durable (its batch has been
// written and fdatasynced). Concurrent Appends share batches (group
// commit). The payload is copied, so the caller may reuse it. If the Log
// fails after the record was queued, Append returns its seq with the fatal
// error: that record may or may not be on disk (recovery will tell).
func (l *Log) Append(typ uint8, payload []byte) (seq uint64, err error) {
	// Counted from before taking the lock: gather must also wait for
	// appenders still queued on l.mu.
	l.waiters.Add(1)
	defer l.waiters.Add(-1)
	l.mu.Lock()
	seq, err = l.enqueueLocked(typ, payload)
	if err != nil {
		l.mu.Unlock()
		return 0, err
	}
	if l.writeAloneLocked() {
		err = l.fatal
		if l.durable >= seq {
			err = nil
		}
		l.mu.Unlock()
		return seq, err
	}
	l.kickLocked()
	return seq, l.waitAndUnlock(seq)
}

// Sync returns once every record enqueued before the call is durable. It
// returns the sticky *FatalError if the Log has failed, and ErrClosed
// after Close.
func (l *Log) Sync() error {
	l.waiters.Add(1)
	defer l.waiters.Add(-1)
	l.mu.Lock()
	target := l.nextSeq - 1
	if l.fatal == nil && l.durable >= target && l.closing {
		l.mu.Unlock()
		return ErrClosed
	}
	if l.durable < target && l.writeAloneLocked() && l.fatal == nil && l.durable >= target {
		l.mu.Unlock()
		return nil
	}
	l.kickLocked()
	return l.waitAndUnlock(target)
}

func (l *Log) enqueueLocked(typ uint8, payload []byte) (uint64, error) {
	if typ == 0 {
		return 0, ErrInvalidType
	}
	if len(payload) > l.maxPay {
		return 0, ErrTooLarge
	}
	for {
		if l.fatal != nil {
			return 0, l.fatal
		}
		if l.closing {
			return 0, ErrClosed
		}
		if len(l.pend.buf) < maxPending {
			break
		}
		l.kickLocked()
		l.spaceWait.Add(1)
		l.spaceCond.Wait()
		l.spaceWait.Add(-1)
	}
	b := l.pend
	if len(b.buf) == 0 {
		b.off = l.segOff
	}
	flen := int64(frameOverhead + len(payload))
	if l.segOff+flen > l.segCap {
		// The frame does not fit: the next segment starts with it. The
		// writer creates that segment when it reaches this point.
		b.rolls = append(b.rolls, roll{at: len(b.buf), first: l.nextSeq, prev: l.prevHash})
		l.segOff, l.segCap = segHeaderSize, l.segSize
	}
	seq := l.nextSeq
	b.buf, l.prevHash = appendFrame(b.buf, l.sha, &l.prevHash, seq, typ, payload)
	l.nextSeq++
	l.segOff += flen
	b.last, b.lastH = seq, l.prevHash
	return seq, nil
}

// kickLocked wakes the writer goroutine if it is parked.
func (l *Log) kickLocked() {
	// Nothing pending and not closing: the writer would only park again —
	// or, woken, find a record enqueued meanwhile for a later batch and
	// write it on its own, an extra write that depends on scheduling.
	if len(l.pend.buf) == 0 && !l.closing && l.fatal == nil {
		return
	}
	if l.writerIdle {
		l.writerIdle = false
		l.workCond.Signal()
	}
}

// waitAndUnlock waits until seq is durable or the Log has failed. It is
// called with l.mu held and returns with it released. The caller counts
// itself in l.waiters.
func (l *Log) waitAndUnlock(seq uint64) error {
	counted := false
	for {
		if l.fatal != nil {
			err := l.fatal
			l.mu.Unlock()
			return err
		}
		if l.durable >= seq {
			l.mu.Unlock()
			return nil
		}
		b := l.pend
		if l.inflight != nil && seq <= l.inflight.last {
			b = l.inflight
		} else if !counted {
			b.ready.Add(1)
			counted = true
		}
		if b.done == nil {
			b.done = make(chan struct{})
		}
		ch := b.done
		l.mu.Unlock()
		<-ch
		if l.durableSeq.Load() >= seq {
			return nil
		}
		l.mu.Lock() // the Log failed (or, impossibly, a spurious wake)
	}
}

// writer is the goroutine that writes batches: it takes the whole pending
// batch, writes and syncs it with the lock released (so the next batch
// fills meanwhile), then releases that batch's waiters. The only other
// writes are a lone Append's (see Append); l.writing serialises the two.
func (l *Log) writer() {
	defer close(l.done)
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		for l.fatal == nil && (l.writing || (len(l.pend.buf) == 0 && !l.closing)) {
			l.writerIdle = true
			l.workCond.Wait()
			l.writerIdle = false
		}
		if l.fatal != nil || len(l.pend.buf) == 0 {
			return // failed, or closing with everything written
		}
		l.gather()
		l.writeLocked()
	}
}

// writeLocked writes the pending batch; called with l.mu held and
// l.writing false, it releases the lock during the I/O.
func (l *Log) writeLocked() {
	b := l.pend
	l.pend, l.spare = l.spare, nil
	l.inflight = b
	l.writing = true
	if l.spaceWait.Load() > 0 {
		l.spaceCond.Broadcast()
	}
	l.mu.Unlock()
	t0 := time.Now()
	err := l.writeBatch(b)
	took := time.Since(t0)
	if err == nil && l.onBatch != nil {
		// Batches complete one at a time, so durableSeq is still the
		// previous batch's last seq here.
		l.onBatch.ObserveBatch(int(b.last-l.durableSeq.Load()), len(b.buf), took)
	}
	if err == nil && len(b.rolls) > 0 {
		// A new segment: the anchor moves into it at once, so that losing
		// the newest segment can never go unnoticed. (Rare: a rollover
		// per SegmentSize of records.)
		l.anchorTo(anchor{seq: b.last, hash: b.lastH})
	}
	l.mu.Lock()
	l.lastWrite = took
	l.inflight = nil
	l.writing = false
	if err != nil {
		l.fatal = err
		// Wake everyone — waiters of both batches, blocked enqueuers, the
		// writer goroutine — to see the sticky error.
		b.release()
		l.pend.release()
		l.spaceCond.Broadcast()
		l.workCond.Signal()
		return
	}
	l.stats.Batches++
	l.stats.Records += b.last - l.durable
	l.stats.Bytes += uint64(len(b.buf))
	l.stats.Rollovers += uint64(len(b.rolls))
	l.stats.SegmentFiles += len(b.rolls)
	l.stats.SegmentBytes += int64(len(b.rolls)) * l.segSize
	l.durable, l.durableH = b.last, b.lastH
	l.durableSeq.Store(b.last)
	l.lastReleased = int(b.ready.Load())
	b.release()
	b.reset()
	l.spare = b
	if len(l.pend.buf) > 0 || l.closing {
		l.kickLocked() // records arrived while a lone Append was writing
	}
}

// gather gives appenders that the previous batch just released a moment to
// enqueue their next record before the writer starts the next batch.
// Without it, with N goroutines appending in a loop, the writer grabs the
// first one or two records, and the rest wait a whole extra fsync: batches
// alternate tiny/large and latency doubles. It waits only while some
// Append/Sync caller is not yet covered by the pending batch: callers are
// counted from entering Append to returning from it, so this waits for
// goroutines that are runnable but not yet scheduled, never for the
// caller's own work between two Appends. The wait is bounded by the last
// batch's write time (within [gatherMin, gatherMax]): a straggler left out
// waits a whole write, so waiting less than that for it is worth it.
//
// The wait polls two counters with the lock released, yielding the CPU to
// the goroutines it waits for: l.pend cannot change meanwhile, as only the
// goroutine running gather swaps batches (a lone Append cannot write while
// the writer is not parked).
func (l *Log) gather() {
	b := l.pend
	if b.ready.Load() >= l.waiters.Load() || l.closing {
		return
	}
	limit := min(max(l.lastWrite, gatherMin), gatherMax)
	l.mu.Unlock()
	start := time.Now()
	for i := 0; b.ready.Load() < l.waiters.Load() && l.spaceWait.Load() == 0; i++ {
		// Reading the clock costs as much as the check: do it every 8th
		// round (a round is one Gosched, well under a microsecond).
		if i%8 == 7 && time.Since(start) >= limit {
			break
		}
		runtime.Gosched()
	}
	l.mu.Lock()
}

// writeBatch writes b with one pwrite and one fdatasync per segment it
// touches. Before a new segment is created the old one is synced, so on
// disk a segment exists only if every record before it is durable: that
// is what lets Open treat a bad frame followed by a later segment as
// corruption rather than a torn tail.
func (l *Log) writeBatch(b *batch) error {
	start, off := 0, b.off
	for i, r := range b.rolls {
		if r.at > start {
			if err := l.writeSync(b.buf[start:r.at], off); err != nil {
				return err
			}
		}
		end := len(b.buf)
		if i+1 < len(b.rolls) {
			end = b.rolls[i+1].at
		}
		if !l.prepAsked {
			l.prep.request() // a batch jumped past the half-way mark
		}
		p := l.prep.take()
		l.prepAsked = false
		if p.err != nil {
			return p.err
		}
		if err := l.install(p, r.first, r.prev, b.buf[r.at:end]); err != nil {
			p.discard(l.fsys)
			return err
		}
		start, off = end, segHeaderSize+int64(end-r.at)
	}
	if start < len(b.buf) {
		if err := l.writeSync(b.buf[start:], off); err != nil {
			return err
		}
	}
	l.maybePrepare(off + int64(len(b.buf)-start))
	return nil
}

// maybePrepare asks for the next segment once the current one is half
// full (end is where its data now ends). Not earlier: preparing writes a
// whole segment of zeros, and doing it at Open would compete for the disk
// with the first appends. Half a segment of appends is ample time for it.
func (l *Log) maybePrepare(end int64) {
	if !l.prepAsked && end >= l.curCap/2 {
		l.prep.request()
		l.prepAsked = true
	}
}

// writeSync is the steady-state path: one pwrite into the preallocated
// segment, one fdatasync. The data is the batch buffer itself: no copy.
func (l *Log) writeSync(p []byte, off int64) error {
	if _, err := l.cur.WriteAt(p, off); err != nil {
		return &FatalError{Op: "write", Path: l.curPath(), Err: err}
	}
	if err := l.cur.Sync(); err != nil {
		return &FatalError{Op: "sync", Path: l.curPath(), Err: err}
	}
	return nil
}

func (l *Log) curPath() string { return filepath.Join(l.dir, l.curName) }

// install turns prepared file p into the segment starting at seq first:
// header and first records written, fdatasync, rename to the final name,
// directory fsync. Until the directory fsync the new name may vanish in a
// crash, which is harmless: none of its records has been acknowledged yet,
// and the old segment is complete and synced.
func (l *Log) install(p prepared, first uint64, prev [32]byte, records []byte) error {
	hdr := segHeader{firstSeq: first, prevHash: prev}
	hdr.encode(l.hdrBuf)
	fail := func(op string, err error) error { return &FatalError{Op: op, Path: p.path, Err: err} }
	if _, err := p.f.WriteAt(l.hdrBuf, 0); err != nil {
		return fail("write", err)
	}
	if len(records) > 0 {
		if _, err := p.f.WriteAt(records, segHeaderSize); err != nil {
			return fail("write", err)
		}
	}
	if err := p.f.Sync(); err != nil {
		return fail("sync", err)
	}
	name := segName(first)
	if err := l.fsys.Rename(p.path, filepath.Join(l.dir, name)); err != nil {
		return fail("rename", err)
	}
	if err := l.fsys.SyncDir(l.dir); err != nil {
		return &FatalError{Op: "sync directory", Path: l.dir, Err: err}
	}
	if l.cur != nil {
		// The old segment is complete and synced; a close error changes
		// nothing on disk.
		_ = l.cur.Close()
	}
	l.cur, l.curName, l.curCap = p.f, name, l.segSize
	return nil
}
