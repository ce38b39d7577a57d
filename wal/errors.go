package wal

import (
	"errors"
	"fmt"
)

var (
	// ErrCorrupt is matched (errors.Is) by every *CorruptionError: the
	// journal holds bytes that are not a torn tail, so it cannot be opened
	// until an operator repairs it (see TruncateAt).
	ErrCorrupt = errors.New("wal: corrupt journal")

	// ErrClosed is returned by calls on a Log after Close.
	ErrClosed = errors.New("wal: log closed")

	// ErrFatal is matched (errors.Is) by every *FatalError. Once a write or
	// an fsync has failed, the page cache may have dropped the dirty pages
	// and a later successful fsync proves nothing, so the Log refuses all
	// further work rather than retry.
	ErrFatal = errors.New("wal: fatal I/O error, journal no longer trusted")

	// ErrTooLarge is returned when a record cannot fit in one segment.
	// It is not fatal: the Log stays usable.
	ErrTooLarge = errors.New("wal: record larger than a segment")

	// ErrInvalidType is returned for record type 0, which is reserved so
	// that zero-filled bytes never parse as a record. It is not fatal.
	ErrInvalidType = errors.New("wal: record type 0 is reserved")
)

// CorruptionError reports invalid bytes that are followed by valid data
// (or otherwise cannot be explained by a torn write): the journal refuses
// to guess, and names where the damage starts.
type CorruptionError struct {
	Segment string // file name of the segment (not the full path)
	Offset  int64  // byte offset in Segment where the first invalid byte is
	Seq     uint64 // sequence number expected at Offset
	Reason  string // what check failed
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("wal: corrupt journal: segment %s offset %d seq %d: %s",
		e.Segment, e.Offset, e.Seq, e.Reason)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptionError) Is(target error) bool { return target == ErrCorrupt }

// TailCut describes a torn tail: invalid bytes at the end of the last
// segment with no valid frame after them. Open removes them (keeping a copy
// in BrokenFile); Verify only reports them.
type TailCut struct {
	Segment    string // file name of the segment that was cut
	Offset     int64  // where the cut starts (end of the last valid frame)
	Bytes      int64  // how many bytes were cut (up to the last non-zero byte)
	BrokenFile string // file name holding the cut bytes; empty for Verify
	Reason     string // why the frame at Offset did not parse
}

func (t *TailCut) String() string {
	return fmt.Sprintf("tail cut: segment %s offset %d, %d bytes (%s) saved to %q",
		t.Segment, t.Offset, t.Bytes, t.Reason, t.BrokenFile)
}

// FatalError wraps the write, sync or file-system error that made the Log
// stop. It is sticky: every waiter of the failed batch and every later call
// gets the same error.
type FatalError struct {
	Op   string // "write", "sync", "rollover", ...
	Path string // file involved, if any
	Err  error  // the underlying error
}

func (e *FatalError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("wal: fatal %s error (journal no longer trusted): %v", e.Op, e.Err)
	}
	return fmt.Sprintf("wal: fatal %s error on %s (journal no longer trusted): %v", e.Op, e.Path, e.Err)
}

// Unwrap gives access to the underlying I/O error.
func (e *FatalError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrFatal) true.
func (e *FatalError) Is(target error) bool { return target == ErrFatal }
