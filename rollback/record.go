package rollback

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// RecordType is the wal record type of an engine record. The values are
// part of the journal format: never renumber them.
type RecordType uint8

// The engine's record types (see the package documentation for fields).
const (
	RecBegin      RecordType = 1  // a saga opened
	RecIntent     RecordType = 2  // a step is about to take effect
	RecApplied    RecordType = 3  // the step's effect happened
	RecFailed     RecordType = 4  // the step's effect failed or is in doubt
	RecRefused    RecordType = 5  // a command was refused by the gate
	RecCommit     RecordType = 6  // the saga committed
	RecAbort      RecordType = 7  // the saga is being unwound
	RecCompIntent RecordType = 8  // a compensation is about to take effect
	RecCompDone   RecordType = 9  // a step's unwind outcome (its bucket, or a failed attempt)
	RecEnd        RecordType = 10 // the unwind finished; the saga is closed
	RecHalt       RecordType = 11 // the engine latched halt
	RecReset      RecordType = 12 // an operator reset the halt
	RecRecovery   RecordType = 13 // a process took over the journal
	RecSafe       RecordType = 14 // an actuator went to its safe policy on halt
	RecLease      RecordType = 15 // a lease was granted (its epoch is spent)
	RecObserved   RecordType = 16 // an actuator was found where nobody commanded it (its device moved it)
	RecDrain      RecordType = 17 // an operator began a drain: new sagas refused (Target: the grace, s)
	RecUndrain    RecordType = 18 // an operator ended the drain
	RecQuarantine RecordType = 19 // an operator barred an agent (Agent)
	RecRelease    RecordType = 20 // an operator released a quarantined agent (Agent)
	// 21..26 are unassigned.
	RecZoneHalt   RecordType = 27 // a zone's halt latched (code: the zone)
	RecZoneReset  RecordType = 28 // an operator reset a zone's halt (code: the zone)
	maxRecordType            = RecZoneReset
)

var recordTypeNames = [...]string{
	RecBegin: "BEGIN", RecIntent: "INTENT", RecApplied: "APPLIED", RecFailed: "FAILED",
	RecRefused: "REFUSED", RecCommit: "COMMIT", RecAbort: "ABORT", RecCompIntent: "COMP_INTENT",
	RecCompDone: "COMP_DONE", RecEnd: "END", RecHalt: "HALT", RecReset: "RESET", RecRecovery: "RECOVERY", RecSafe: "SAFE", RecLease: "LEASE", RecObserved: "OBSERVED",
	RecDrain: "DRAIN", RecUndrain: "UNDRAIN", RecQuarantine: "QUARANTINE", RecRelease: "RELEASE",
	RecZoneHalt: "ZONE_HALT", RecZoneReset: "ZONE_RESET",
}

func (t RecordType) String() string {
	if t.known() {
		return recordTypeNames[t]
	}
	return fmt.Sprintf("RecordType(%d)", uint8(t))
}

// known reports whether t is a record type the engine writes (the numbers
// between the groups are unassigned).
func (t RecordType) known() bool { return t >= 1 && t <= maxRecordType && recordTypeNames[t] != "" }

// Flags carried by a record.
const (
	FlagInDoubt    uint8 = 1 << iota // FAILED: the effect may have happened
	FlagClamped                      // INTENT: Target differs from Requested by the clamp policy
	FlagFirstTouch                   // INTENT: the saga's first step on this actuator
	// FlagWithdrawn marks a COMP_DONE (unresolved) written by the process
	// that journaled the COMP_INTENT before it, when a halt came between
	// that intent and its effect, which was then never started: the
	// actuator did not move. Without it, an unresolved compensation after
	// a COMP_INTENT may have moved (a crash after the intent, settled by a
	// later process), so the rebuild keeps both values.
	FlagWithdrawn
)

// Record is one engine record. Which fields are set depends on Type; unset
// fields are not encoded (a presence mask leads the payload).
type Record struct {
	Type      RecordType
	Saga      uint64
	Step      uint32
	Actuator  string
	Target    float64 // INTENT, COMP_INTENT: the value commanded
	Prior     float64 // INTENT: the commanded value before the step
	Requested float64 // INTENT: what the agent asked for (differs when clamped)
	Agent     string
	Lease     string
	Epoch     uint64
	CmdID     string
	Code      string // REFUSED: the gate code; FAILED: the failure kind; COMP_DONE: the bucket
	Message   string
	Attempt   uint32 // COMP_INTENT, COMP_DONE: 1-based attempt
	Flags     uint8
	UnixNano  int64 // wall time, for the audit trail only (never used for decisions)
}

const (
	fSaga = 1 << iota
	fStep
	fActuator
	fTarget
	fPrior
	fRequested
	fAgent
	fLease
	fEpoch
	fCmdID
	fCode
	fMessage
	fAttempt
	fFlags
	fTime
	fieldMask = 1<<iota - 1
)

// maxString bounds every decoded string so a corrupt length cannot make the
// decoder allocate without limit.
const maxString = 64 << 10

// ErrBadRecord is wrapped by every decoding error.
var ErrBadRecord = errors.New("rollback: bad record")

// AppendEncode appends the payload encoding of r (everything but Type, which
// travels as the wal record type) to buf.
func (r *Record) AppendEncode(buf []byte) []byte {
	var mask uint64
	set := func(cond bool, bit uint64) {
		if cond {
			mask |= bit
		}
	}
	set(r.Saga != 0, fSaga)
	set(r.Step != 0, fStep)
	set(r.Actuator != "", fActuator)
	set(r.Target != 0 || math.Signbit(r.Target), fTarget)
	set(r.Prior != 0 || math.Signbit(r.Prior), fPrior)
	set(r.Requested != 0 || math.Signbit(r.Requested), fRequested)
	set(r.Agent != "", fAgent)
	set(r.Lease != "", fLease)
	set(r.Epoch != 0, fEpoch)
	set(r.CmdID != "", fCmdID)
	set(r.Code != "", fCode)
	set(r.Message != "", fMessage)
	set(r.Attempt != 0, fAttempt)
	set(r.Flags != 0, fFlags)
	set(r.UnixNano != 0, fTime)
	buf = binary.AppendUvarint(buf, mask)
	if mask&fSaga != 0 {
		buf = binary.AppendUvarint(buf, r.Saga)
	}
	if mask&fStep != 0 {
		buf = binary.AppendUvarint(buf, uint64(r.Step))
	}
	if mask&fActuator != 0 {
		buf = appendString(buf, r.Actuator)
	}
	if mask&fTarget != 0 {
		buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(r.Target))
	}
	if mask&fPrior != 0 {
		buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(r.Prior))
	}
	if mask&fRequested != 0 {
		buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(r.Requested))
	}
	if mask&fAgent != 0 {
		buf = appendString(buf, r.Agent)
	}
	if mask&fLease != 0 {
		buf = appendString(buf, r.Lease)
	}
	if mask&fEpoch != 0 {
		buf = binary.AppendUvarint(buf, r.Epoch)
	}
	if mask&fCmdID != 0 {
		buf = appendString(buf, r.CmdID)
	}
	if mask&fCode != 0 {
		buf = appendString(buf, r.Code)
	}
	if mask&fMessage != 0 {
		buf = appendString(buf, r.Message)
	}
	if mask&fAttempt != 0 {
		buf = binary.AppendUvarint(buf, uint64(r.Attempt))
	}
	if mask&fFlags != 0 {
		buf = append(buf, r.Flags)
	}
	if mask&fTime != 0 {
		buf = binary.AppendVarint(buf, r.UnixNano)
	}
	return buf
}

func appendString(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}

// DecodeRecord decodes a payload written by AppendEncode. It rejects unknown
// types, unknown fields, truncated or trailing bytes.
func DecodeRecord(typ uint8, p []byte) (Record, error) {
	r := Record{Type: RecordType(typ)}
	if !RecordType(typ).known() {
		return r, fmt.Errorf("%w: unknown type %d", ErrBadRecord, typ)
	}
	d := decoder{p: p}
	mask := d.uvarint()
	if mask&^fieldMask != 0 {
		return r, fmt.Errorf("%w: unknown fields %#x", ErrBadRecord, mask&^fieldMask)
	}
	if mask&fSaga != 0 {
		r.Saga = d.uvarint()
	}
	if mask&fStep != 0 {
		v := d.uvarint()
		if v > math.MaxUint32 {
			d.fail("step out of range")
		}
		r.Step = uint32(v)
	}
	if mask&fActuator != 0 {
		r.Actuator = d.string()
	}
	if mask&fTarget != 0 {
		r.Target = d.float()
	}
	if mask&fPrior != 0 {
		r.Prior = d.float()
	}
	if mask&fRequested != 0 {
		r.Requested = d.float()
	}
	if mask&fAgent != 0 {
		r.Agent = d.string()
	}
	if mask&fLease != 0 {
		r.Lease = d.string()
	}
	if mask&fEpoch != 0 {
		r.Epoch = d.uvarint()
	}
	if mask&fCmdID != 0 {
		r.CmdID = d.string()
	}
	if mask&fCode != 0 {
		r.Code = d.string()
	}
	if mask&fMessage != 0 {
		r.Message = d.string()
	}
	if mask&fAttempt != 0 {
		v := d.uvarint()
		if v > math.MaxUint32 {
			d.fail("attempt out of range")
		}
		r.Attempt = uint32(v)
	}
	if mask&fFlags != 0 {
		r.Flags = d.byte()
	}
	if mask&fTime != 0 {
		r.UnixNano = d.varint()
	}
	if d.err == nil && len(d.p) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.p)))
	}
	if d.err != nil {
		return r, fmt.Errorf("%w: %s %s", ErrBadRecord, RecordType(typ), d.err)
	}
	return r, nil
}

// decoder reads fields and remembers the first error, so DecodeRecord reads
// as a straight list of fields.
type decoder struct {
	p   []byte
	err error
}

func (d *decoder) fail(why string) {
	if d.err == nil {
		d.err = errors.New(why)
	}
	d.p = nil
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.p)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.p = d.p[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.p)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.p = d.p[n:]
	return v
}

func (d *decoder) float() float64 {
	if len(d.p) < 8 {
		d.fail("short float")
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(d.p))
	d.p = d.p[8:]
	return v
}

func (d *decoder) byte() byte {
	if len(d.p) < 1 {
		d.fail("short byte")
		return 0
	}
	b := d.p[0]
	d.p = d.p[1:]
	return b
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > maxString || n > uint64(len(d.p)) {
		d.fail("string length out of range")
		return ""
	}
	s := string(d.p[:n])
	d.p = d.p[n:]
	return s
}
