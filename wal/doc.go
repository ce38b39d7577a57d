// Package wal is saga-supervisor's write-ahead journal: an append-only,
// segmented log of opaque records, each fdatasynced before the caller is
// told it is durable, chained with SHA-256 so that any change to a durable
// record is detected. It knows nothing about sagas; callers give it a
// record type (1-255) and a payload.
//
// # Writing
//
// One writer goroutine owns the files. Append encodes the record (frame,
// hash, CRC) under a mutex into the pending batch buffer and waits; Enqueue
// does the same without waiting (Sync waits for everything enqueued so
// far). Enqueue does not wake the writer: a record nobody waits for rides
// the next batch that somebody does wait for, or is written FlushDelay
// (default 10 ms) after it was enqueued — so a saga step's outcome shares
// the next step's intent fsync instead of an fsync of its own. The writer takes the whole pending batch, writes it with one
// pwrite into the preallocated segment, calls fdatasync once, and releases
// every waiter of that batch; records arriving meanwhile form the next
// batch (group commit). Before starting a batch, the writer gives the
// appenders it has just released (runnable, not yet scheduled) a moment to
// come back — at most as long as the last write took — so that N
// goroutines appending in a loop share one fsync instead of alternating
// between a tiny and a large batch. One shortcut: an Append (or Sync) made
// while no other Append or Sync is in progress, the last batch served at most one
// caller, and the writer is parked, writes the pending batch on the
// calling goroutine (still one writer at a time, serialised by the same
// flag), which saves the two cross-thread wake-ups that would otherwise
// lengthen the fsync's latency. Batch buffers are reused; Enqueue blocks
// only when 4 MiB are already waiting for the writer, so memory stays
// bounded. Any write or sync error is fatal and sticky
// (*FatalError, errors.Is ErrFatal): after a failed fsync the kernel may
// have dropped the dirty pages, so retrying would only pretend.
//
// # Ownership
//
// A journal has one owner. Open locks the directory before it reads or
// repairs anything (OSFS: an exclusive flock(2) on DIR/LOCK, holding the
// owner's pid for the operator; see Locker) and the Log releases it in
// Close, after its files are closed. A second Open, from this process or
// another, fails at once with ErrLocked and changes nothing, so it can
// never cut as a "torn tail" the batch the owner is writing. TruncateAt
// takes the same lock. Verify and Scan take none: they only read, and must
// work beside the running daemon (a shared flock would be refused while
// the owner holds its exclusive one); a batch still being written looks to
// them like a torn tail, which they report and never cut.
//
// # Files
//
// A journal is a directory of segment files named by the seq of their
// first record as 16 lower-case hex digits: 0000000000000001.wal,
// 00000000000003e8.wal, ... The first segment must start at seq 1. Other
// names are ignored except that Open deletes *.tmp (crash leftovers, such
// as next.wal.tmp, the segment being prepared); cut bytes are kept in
// <segment>.broken (or .broken.N), each with a cut note beside it
// (<that name>.cut: where the bytes were cut and the record before them;
// see cutnote.go and Cuts).
//
// Segments are preallocated to Options.SegmentSize (default 16 MiB):
// fallocate, then zeros written over the space so that its extents are
// initialised, then fsync, all before the file gets its final name. So
// appending never changes a file's size or allocation, and fdatasync only
// flushes data (on ext4, writing into fallocate'd but unwritten extents
// makes fdatasync commit metadata: measured ~1.5x slower for page-crossing
// batches). The next segment is prepared in the background as a temporary
// file once the current one is half full. At rollover it gets its header
// and first records, is fdatasynced, renamed into place, and then the
// directory is fsynced. The previous segment is always fully synced before
// that, so the existence of a segment proves that every record before it
// was durable.
//
// All integers are little endian.
//
// # Segment header (64 bytes)
//
//	off  size  field
//	0    8     magic "SAGAWAL\x00"
//	8    4     version = 1
//	12   4     header size = 64
//	16   8     first seq (must match the file name)
//	24   32    hash of record first-1 (the genesis hash for seq 1)
//	56   4     CRC32C (Castagnoli) of bytes 0..55
//	60   4     zero (not covered by the CRC; a reader refuses anything else)
//
// Records follow from offset 64, back to back. The rest of the segment is
// zeros. A record that does not fit in the remaining space goes to the
// next segment.
//
// # Record frame (49 + L bytes)
//
//	off   size  field
//	0     4     CRC32C of bytes 4 .. 49+L (length through hash)
//	4     4     L, payload length
//	8     8     seq
//	16    1     type, never 0
//	17    L     payload
//	17+L  32    hash
//
// hash = SHA-256(previous record's hash || seq (8 bytes) || type || payload),
// i.e. the previous hash followed by frame bytes 8 .. 17+L. Record 1 chains
// from the genesis hash, SHA-256("saga-supervisor wal genesis v1") =
// e7faab1758495c0cf2e2718a4f384f504cabbff44b52a07c05743f32d1e0778d
// (GenesisHash). Seqs start at 1 and are contiguous across segments; each
// segment header repeats the previous hash, so a segment can be checked on
// its own and the chain continues across files.
//
// The hash chain catches any change to a record, deleted or reordered
// records and spliced segments. The CRC lets a frame be checked on its own,
// without the chain, which is what separates a torn tail from corruption:
// type 0 is reserved so that zero-filled space never parses as a record.
//
// # What Open does
//
// Open reads every segment in seq order and checks each header (CRC, magic,
// version, first seq equal to the name and to the previous segment's last
// seq + 1, previous hash equal to that record's hash) and each frame (CRC,
// type, length, seq, hash link). At the first frame that does not parse:
//
//   - if the rest of the segment is zeros, that is the normal end of the
//     segment (and the next segment, if any, must link on);
//   - if a later segment exists, or a self-consistent frame with a higher
//     seq is found by scanning the rest of the segment byte by byte, the
//     bad bytes were once durable: mid-log corruption, and Open fails with
//     a *CorruptionError naming segment, offset, seq and reason
//     (errors.Is ErrCorrupt);
//   - otherwise it is a torn tail: bytes of a batch that was being written
//     when the power went, never acknowledged. Open copies them (up to the
//     last non-zero byte) to <segment>.broken — temporary file, fdatasync,
//     rename, directory fsync — then zeroes them in the segment and
//     fdatasyncs, and reports it in OpenReport().TailCut.
//
// A frame that parses but carries the wrong seq or hash is corruption too.
// Records before the cut point were written and synced before any later
// batch, so a tail cut never removes an acknowledged record (unless the
// medium itself damaged the last record, which Open cannot tell from a
// torn write). Writes within one unsynced batch that reach the disk out of
// order (a later page without an earlier one) look like corruption and are
// refused: the journal prefers asking an operator (TruncateAt) to guessing.
//
// # The anchor
//
// DIR/ANCHOR (80 bytes, see anchor.go) names a durable record: its seq and
// hash. It is replaced atomically at every rollover, every
// Options.AnchorEvery while records are written, and at Close, and never
// names a record before it is durable. After the walk above, Open checks
// the segments against it: if the journal ends before the anchor's record,
// or that record's hash differs, or the anchor does not decode, durable
// records are gone (a deleted segment, an older or another copy of the
// journal) and Open fails with a *LossError (errors.Is ErrLost), before
// cutting anything — so a record the anchor names is never cut as a torn
// tail. Options.AcceptLoss opens it anyway, reports the loss in
// OpenReport().LossAccepted and moves the anchor back to the journal's
// end. A journal without an anchor (new, or written before anchors) is
// checked by its segments alone.
//
// # Checkpoints and retention
//
// A checkpoint (DIR/<seq>.ckpt, see checkpoint.go) binds a caller's
// snapshot to a record's position: its seq, hash and frame offset. Open
// starts from the newest checkpoint whose record is where it says and walks
// only what follows it (OpenReport().Checkpoint); one that does not decode
// is passed over (the older one, or the journal's start, stands in: two
// are kept), and one whose record is missing or different is a loss. The
// records before it are not read by Open; Verify reads them. After a
// checkpoint is written (WriteCheckpoint), Options.Retention may delete,
// or archive, the segments wholly behind the older kept checkpoint, oldest
// first, after moving the anchor's first-record field past them; a first
// segment starting later than that field is a loss. Follow reads the
// durable records after a position, for the caller's rebuild that keeps
// the checkpoint's state.
//
// Verify runs the same checks read-only; Scan streams records with the
// same checks; TruncateAt is the operator's explicit cut (it moves the
// anchor back first, and sets aside checkpoints past the cut). PlanRepair
// says read-only what cutting a damaged journal at its first bad record
// removes, segment by segment, and Repair makes that cut with TruncateAt's
// code, under the lock.
package wal
