package wal

import "fmt"

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
}

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
	return o, nil
}

// maxPayload is the largest payload whose frame fits in an empty segment
// of the configured size.
func (o Options) maxPayload() int {
	return int(o.SegmentSize - segHeaderSize - frameOverhead)
}
