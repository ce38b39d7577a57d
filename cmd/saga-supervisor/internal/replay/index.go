package replay

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// Bound is one end of a window: a journal seq or a wall time. The zero
// Bound is open (the journal's first or last record).
type Bound struct {
	Seq  uint64
	Time time.Time
}

// IsZero reports whether the bound is open.
func (b Bound) IsZero() bool { return b.Seq == 0 && b.Time.IsZero() }

// String is the bound as the user wrote it: a seq or a UTC time.
func (b Bound) String() string {
	switch {
	case b.Seq != 0:
		return "seq " + strconv.FormatUint(b.Seq, 10)
	case !b.Time.IsZero():
		return b.Time.UTC().Format(time.RFC3339Nano)
	}
	return "open"
}

// ParseBound reads a window bound: a seq (a positive integer) or an
// RFC 3339 time (fractional seconds allowed). "" is an open bound.
func ParseBound(s string) (Bound, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Bound{}, nil
	}
	if strings.Trim(s, "0123456789") == "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n == 0 {
			return Bound{}, fmt.Errorf("%q: a seq is an integer from 1", s)
		}
		return Bound{Seq: n}, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return Bound{}, fmt.Errorf("%q is neither a seq nor an RFC 3339 time (e.g. 2025-06-01T14:03:00Z)", s)
	}
	return Bound{Time: t}, nil
}

type stepKey struct {
	saga uint64
	step uint32
}

type compKey struct {
	saga     uint64
	actuator string
}

type attemptKey struct {
	saga    uint64
	step    uint32
	attempt uint32
}

// attemptAt is where a compensation attempt's outcome is kept, until its
// COMP_DONE says whether it failed.
type attemptAt struct {
	key compKey
	i   int
}

// stepFailure is how a step's effect failed then.
type stepFailure struct {
	inDoubt bool
	message string
}

// compAttempt is one compensation attempt then, and whether it failed.
type compAttempt struct {
	seq     uint64 // its COMP_INTENT
	failed  bool
	message string
}

// sagaInfo is what the whole journal says of one saga.
type sagaInfo struct {
	owner    rollback.Owner
	beginSeq uint64 // 0: its BEGIN is not in the journal
	endSeq   uint64 // its COMMIT or END; 0 while open
	endHow   string // committed, clean or partial
	named    bool   // a record other than a refusal names it
	// fromCkpt: the saga is open in the snapshot of the checkpoint the
	// replay starts from (its owner comes from there when its BEGIN is
	// gone).
	fromCkpt bool
}

// index is the first pass over the journal: its extent, its sagas, where
// the drivers failed, and the window resolved to seqs.
type index struct {
	first, last         uint64
	firstTime, lastTime int64
	records             uint64
	sagas               map[uint64]*sagaInfo
	fails               map[stepKey]stepFailure
	comps               map[compKey][]compAttempt

	fromSeq, toSeq uint64
	// startSeq is where driving starts: fromSeq, or an earlier BEGIN of a
	// saga open at fromSeq, or the record after the checkpoint (never
	// before it).
	startSeq    uint64
	openAtStart []uint64 // sagas open at fromSeq replayed from their BEGIN or from the checkpoint, in id order

	// A journal that begins after seq 1 is replayed from a checkpoint.
	// ckpts are the checkpoints that decode, newest first, read when the
	// first record is met; ckptAt holds the journal's hash and time of the
	// records they cover; damaged are those that do not decode.
	ckpts   []wal.Checkpoint
	ckptAt  map[uint64]recordAt
	damaged []wal.CheckpointDamage
	// ckpt is the checkpoint the replay starts from (nil: none); base is
	// its seq (0: none): records up to it are in its snapshot, not
	// replayed. passedOver says why the older ones were not used.
	ckpt       *wal.Checkpoint
	base       uint64
	passedOver []string
}

// recordAt is a record's chain hash and wall time.
type recordAt struct {
	hash     [32]byte
	unixNano int64
}

// errBadWindow marks a window that selects nothing or is upside down.
var errBadWindow = errors.New("bad window")

// errStop ends a scan early; it is never reported.
var errStop = errors.New("stop")

// readIndex makes the first pass. A record that is not an engine record is
// an error: the journal is not one the replay can read.
func readIndex(dir string, from, to Bound) (*index, error) {
	x := &index{sagas: map[uint64]*sagaInfo{}, fails: map[stepKey]stepFailure{}, comps: map[compKey][]compAttempt{},
		ckptAt: map[uint64]recordAt{}}
	attempts := map[attemptKey]attemptAt{}
	var fromAt, afterTo uint64 // the first record at or after from; the first after to (times)
	err := wal.Scan(dir, wal.Options{}, 1, func(wr wal.Record) error {
		r, err := rollback.DecodeRecord(wr.Type, wr.Payload)
		if err != nil {
			return fmt.Errorf("record seq %d is not an engine record: %w", wr.Seq, err)
		}
		if x.records == 0 {
			x.first, x.firstTime = wr.Seq, r.UnixNano
			if wr.Seq > 1 {
				// The records before it are gone: only a checkpoint can
				// say where they left things.
				if x.ckpts, x.damaged, err = wal.Checkpoints(dir, wal.Options{}); err != nil {
					return fmt.Errorf("reading the checkpoints: %w", err)
				}
				for _, c := range x.ckpts {
					x.ckptAt[c.At.Seq] = recordAt{}
				}
			}
		}
		if _, ok := x.ckptAt[wr.Seq]; ok {
			x.ckptAt[wr.Seq] = recordAt{hash: wr.Hash, unixNano: r.UnixNano}
		}
		x.records++
		x.last, x.lastTime = wr.Seq, r.UnixNano
		if !from.Time.IsZero() && fromAt == 0 && !time.Unix(0, r.UnixNano).Before(from.Time) {
			fromAt = wr.Seq
		}
		if !to.Time.IsZero() && afterTo == 0 && time.Unix(0, r.UnixNano).After(to.Time) {
			afterTo = wr.Seq
		}
		x.note(wr.Seq, &r, attempts)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if x.records == 0 {
		return x, nil
	}
	if err := x.resolve(from, to, fromAt, afterTo); err != nil {
		return nil, err
	}
	x.pickCheckpoint()
	return x, nil
}

// note takes what the index needs from one record.
func (x *index) note(seq uint64, r *rollback.Record, attempts map[attemptKey]attemptAt) {
	saga := func() *sagaInfo {
		s := x.sagas[r.Saga]
		if s == nil {
			s = &sagaInfo{}
			x.sagas[r.Saga] = s
		}
		return s
	}
	switch r.Type {
	case rollback.RecBegin:
		s := saga()
		s.beginSeq, s.named = seq, true
		s.owner = rollback.Owner{Agent: r.Agent, Lease: r.Lease, Epoch: r.Epoch}
	case rollback.RecIntent, rollback.RecApplied, rollback.RecAbort, rollback.RecCompDone:
		saga().named = true
	case rollback.RecCommit, rollback.RecEnd:
		s := saga()
		s.named, s.endSeq, s.endHow = true, seq, "committed"
		if r.Type == rollback.RecEnd {
			s.endHow = r.Code
		}
	}
	switch r.Type {
	case rollback.RecFailed:
		saga().named = true
		// NOT_APPLIED is the engine's own: a halt latched before the
		// effect. The driver was never called; the replay's halt decides.
		if r.Code != "NOT_APPLIED" {
			x.fails[stepKey{r.Saga, r.Step}] = stepFailure{inDoubt: r.Flags&rollback.FlagInDoubt != 0, message: r.Message}
		}
	case rollback.RecCompIntent:
		saga().named = true
		k := compKey{r.Saga, r.Actuator}
		attempts[attemptKey{r.Saga, r.Step, r.Attempt}] = attemptAt{k, len(x.comps[k])}
		x.comps[k] = append(x.comps[k], compAttempt{seq: seq})
	case rollback.RecCompDone:
		ak := attemptKey{r.Saga, r.Step, r.Attempt}
		if at, ok := attempts[ak]; ok {
			delete(attempts, ak)
			if r.Code == "" { // a failed attempt; a bucket settles the step
				x.comps[at.key][at.i].failed, x.comps[at.key][at.i].message = true, r.Message
			}
		}
	}
}

// resolve turns the bounds into seqs and checks the window selects records.
func (x *index) resolve(from, to Bound, fromAt, afterTo uint64) error {
	x.fromSeq, x.toSeq = x.first, x.last
	switch {
	case from.Seq != 0:
		x.fromSeq = from.Seq
	case !from.Time.IsZero():
		if fromAt == 0 {
			return fmt.Errorf("%w: --from %s is after the journal's last record (%s, seq %d)", errBadWindow, from, stamp(x.lastTime), x.last)
		}
		x.fromSeq = fromAt
	}
	switch {
	case to.Seq != 0:
		x.toSeq = min(to.Seq, x.last)
	case !to.Time.IsZero():
		if afterTo == x.first {
			return fmt.Errorf("%w: --to %s is before the journal's first record (%s, seq %d)", errBadWindow, to, stamp(x.firstTime), x.first)
		}
		if afterTo != 0 {
			x.toSeq = afterTo - 1
		}
	}
	if x.fromSeq > x.last {
		return fmt.Errorf("%w: --from %s is after the journal's last record (seq %d)", errBadWindow, from, x.last)
	}
	if to.Seq != 0 && to.Seq < x.first {
		return fmt.Errorf("%w: --to %s is before the journal's first record (seq %d)", errBadWindow, to, x.first)
	}
	x.fromSeq = max(x.fromSeq, x.first)
	if x.fromSeq > x.toSeq {
		return fmt.Errorf("%w: --from %s (seq %d) is after --to %s (seq %d)", errBadWindow, from, x.fromSeq, to, x.toSeq)
	}
	return nil
}

// pickCheckpoint chooses the checkpoint a journal that begins after seq 1
// is replayed from: the oldest that decodes, covers a record the journal
// holds — with the hash the checkpoint names — and lies before the
// window's end. Older ones it passes over are noted. Compensation
// attempts the snapshot covers are dropped from the fault script: the
// replay never makes them again.
func (x *index) pickCheckpoint() {
	for i := len(x.ckpts) - 1; i >= 0 && x.ckpt == nil; i-- {
		c := &x.ckpts[i]
		seq := c.At.Seq
		switch at := x.ckptAt[seq]; {
		case seq < x.first:
			x.passOver(c, fmt.Sprintf("it covers record %d, before the journal's first record (%d)", seq, x.first))
		case seq > x.last:
			x.passOver(c, fmt.Sprintf("it covers record %d, after the journal's last record (%d)", seq, x.last))
		case at.hash != c.At.Hash: // every record from first to last was read
			x.passOver(c, fmt.Sprintf("it covers record %d, but the journal's record %d has another hash: "+
				"it belongs to another journal, or another copy of this one", seq, seq))
		case seq >= x.toSeq:
			x.passOver(c, fmt.Sprintf("it covers record %d, at or after the window's end (seq %d): the window has nothing after it to replay", seq, x.toSeq))
		default:
			x.ckpt, x.base = c, seq
		}
	}
	if x.ckpt == nil {
		return
	}
	for k, q := range x.comps {
		x.comps[k] = slices.DeleteFunc(q, func(a compAttempt) bool { return a.seq <= x.base })
	}
}

func (x *index) passOver(c *wal.Checkpoint, why string) {
	x.passedOver = append(x.passedOver, fmt.Sprintf("checkpoint %s not used: %s", c.Name, why))
}

// findStart finds where driving starts. A saga open at the window's start
// whose BEGIN is in the journal after the checkpoint (if any) is replayed
// from its BEGIN; one the checkpoint's snapshot holds open (held, with its
// owner) is replayed from the record after the checkpoint. Either way it
// is listed as open at the start, and what it does is reported.
func (x *index) findStart(held []rollback.OpenSaga) {
	x.startSeq = x.fromSeq
	if x.ckpt != nil {
		x.startSeq = max(x.fromSeq, x.base+1)
	}
	for id, s := range x.sagas {
		if s.beginSeq > x.base && s.beginSeq < x.fromSeq && (s.endSeq == 0 || s.endSeq >= x.fromSeq) {
			x.openAtStart = append(x.openAtStart, id)
			x.startSeq = min(x.startSeq, s.beginSeq)
		}
	}
	for _, o := range held {
		s := x.sagas[o.ID]
		if s == nil {
			s = &sagaInfo{}
			x.sagas[o.ID] = s
		}
		s.fromCkpt = true
		if s.beginSeq == 0 {
			s.owner = o.Owner
		}
		if s.endSeq == 0 || s.endSeq >= x.fromSeq {
			x.openAtStart = append(x.openAtStart, o.ID)
			x.startSeq = min(x.startSeq, x.base+1)
		}
	}
	slices.Sort(x.openAtStart)
}

// orphan reports whether records of saga id are to be skipped: the journal
// names it but holds no BEGIN for it because it began before the journal's
// first record (a journal that begins after seq 1), and no checkpoint
// stands in for the records that are gone. In a journal that begins at
// seq 1, or is replayed from a checkpoint, such records are not skipped:
// the checkpoint's snapshot holds every saga open at it, so a saga neither
// there nor begun after it is an inconsistency that recovery would refuse,
// and so does the replay. A refusal naming an id nobody began is never an
// orphan: the gate refused an id a client made up, and the replay's gate
// will too.
func (x *index) orphan(id uint64) bool {
	s := x.sagas[id]
	return x.first > 1 && x.ckpt == nil && s != nil && s.named && s.beginSeq == 0
}

// thenOutcome is how saga id stood in the journal at seq to.
func (x *index) thenOutcome(id uint64, to uint64) string {
	s := x.sagas[id]
	if s == nil || s.endSeq == 0 || s.endSeq > to {
		return "open"
	}
	return s.endHow
}

func stamp(unixNano int64) string {
	if unixNano == 0 {
		return ""
	}
	return time.Unix(0, unixNano).UTC().Format(time.RFC3339Nano)
}
