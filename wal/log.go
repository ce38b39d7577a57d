package wal

import (
	"crypto/sha256"
	"errors"
	"hash"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// OpenReport is what Open found (and repaired) in the directory.
type OpenReport struct {
	Records  uint64   // valid records found
	Segments int      // segment files found
	LastSeq  uint64   // last valid record, 0 for an empty journal
	LastHash [32]byte // its hash (GenesisHash() for an empty journal)
	// TailCut describes the torn tail Open cut off, nil if there was none.
	TailCut *TailCut
	// LossAccepted is the loss Open found and went past because of
	// Options.AcceptLoss; nil if nothing was lost. The caller journals it.
	LossAccepted *LossError
	// Checkpoint is the checkpoint Open started from (nil: the journal's
	// start): Records counts only the records after it, the ones the
	// caller must apply on top of its payload.
	Checkpoint *Checkpoint
	// CheckpointsDamaged are checkpoint files that did not decode and
	// were passed over (an older one, or the whole journal, stood in:
	// nothing is lost by it). They are left in place for the operator.
	CheckpointsDamaged []CheckpointDamage
}

// Log is an open journal. Append, Enqueue, Sync, LastSeq and Err may be
// called from any number of goroutines. Writes are serialised: an internal
// writer goroutine does them, except that a lone Append writes its own
// batch (see Append). The Log holds the directory's lock from Open to
// Close (see Locker).
type Log struct {
	dir     string
	fsys    FS
	unlock  func() error // releases the directory's lock (Close)
	segSize int64        // size of new segments
	maxPay  int
	report  OpenReport

	mu        sync.Mutex
	workCond  sync.Cond // the writer waits here for records; L = &mu
	spaceCond sync.Cond // Enqueue waits here when the pending batch is full
	sha       hash.Hash // guarded by mu: Enqueue hashes under the lock

	nextSeq    uint64
	prevHash   [32]byte
	segOff     int64    // where the next frame goes, in the segment that will hold it
	segCap     int64    // size of that segment
	pend       *batch   // records enqueued and not yet taken by the writer
	spare      *batch   // the other batch, when not in flight
	inflight   *batch   // batch being written, nil when the writer is idle
	durable    uint64   // every seq <= durable is on disk and fdatasynced
	durableH   [32]byte // the hash of record durable
	fatal      error    // sticky *FatalError
	closing    bool
	writing    bool // a batch is being written (by the writer or a lone Append)
	writerIdle bool // the writer goroutine is parked on workCond
	stats      Stats
	lastWrite  time.Duration // how long the last batch took to write and sync
	// lastReleased is how many Append/Sync callers the last batch served:
	// more than one means concurrent appenders, who should be grouped.
	lastReleased int

	// Read without l.mu: woken waiters check durableSeq (a copy of
	// durable, stored before their batch's channel is closed), and leave
	// without re-taking the lock; waiters counts goroutines inside Append
	// or Sync and spaceWait those blocked in Enqueue on a full batch, for
	// gather.
	durableSeq atomic.Uint64
	waiters    atomic.Int32
	spaceWait  atomic.Int32

	// Owned by whoever has l.writing set (the writer goroutine, or a lone
	// Append), and by Open/Close around them.
	cur       File
	curName   string
	curCap    int64 // size of cur
	hdrBuf    []byte
	prep      *preparer
	prepAsked bool // a prepared segment has been requested and not yet taken
	done      chan struct{}

	// flushTimer writes records nobody waits for FlushDelay after the
	// first of them was enqueued (see Enqueue); flushArmed is guarded by mu.
	flushTimer *time.Timer
	flushDelay time.Duration
	flushArmed bool

	// The anchor (anchor.go): anchorMu serialises its writes (the
	// anchorer goroutine, a rollover, Close, retention); anchor is what
	// it says now (seq 0 before the first write).
	anchorMu   sync.Mutex
	anchor     anchor
	anchorStop chan struct{} // nil without an anchorer goroutine
	anchorDone chan struct{}

	// ckptMu serialises checkpoint writes and retention passes.
	ckptMu    sync.Mutex
	retention Retention // Options.Retention

	onBatch BatchObserver // Options.OnBatch
	// deterministic: Options.Deterministic (a lone caller always writes
	// itself; segments prepared when needed).
	deterministic bool
}

// Open opens (creating if needed) the journal in dir. It first locks the
// directory (see Locker; OSFS: flock on DIR/LOCK): a journal another Log
// holds is refused at once with an error matching ErrLocked, and nothing
// in it is read or changed. The Log keeps the lock until Close. Open then
// verifies every segment and record; a torn tail is cut (bytes kept in a
// .broken file, see OpenReport().TailCut) and anything invalid before a
// valid record makes Open fail with a *CorruptionError. Leftover *.tmp
// files from a crash are deleted. Creating a journal writes its first
// segment in full (SegmentSize bytes of zeros, see FS.Allocate) before
// Open returns. On error the lock is released.
func Open(dir string, opt Options) (_ *Log, err error) {
	opt, err = opt.withDefaults()
	if err != nil {
		return nil, err
	}
	fsys := opt.FS
	if err := makeDir(fsys, dir); err != nil {
		return nil, err
	}
	// The lock comes before anything is read or cut: a second Open must
	// not repair a "torn tail" that is the first Log's batch in flight.
	unlock, err := lockDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			unlock()
		}
	}()
	if err := removeTemps(fsys, dir); err != nil {
		return nil, err
	}
	if err := tightenPerms(fsys, dir); err != nil {
		return nil, err
	}
	anc, aerr := readAnchor(fsys, dir)
	var dmg *anchorDamage
	if aerr != nil && !errors.As(aerr, &dmg) {
		return nil, aerr
	}
	sp, err := findStart(fsys, dir)
	if err != nil {
		return nil, err
	}
	var ancSeq uint64
	if anc != nil {
		ancSeq = anc.seq
	}
	wo := sp.walkOpts(ancSeq)
	if sp.ckpt == nil && opt.AcceptLoss {
		wo.trustFirst = true // segments missing at the start: accepted below
	}
	res, err := walk(fsys, dir, wo)
	if err != nil {
		return nil, err
	}
	if res.corrupt != nil {
		return nil, res.corrupt
	}
	loss := sp.loss(res.lastSeq)
	if loss == nil {
		loss = checkAnchor(anc, aerr, res, res.hashAt)
	}
	if loss != nil && !opt.AcceptLoss {
		return nil, loss
	}
	l := &Log{
		dir:      dir,
		fsys:     fsys,
		unlock:   unlock,
		segSize:  opt.SegmentSize,
		maxPay:   opt.maxPayload(),
		nextSeq:  res.lastSeq + 1,
		prevHash: res.lastHash,
		durable:  res.lastSeq,
		durableH: res.lastHash,
		hdrBuf:   make([]byte, segHeaderSize),
		done:     make(chan struct{}),
		sha:      sha256.New(),
		report: OpenReport{
			Records:            res.records,
			Segments:           res.segments,
			LastSeq:            res.lastSeq,
			LastHash:           res.lastHash,
			Checkpoint:         sp.ckpt,
			CheckpointsDamaged: sp.damaged,
		},
		retention: opt.Retention,
	}
	l.stats.FirstSeq = 1
	if len(sp.segs) > 0 {
		l.stats.FirstSeq, l.stats.SegmentFiles = sp.segs[0].first, len(sp.segs)
		for _, s := range sp.segs {
			n, err := fileSize(fsys, filepath.Join(dir, s.name))
			if err != nil {
				return nil, err
			}
			l.stats.SegmentBytes += n
		}
	}
	if sp.ckpt != nil {
		l.stats.CheckpointSeq = sp.ckpt.At.Seq
	}
	l.anchor.first = 1
	if len(sp.segs) > 0 {
		l.anchor.first = sp.segs[0].first
	}
	if loss == nil && anc != nil {
		l.anchor = *anc
	}
	if res.torn != nil {
		cut, err := cutSegment(fsys, dir, res.torn.Segment, res.torn.Offset, res.torn.Reason)
		if err != nil {
			return nil, err
		}
		l.report.TailCut = cut
	}
	if res.seg < 0 {
		// Empty journal: create segment 1 now, the same crash-safe way as
		// every rollover, so the directory always holds a valid head.
		p := prepareSegment(fsys, dir, l.segSize)
		if p.err != nil {
			return nil, p.err
		}
		if err := l.install(p, 1, GenesisHash(), nil); err != nil {
			p.discard(fsys)
			return nil, err
		}
		l.report.Segments = 1
		l.stats.SegmentFiles, l.stats.SegmentBytes = 1, l.segSize
		l.segOff, l.segCap = segHeaderSize, l.segSize
	} else {
		name := res.segs[res.seg].name
		f, err := fsys.OpenFile(filepath.Join(dir, name), os.O_RDWR, 0)
		if err != nil {
			return nil, err
		}
		// Existing segments keep their own size even if Options changed.
		l.cur, l.curName, l.curCap = f, name, res.segSize
		l.segOff, l.segCap = res.off, res.segSize
	}
	l.pend, l.spare = newBatch(), newBatch()
	l.durableSeq.Store(l.durable)
	l.workCond.L, l.spaceCond.L = &l.mu, &l.mu
	l.flushDelay = opt.FlushDelay
	l.onBatch = opt.OnBatch
	l.deterministic = opt.Deterministic
	l.flushTimer = time.AfterFunc(time.Hour, l.flushLazy)
	l.flushTimer.Stop()
	l.prep = newPreparer(fsys, dir, l.segSize, opt.Deterministic)
	if loss != nil {
		// Accepted: from here on the journal is what is left. The anchor
		// moves back to its end, before anything new is written.
		l.report.LossAccepted = loss
		if err := setAsideCheckpoints(fsys, dir, sp.mismatch); err != nil {
			l.prep.stop()
			l.cur.Close()
			return nil, err
		}
		if err := writeAnchor(fsys, dir, anchor{seq: l.durable, hash: l.durableH, first: l.anchor.first}); err != nil {
			l.prep.stop()
			l.cur.Close()
			return nil, err
		}
		l.anchor = anchor{seq: l.durable, hash: l.durableH, first: l.anchor.first}
	}
	l.maybePrepare(l.segOff)
	if !opt.Deterministic && opt.AnchorEvery > 0 {
		l.anchorStop, l.anchorDone = make(chan struct{}), make(chan struct{})
		go l.anchorer(opt.AnchorEvery)
	}
	go l.writer()
	// Let the writer park before the first record: one that woke late
	// would find a record enqueued meanwhile and write it on its own, in a
	// batch of one, where Enqueue says it waits for the next batch or
	// FlushDelay. (Once done under Deterministic only; a slow machine —
	// qemu, a loaded Pi — starts the writer that late:
	// TestEnqueueWaitsForTheWriterToPark.)
	l.mu.Lock()
	for !l.writerIdle {
		l.mu.Unlock()
		runtime.Gosched()
		l.mu.Lock()
	}
	l.mu.Unlock()
	return l, nil
}

// makeDir creates dir if missing and fsyncs the parent of every directory
// it created, so the journal's directory itself survives a power cut.
func makeDir(fsys FS, dir string) error {
	missing := ancestorsToCreate(fsys, dir)
	if len(missing) == 0 {
		return nil
	}
	if err := fsys.MkdirAll(dir, dirPerm); err != nil {
		return err
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := fsys.SyncDir(filepath.Dir(missing[i])); err != nil {
			return err
		}
	}
	return nil
}

// removeTemps deletes the *.tmp files a crash can leave: a prepared segment
// never renamed into place, a half-written .broken copy. None of them can
// hold a record that was acknowledged.
func removeTemps(fsys FS, dir string) error {
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return err
	}
	removed := false
	for _, n := range names {
		if strings.HasSuffix(n, tmpExt) {
			if err := fsys.Remove(filepath.Join(dir, n)); err != nil {
				return err
			}
			removed = true
		}
	}
	if removed {
		return fsys.SyncDir(dir)
	}
	return nil
}

// OpenReport returns what Open found.
func (l *Log) OpenReport() OpenReport { return l.report }

// Dir returns the journal's directory.
func (l *Log) Dir() string { return l.dir }

// LastSeq returns the seq of the last record appended or enqueued (durable
// or not); see DurableSeq for the last synced one.
func (l *Log) LastSeq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nextSeq - 1
}

// DurableSeq returns the seq up to which every record is fdatasynced.
func (l *Log) DurableSeq() uint64 { return l.durableSeq.Load() }

// DurableHead returns the last fdatasynced record's seq and chain hash
// (GenesisHash() for an empty journal): the head a reader of the journal
// on disk would find.
func (l *Log) DurableHead() (uint64, [32]byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.durable, l.durableH
}

// Stats counts what the Log has written since Open.
type Stats struct {
	Batches   uint64 // batches written (one pwrite + fdatasync each, plus rollovers)
	Records   uint64 // records written and synced
	Bytes     uint64 // frame bytes written (headers of new segments excluded)
	Rollovers uint64 // new segments started
	// AnchorFailures counts anchor writes that failed (the anchor then
	// stays where it was: it protects less, and nothing is wrong).
	AnchorFailures uint64
	// Checkpoints counts checkpoints written; CheckpointSeq is the record
	// the newest one covers (Open's, until one is written).
	Checkpoints   uint64
	CheckpointSeq uint64
	// SegmentsDeleted counts segments retention deleted; SegmentFiles,
	// SegmentBytes and FirstSeq describe the segments left, as of Open
	// or the last retention pass.
	SegmentsDeleted uint64
	SegmentFiles    int
	SegmentBytes    int64
	FirstSeq        uint64
}

// Stats returns the counters; Records/Batches is the group-commit factor.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// Err returns the sticky fatal error (a *FatalError), nil while healthy.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fatal
}

// Close writes and syncs everything enqueued, stops the writer, closes
// the files (waiting for a segment preparation in progress, and deleting
// an unused prepared segment) and then releases the directory's lock. No
// goroutine of the Log's outlives it. It returns the fatal error if the
// Log had failed, ErrClosed if already closed.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closing = true
	l.workCond.Signal()
	l.spaceCond.Broadcast()
	l.mu.Unlock()

	<-l.done // the writer flushes the pending batch before it exits
	l.flushTimer.Stop()
	if l.anchorStop != nil {
		close(l.anchorStop)
		<-l.anchorDone
	}
	l.mu.Lock()
	last, failed := anchor{seq: l.durable, hash: l.durableH}, l.fatal != nil
	l.mu.Unlock()
	if !failed {
		l.anchorTo(last) // everything written is durable: the anchor follows
	}
	l.prep.stop()
	err := l.cur.Close()
	// Last: every file is closed, so the next owner finds the journal
	// as this one left it.
	if uerr := l.unlock(); err == nil {
		err = uerr
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fatal != nil {
		return l.fatal
	}
	return err
}
