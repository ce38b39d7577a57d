package wal

import (
	"fmt"
	"time"
)

// Segment size limits. The minimum keeps at least one small record per
// segment; the maximum keeps every offset and frame length well inside the
// 32-bit length field.
const (
	DefaultSegmentSize = 16 << 20
	MinSegmentSize     = 512
	MaxSegmentSize     = 1 << 30
)

// Options configures Open, Verify, Scan and TruncateAt.
type Options struct {
	// SegmentSize is the preallocated size of new segment files. 0 means
	// DefaultSegmentSize (16 MiB). A record must fit in one segment, so the
	// largest payload is SegmentSize-113 bytes. Existing segments keep the
	// size they were created with.
	SegmentSize int64
	// FS is the file system; nil means the operating system's (OSFS).
	FS FS
	// FlushDelay bounds how long a record enqueued with nobody waiting for
	// it stays in memory before the writer writes it anyway. 0 means
	// DefaultFlushDelay. Such records are lost by a crash within the delay;
	// by design only records whose durability nobody needs are enqueued.
	FlushDelay time.Duration
	// Deterministic makes the file-system calls come in an order fixed by
	// the records alone, so that a crash "before the nth call" means the
	// same moment on every run: each new segment is prepared when it is
	// needed instead of ahead of time in the background, and a caller with
	// nobody to group with always writes its batch itself rather than
	// sometimes handing it to the writer goroutine. For model checking
	// (cmd/saga-modelcheck/internal/modelcheck) of a single caller at a time; it makes
	// rollovers slower and gives up the writer's batching under
	// concurrency.
	Deterministic bool
	// OnBatch, if set, is told of each batch once it is durable: the
	// journal's latency and group-commit factor, for metrics. An interface
	// rather than a func so that Options stay comparable.
	OnBatch BatchObserver
	// AnchorEvery is how often, while records are written, the anchor is
	// moved to the newest durable record (see anchor.go): records older
	// than that are protected against deletion and replacement. 0 means
	// DefaultAnchorEvery (1 s); negative, only at rollovers and Close (so
	// always with Deterministic).
	AnchorEvery time.Duration
	// AcceptLoss lets Open proceed on a journal that lost records its
	// anchor vouches for (a *LossError otherwise): the operator has seen
	// what is gone and decided to go on. Open then reports the loss in
	// OpenReport().LossAccepted, for the caller to journal, and moves the
	// anchor to where the journal now ends.
	AcceptLoss bool
	// Retention bounds the journal's disk use once checkpoints are
	// written (see Retention); the zero value keeps every segment.
	Retention Retention
}

// BatchObserver is told of every durable batch (Options.OnBatch).
type BatchObserver interface {
	// ObserveBatch is called after a batch's write and fdatasync (and a
	// rollover's segment install) succeeded, with the number of records
	// and frame bytes it carried and how long that took. Calls never
	// overlap (writes are serialised) and are made before the batch's
	// waiters are released, without the Log's lock: it must be quick and
	// must not block. It may call the Log's read-only methods. A failed
	// batch is not reported (the Log is then failed; see Err).
	ObserveBatch(records, bytes int, took time.Duration)
}

// DefaultFlushDelay is the default Options.FlushDelay: long enough that a
// robot's next command (typically every 5–50 ms) usually carries the
// previous outcome in its own fsync, short enough that the audit trail
// trails by no more than a few control periods.
const DefaultFlushDelay = 10 * time.Millisecond

func (o Options) withDefaults() (Options, error) {
	if o.SegmentSize == 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	if o.SegmentSize < MinSegmentSize || o.SegmentSize > MaxSegmentSize {
		return o, fmt.Errorf("wal: SegmentSize %d outside [%d, %d]", o.SegmentSize, MinSegmentSize, MaxSegmentSize)
	}
	if o.FS == nil {
		o.FS = OSFS{}
	}
	if o.FlushDelay < 0 {
		return o, fmt.Errorf("wal: negative FlushDelay %v", o.FlushDelay)
	}
	if o.AnchorEvery == 0 {
		o.AnchorEvery = DefaultAnchorEvery
	}
	if o.FlushDelay == 0 {
		o.FlushDelay = DefaultFlushDelay
	}
	return o, nil
}

// maxPayload is the largest payload whose frame fits in an empty segment
// of the configured size.
func (o Options) maxPayload() int {
	return int(o.SegmentSize - segHeaderSize - frameOverhead)
}
