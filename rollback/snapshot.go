package rollback

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

// A snapshot is the state Apply rebuilds from a journal — commanded values
// and what Apply knows besides (the alternative value, a detach, which
// saga holds the actuator), every open saga with its steps and unwind
// progress, the saga id counter, the highest lease epoch and the halt
// latch — encoded so that Restore followed by Apply of the records after
// it gives the engine exactly the state Apply of the whole journal gives.
// It is what a journal checkpoint carries (package wal stores it opaquely,
// bound to the position of the last record it covers).
//
// Only an engine that has done nothing but Restore and Apply may be
// snapshotted: a serving engine holds effects in flight that no record
// describes yet. The daemon keeps such an engine beside the serving one,
// fed from the durable journal (see recovery.Checkpointer).
//
// Layout: the byte snapshotVersion, then, in this order, with unsigned
// varints (u), little-endian IEEE-754 doubles (f), strings as a u length
// and bytes (s), booleans as one byte 0/1 (b):
//
//	u next saga id, u highest epoch, u halt generation latched,
//	u generation reset, u generation applied, s halt reason
//	u actuator count, then each in name order:
//	  s name, f initial, s safe mode, f safe value   (the configuration seen)
//	  f commanded, f alt, b alt valid, b detached, u holding saga (0: none)
//	u open saga count, then each in id order:
//	  u id, s agent, s lease, u epoch, s abort reason
//	  u command id count, then each s id (sorted)
//	  u step count, then each in step order:
//	    u n, s actuator, f prior, f target, s outcome, s bucket,
//	    u attempts, u failures, s error, f compensation target
//	b a drain in force, and if so: v since (unix ns), f grace (s), s why
//	u quarantined agent count, then each in name order:
//	  s agent, v since (unix ns), s why
//
// (v: a signed, zigzag varint.) That is version 2, written while the journal holds
// no zone halt or reset. Version 3, written once it holds one, is version 2
// followed by
//
//	u zone count, then each in name order:
//	  s name, u halt generation latched, u generation reset, s halt reason
//
// Version 1, written before drains and quarantines, ends after the sagas:
// it restores with neither (and no zones). Nothing may follow. Decoding
// bounds every count and string.
const (
	snapshotV1        = 1 // no drain, quarantine or zones (still restored)
	snapshotVersion   = 2 // drain and quarantine
	snapshotVersionV3 = 3 // version 2 and the halted zones
)

// ErrBadSnapshot is wrapped by every snapshot decoding error.
var ErrBadSnapshot = errors.New("rollback: bad snapshot")

// maxSnapshotCount bounds every count a snapshot decoder accepts, so a
// damaged count cannot make it allocate without limit (a count is also
// bounded by the bytes left, each element taking at least one).
const maxSnapshotCount = 1 << 24

// Snapshot encodes the state Apply has rebuilt (see the layout above). It
// fails on an engine that has served a command or started recovery: only
// a rebuild-only engine's state is exactly what its journal says.
func (e *Engine) Snapshot() ([]byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrClosed
	}
	if e.changes != 0 || e.inflightSteps() {
		return nil, errors.New("rollback: Snapshot of an engine that has served commands")
	}
	e.lane.mu.Lock()
	latched, cleared, done, why := e.latchGen.Load(), e.clearedGen.Load(), e.lane.done, e.lane.why
	e.lane.mu.Unlock()

	zones := e.journaledZones()
	version := byte(snapshotVersion)
	if len(zones) > 0 {
		version = snapshotVersionV3
	}
	b := []byte{version}
	b = binary.AppendUvarint(b, e.nextSaga)
	b = binary.AppendUvarint(b, e.maxEpoch)
	b = binary.AppendUvarint(b, latched)
	b = binary.AppendUvarint(b, cleared)
	b = binary.AppendUvarint(b, done)
	b = appendString(b, why)

	names := slices.Sorted(maps.Keys(e.acts))
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		st := e.acts[n]
		b = appendString(b, n)
		b = appendFloat(b, st.a.Initial)
		b = appendString(b, string(st.a.Safe.Mode))
		b = appendFloat(b, st.a.Safe.Value)
		b = appendFloat(b, st.commanded)
		b = appendFloat(b, st.alt)
		b = appendBool(b, st.altOK)
		b = appendBool(b, st.detached)
		var holder uint64
		if st.holder != nil {
			holder = st.holder.id
		}
		b = binary.AppendUvarint(b, holder)
	}

	ids := slices.Sorted(maps.Keys(e.sagas))
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		s := e.sagas[id]
		b = binary.AppendUvarint(b, s.id)
		b = appendString(b, s.owner.Agent)
		b = appendString(b, s.owner.Lease)
		b = binary.AppendUvarint(b, s.owner.Epoch)
		b = appendString(b, s.abortWhy)
		cmds := slices.Sorted(maps.Keys(s.ids))
		b = binary.AppendUvarint(b, uint64(len(cmds)))
		for _, c := range cmds {
			b = appendString(b, c)
		}
		b = binary.AppendUvarint(b, uint64(len(s.steps)))
		for _, sp := range s.steps {
			b = binary.AppendUvarint(b, uint64(sp.n))
			b = appendString(b, sp.actName)
			b = appendFloat(b, sp.prior)
			b = appendFloat(b, sp.target)
			b = appendString(b, string(sp.outcome))
			b = appendString(b, string(sp.bucket))
			b = binary.AppendUvarint(b, uint64(sp.attempts))
			b = binary.AppendUvarint(b, uint64(sp.failures))
			b = appendString(b, sp.err)
			b = appendFloat(b, sp.compTarget)
		}
	}
	b = appendBool(b, e.drain != nil)
	if e.drain != nil {
		b = binary.AppendVarint(b, e.drain.Since.UnixNano())
		b = appendFloat(b, e.drain.Grace.Seconds())
		b = appendString(b, e.drain.Why)
	}
	barred := e.quarantineNames()
	b = binary.AppendUvarint(b, uint64(len(barred)))
	for _, n := range barred {
		q := e.quarantined[n]
		b = appendString(b, n)
		b = binary.AppendVarint(b, q.Since.UnixNano())
		b = appendString(b, q.Why)
	}
	if version == snapshotVersionV3 {
		b = binary.AppendUvarint(b, uint64(len(zones)))
		for _, z := range zones {
			b = appendString(b, z.name)
			b = binary.AppendUvarint(b, z.latched)
			b = binary.AppendUvarint(b, z.cleared)
			b = appendString(b, z.why)
		}
	}
	return b, nil
}

// journaledZones lists, in name order, the zones whose halt the journal
// has recorded (a zone never halted has no state to carry).
func (e *Engine) journaledZones() []snapZone {
	e.zl.mu.Lock()
	defer e.zl.mu.Unlock()
	var out []snapZone
	for _, name := range slices.Sorted(maps.Keys(e.zl.zones)) {
		z := e.zl.zones[name]
		if g := z.gen.Load(); g > 0 {
			out = append(out, snapZone{name: name, latched: g, cleared: z.cleared.Load(), why: z.why})
		}
	}
	return out
}

// inflightSteps reports whether any open saga has a step or unwind in
// progress in this process. Callers hold mu.
func (e *Engine) inflightSteps() bool {
	for _, s := range e.sagas {
		if s.busy || s.unwinding {
			return true
		}
	}
	return false
}

// ErrSnapshotMismatch is returned (wrapped) by Restore when the snapshot was
// taken with other actuators configured than this engine's: what it says
// of an actuator that has since been added, removed or given another
// initial value or safe policy may not be what rebuilding from the journal
// under today's configuration would say. The caller may rebuild from the
// whole journal instead, if it still has it.
var ErrSnapshotMismatch = errors.New("rollback: snapshot taken under another actuator configuration")

// Restore installs a snapshot into an engine that has not applied, served
// or recovered anything yet; the records after the snapshot's position
// are then given to Apply, and Recover follows as after a full rebuild. An
// actuator the snapshot names that is no longer configured is dropped, as
// Apply drops records naming one; steps on it keep its name (reported at
// unwind). A snapshot that does not decode changes nothing and returns an
// error wrapping ErrBadSnapshot. If the configuration it was taken under
// differs, the state is still installed (every actuator both know is
// restored) and the returned error wraps ErrSnapshotMismatch, naming the
// difference.
func (e *Engine) Restore(p []byte) error {
	snap, err := decodeSnapshot(p)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	if e.nextSaga != 1 || len(e.sagas) != 0 || e.changes != 0 || e.latchGen.Load() != 0 {
		return errors.New("rollback: Restore into an engine that is not new")
	}
	var diffs []string
	sagas := make(map[uint64]*saga, len(snap.sagas))
	for _, ss := range snap.sagas {
		s := &saga{id: ss.id, owner: ss.owner, abortWhy: ss.abortWhy, ids: make(map[string]struct{}, len(ss.cmds))}
		for _, c := range ss.cmds {
			s.ids[c] = struct{}{}
		}
		for _, sp := range ss.steps {
			sp.act = e.acts[sp.actName]
			s.steps = append(s.steps, &sp)
		}
		sagas[s.id] = s
	}
	seen := make(map[string]bool, len(snap.acts))
	for _, sa := range snap.acts {
		seen[sa.name] = true
		st := e.acts[sa.name]
		if st == nil {
			diffs = append(diffs, fmt.Sprintf("actuator %s is no longer configured", sa.name))
			continue
		}
		if st.a.Initial != sa.initial || st.a.Safe.Mode != sa.safeMode || st.a.Safe.Value != sa.safeValue {
			diffs = append(diffs, fmt.Sprintf("actuator %s has another initial value or safe policy", sa.name))
		}
		st.commanded, st.alt, st.altOK, st.detached = sa.commanded, sa.alt, sa.altOK, sa.detached
		st.holder = sagas[sa.holder] // nil for 0 or a saga no longer open
	}
	for name := range e.acts {
		if !seen[name] {
			diffs = append(diffs, fmt.Sprintf("actuator %s was not configured when the snapshot was taken", name))
		}
	}
	e.sagas = sagas
	e.nextSaga, e.maxEpoch = snap.nextSaga, snap.maxEpoch
	e.lane.mu.Lock()
	e.latchGen.Store(snap.latched)
	e.clearedGen.Store(snap.cleared)
	e.lane.done, e.lane.why = snap.done, snap.why
	e.lane.mu.Unlock()
	if snap.drain != nil {
		e.drainGen++
		d := *snap.drain
		d.gen = e.drainGen
		e.drain = &d
	}
	for _, q := range snap.quarantined {
		e.quarantined[q.Agent] = &q
	}
	for _, sz := range snap.zones {
		z, err := e.rebuildZone(sz.name)
		if err != nil {
			return err
		}
		e.zl.mu.Lock()
		z.gen.Store(sz.latched)
		z.cleared.Store(sz.cleared)
		z.done, z.why = sz.latched, sz.why
		e.zl.mu.Unlock()
	}
	if len(diffs) > 0 {
		slices.Sort(diffs)
		return fmt.Errorf("%w: %v", ErrSnapshotMismatch, diffs)
	}
	return nil
}

type snapAct struct {
	name            string
	initial         float64
	safeMode        actuators.SafeMode
	safeValue       float64
	commanded, alt  float64
	altOK, detached bool
	holder          uint64
}

type snapSaga struct {
	id       uint64
	owner    Owner
	abortWhy string
	cmds     []string
	steps    []step
}

type snapZone struct {
	name             string
	latched, cleared uint64
	why              string
}

type snapshot struct {
	nextSaga, maxEpoch     uint64
	latched, cleared, done uint64
	why                    string
	acts                   []snapAct
	sagas                  []snapSaga
	drain                  *Drain
	quarantined            []Quarantine
	zones                  []snapZone
}

func decodeSnapshot(p []byte) (*snapshot, error) {
	d := decoder{p: p}
	version := d.byte()
	if d.err == nil && version != snapshotV1 && version != snapshotVersion && version != snapshotVersionV3 {
		return nil, fmt.Errorf("%w: version %d, want %d, %d or %d", ErrBadSnapshot, version, snapshotV1, snapshotVersion, snapshotVersionV3)
	}
	s := &snapshot{}
	s.nextSaga = d.uvarint()
	s.maxEpoch = d.uvarint()
	s.latched = d.uvarint()
	s.cleared = d.uvarint()
	s.done = d.uvarint()
	s.why = d.string()
	if s.nextSaga == 0 && d.err == nil {
		d.fail("saga counter 0")
	}
	if (s.cleared > s.latched || s.done > s.latched) && d.err == nil {
		d.fail("halt generations out of order")
	}
	n := d.count()
	prev := ""
	for i := uint64(0); i < n && d.err == nil; i++ {
		a := snapAct{name: d.string()}
		a.initial = d.float()
		a.safeMode = actuators.SafeMode(d.string())
		a.safeValue = d.float()
		a.commanded = d.float()
		a.alt = d.float()
		a.altOK = d.bool()
		a.detached = d.bool()
		a.holder = d.uvarint()
		if i > 0 && a.name <= prev && d.err == nil {
			d.fail("actuators out of order")
		}
		prev = a.name
		s.acts = append(s.acts, a)
	}
	n = d.count()
	var prevID uint64
	for i := uint64(0); i < n && d.err == nil; i++ {
		ss := snapSaga{id: d.uvarint()}
		ss.owner.Agent = d.string()
		ss.owner.Lease = d.string()
		ss.owner.Epoch = d.uvarint()
		ss.abortWhy = d.string()
		if (ss.id <= prevID || ss.id >= s.nextSaga) && d.err == nil {
			d.fail(fmt.Sprintf("saga %d out of order or beyond the counter", ss.id))
		}
		prevID = ss.id
		for c := d.count(); c > 0 && d.err == nil; c-- {
			ss.cmds = append(ss.cmds, d.string())
		}
		steps := d.count()
		for j := uint64(0); j < steps && d.err == nil; j++ {
			var sp step
			nv := d.uvarint()
			if nv != j+1 && d.err == nil {
				d.fail(fmt.Sprintf("saga %d: step %d where %d belongs", ss.id, nv, j+1))
			}
			sp.n = uint32(j + 1)
			sp.actName = d.string()
			sp.prior = d.float()
			sp.target = d.float()
			sp.outcome = Outcome(d.string())
			sp.bucket = Bucket(d.string())
			sp.attempts = d.uint32()
			sp.failures = d.uint32()
			sp.err = d.string()
			sp.compTarget = d.float()
			if d.err == nil && !validOutcome(sp.outcome) {
				d.fail(fmt.Sprintf("saga %d step %d: unknown outcome %q", ss.id, sp.n, sp.outcome))
			}
			if d.err == nil && sp.bucket != "" && !sp.bucket.valid() {
				d.fail(fmt.Sprintf("saga %d step %d: unknown bucket %q", ss.id, sp.n, sp.bucket))
			}
			ss.steps = append(ss.steps, sp)
		}
		s.sagas = append(s.sagas, ss)
	}
	if version != snapshotV1 {
		decodeBarriers(&d, s)
	}
	if version == snapshotVersionV3 && d.err == nil {
		n = d.count()
		prev = ""
		for i := uint64(0); i < n && d.err == nil; i++ {
			z := snapZone{name: d.string()}
			z.latched = d.uvarint()
			z.cleared = d.uvarint()
			z.why = d.string()
			if d.err == nil && (z.name == "" || (i > 0 && z.name <= prev)) {
				d.fail("zones out of order")
			}
			if d.err == nil && (z.latched == 0 || z.cleared > z.latched) {
				d.fail(fmt.Sprintf("zone %s: halt generations out of order", z.name))
			}
			prev = z.name
			s.zones = append(s.zones, z)
		}
	}
	if d.err == nil && len(d.p) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.p)))
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: %s", ErrBadSnapshot, d.err)
	}
	return s, nil
}

// decodeBarriers reads the drain and the quarantined agents (version 2).
func decodeBarriers(d *decoder, s *snapshot) {
	if d.bool() && d.err == nil {
		dr := &Drain{Since: time.Unix(0, d.varint()), Recovered: true}
		grace := d.float()
		dr.Why = d.string()
		if d.err == nil && (math.IsNaN(grace) || grace < 0 || grace > MaxDrainGrace.Seconds()) {
			d.fail("drain grace out of range")
		}
		dr.Grace = time.Duration(grace * float64(time.Second))
		dr.Deadline = dr.Since.Add(dr.Grace)
		s.drain = dr
	}
	n := d.count()
	if n > MaxQuarantined && d.err == nil {
		d.fail("too many quarantined agents")
	}
	prev := ""
	for i := uint64(0); i < n && d.err == nil; i++ {
		q := Quarantine{Agent: d.string()}
		q.Since = time.Unix(0, d.varint())
		q.Why = d.string()
		if d.err == nil && (q.Agent == "" || i > 0 && q.Agent <= prev) {
			d.fail("quarantined agents out of order")
		}
		prev = q.Agent
		s.quarantined = append(s.quarantined, q)
	}
}

func validOutcome(o Outcome) bool {
	switch o {
	case "", Applied, Failed, InDoubt:
		return true
	}
	return false
}

func appendFloat(b []byte, v float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func (d *decoder) bool() bool {
	switch d.byte() {
	case 0:
		return false
	case 1:
		return true
	}
	d.fail("bad boolean")
	return false
}

func (d *decoder) uint32() uint32 {
	v := d.uvarint()
	if v > math.MaxUint32 {
		d.fail("value out of range")
		return 0
	}
	return uint32(v)
}

// count reads a count, refusing one larger than the bytes left could hold.
func (d *decoder) count() uint64 {
	n := d.uvarint()
	if d.err == nil && (n > maxSnapshotCount || n > uint64(len(d.p))) {
		d.fail("count out of range")
		return 0
	}
	return n
}
