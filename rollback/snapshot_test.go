package rollback

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

// randomWorkload drives the rig's engine through seeded random sagas:
// steps within and beyond limits, failed, in-doubt and timed-out effects,
// commits, aborts, leases, refusals, halts and resets, drains and quarantines. Its journal is the
// material for the snapshot tests.
func randomWorkload(t testing.TB, r *rig, seed uint64, ops int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	names := []string{"base", "shoulder", "elbow", "gripper", "kicker"}
	for _, d := range r.drivers {
		d.fail = func(v float64, n int) error {
			switch rng.IntN(12) {
			case 0:
				return errors.New("driver says no")
			case 1:
				return fmt.Errorf("nothing sent: %w", actuators.ErrNotApplied)
			}
			return nil
		}
	}
	var open []uint64
	for i := 0; i < ops; i++ {
		k := rng.IntN(40)
		if i >= ops-25 {
			k = rng.IntN(12) // the end: sagas left open, steps in them, as at a crash
		}
		if r.e.latched() && k%2 == 0 {
			r.e.WaitHalts()
			r.e.Reset("test", r.e.HaltGen())
			continue
		}
		switch {
		case k < 3 || len(open) == 0:
			if id, err := r.e.Begin(r.owner); err == nil {
				open = append(open, id)
			}
		case k < 12:
			s := open[rng.IntN(len(open))]
			v := rng.Float64()*200 - 100 // sometimes beyond the ±90 limits: refused
			r.e.Step(s, r.owner, Command{ID: fmt.Sprintf("c%d", i), Actuator: names[rng.IntN(len(names))], Value: v})
		case k < 14:
			j := rng.IntN(len(open))
			r.e.Commit(open[j], r.owner)
			open = append(open[:j], open[j+1:]...)
		case k < 16:
			j := rng.IntN(len(open))
			r.e.Abort(open[j], r.owner, "test abort")
			open = append(open[:j], open[j+1:]...)
		case k < 17:
			r.e.RecordLease("planner", "L1", uint64(i))
		case k < 18:
			r.e.RecordRefusal(open[0], r.owner, Command{ID: "x", Actuator: "base"}, CodeActuatorUnknown, "test")
		case k < 19:
			r.e.Halt("test halt")
			open = nil
		case k < 20:
			r.e.Reset("test", r.e.HaltGen())
		case k < 21:
			if _, on := r.e.Draining(); on {
				r.e.EndDrain("test undrain")
			} else {
				r.e.StartDrain(0, "test drain")
			}
		case k < 22:
			if r.e.IsQuarantined(r.owner.Agent) {
				r.e.ReleaseAgent(r.owner.Agent, "test release")
			} else {
				r.e.QuarantineAgent(r.owner.Agent, "test quarantine")
				open = nil
			}
		default:
			if id, err := r.e.Begin(r.owner); err == nil {
				open = append(open, id)
			}
		}
	}
}

// freshEngine is a fresh engine on r's actuators with its own journal.
func freshEngine(t *testing.T, r *rig, order Order) (*Engine, *memJournal) {
	t.Helper()
	j := &memJournal{}
	e, err := New(Config{Journal: j, Actuators: r.reg, RetryBackoff: 1, Order: order})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, j
}

func mustSnapshot(t *testing.T, e *Engine) []byte {
	t.Helper()
	b, err := e.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	return b
}

// The checkpoint rule: for every prefix of a journal, restoring the
// prefix's snapshot and applying the rest gives exactly the state a
// rebuild from the whole journal gives — and the same recovery: the same
// records journaled, the same moves, the same reports.
func TestSnapshotAtEveryPrefixGivesTheSameState(t *testing.T) {
	for _, order := range []Order{Retrace, Direct} {
		for seed := uint64(1); seed <= 12; seed++ {
			t.Run(fmt.Sprintf("%s/seed%d", order, seed), func(t *testing.T) {
				r := newRig(t, func(c *Config) { c.Order = order })
				randomWorkload(t, r, seed, 200)
				r.e.WaitHalts()
				n := len(r.j.all())
				t.Logf("%d records, %d sagas open", n, len(r.e.sagas))
				full, _ := freshEngine(t, r, order)
				r.j.rebuildInto(t, full, n)
				want := mustSnapshot(t, full)
				for k := 0; k <= n; k++ {
					pre, _ := freshEngine(t, r, order)
					r.j.rebuildInto(t, pre, k)
					snap := mustSnapshot(t, pre)
					got, _ := freshEngine(t, r, order)
					if err := got.Restore(snap); err != nil {
						t.Fatalf("prefix %d: Restore: %v", k, err)
					}
					if again := mustSnapshot(t, got); !bytes.Equal(again, snap) {
						t.Fatalf("prefix %d: Restore then Snapshot differs from the snapshot restored", k)
					}
					r.j.mu.Lock()
					for i := k; i < n; i++ {
						if err := got.Apply(uint64(i+1), r.j.types[i], r.j.raw[i]); err != nil {
							r.j.mu.Unlock()
							t.Fatalf("prefix %d: Apply %d after Restore: %v", k, i+1, err)
						}
					}
					r.j.mu.Unlock()
					if s := mustSnapshot(t, got); !bytes.Equal(s, want) {
						t.Fatalf("prefix %d of %d: state after Restore+Apply differs from a full rebuild", k, n)
					}
				}
				// The same recovery from both: a full rebuild, and the
				// snapshot taken halfway plus the rest (drivers that
				// no longer fail at random).
				for _, d := range r.drivers {
					d.fail = nil
				}
				fullRecs, fullReps := recoverViaSnapshot(t, r, order, n, -1)
				halfRecs, halfReps := recoverViaSnapshot(t, r, order, n, n/2)
				if fullRecs != halfRecs || fullReps != halfReps {
					t.Fatalf("recovery differs:\nfull rebuild:\n%s%s\nsnapshot at %d:\n%s%s", fullRecs, fullReps, n/2, halfRecs, halfReps)
				}
			})
		}
	}
}

// recoverViaSnapshot rebuilds an engine from r's journal — whole (at < 0), or from
// the snapshot of its first at records plus the rest — runs Recover, and
// returns what it journaled (without times) and its reports.
func recoverViaSnapshot(t *testing.T, r *rig, order Order, n, at int) (string, string) {
	t.Helper()
	e, j := freshEngine(t, r, order)
	from := 0
	if at >= 0 {
		pre, _ := freshEngine(t, r, order)
		r.j.rebuildInto(t, pre, at)
		if err := e.Restore(mustSnapshot(t, pre)); err != nil {
			t.Fatal(err)
		}
		from = at
	}
	r.j.mu.Lock()
	for i := from; i < n; i++ {
		if err := e.Apply(uint64(i+1), r.j.types[i], r.j.raw[i]); err != nil {
			r.j.mu.Unlock()
			t.Fatal(err)
		}
	}
	r.j.mu.Unlock()
	reps, err := e.Recover()
	if err != nil {
		t.Fatal(err)
	}
	var recs, out strings.Builder
	for _, rec := range j.all() {
		rec.UnixNano = 0
		fmt.Fprintf(&recs, "%+v\n", rec)
	}
	for _, rep := range reps {
		out.WriteString(rep.String())
	}
	return recs.String(), out.String()
}

// A snapshot is refused from an engine that has served a command: its
// state holds what no record describes yet.
func TestSnapshotRefusesAServingEngine(t *testing.T) {
	r := newRig(t, nil)
	s := r.begin(t)
	r.step(t, s, "a", "base", 5)
	if _, err := r.e.Snapshot(); err == nil {
		t.Fatal("Snapshot of a serving engine succeeded")
	}
}

// Restore only into a new engine; a snapshot taken under other actuators
// is installed for what both know and reported as a mismatch.
func TestRestoreRules(t *testing.T) {
	r := newRig(t, nil)
	randomWorkload(t, r, 7, 60)
	r.e.WaitHalts()
	src, _ := freshEngine(t, r, Retrace)
	r.j.rebuildInto(t, src, len(r.j.all()))
	snap := mustSnapshot(t, src)

	used, _ := freshEngine(t, r, Retrace)
	r.j.rebuildInto(t, used, 3)
	if err := used.Restore(snap); err == nil {
		t.Fatal("Restore into an engine that applied records succeeded")
	}

	// Another configuration: elbow gone, a new wrist.
	var list []*actuators.Actuator
	for _, n := range r.reg.Names() {
		if n != "elbow" {
			list = append(list, r.reg.Get(n))
		}
	}
	list = append(list, &actuators.Actuator{Name: "wrist", Kind: actuators.Servo, Limits: r.reg.Get("base").Limits, Driver: &fakeDriver{name: "wrist", world: r.w}, Timeout: 50e6})
	reg, err := actuators.NewRegistry(list...)
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(Config{Journal: &memJournal{}, Actuators: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	err = other.Restore(snap)
	if !errors.Is(err, ErrSnapshotMismatch) || !strings.Contains(err.Error(), "elbow is no longer configured") || !strings.Contains(err.Error(), "wrist was not configured") {
		t.Fatalf("Restore under another configuration: %v", err)
	}
	if _, err := other.Reconcile(context.Background()); err != nil {
		t.Fatalf("the restored engine does not work: %v", err)
	}
}

// Every truncation and every single-byte change of a snapshot is refused
// with ErrBadSnapshot or decodes to something valid: never a panic.
func TestDecodeSnapshotDamage(t *testing.T) {
	r := newRig(t, nil)
	randomWorkload(t, r, 3, 80)
	r.e.WaitHalts()
	src, _ := freshEngine(t, r, Retrace)
	r.j.rebuildInto(t, src, len(r.j.all()))
	snap := mustSnapshot(t, src)
	for i := range snap {
		if _, err := decodeSnapshot(snap[:i]); !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("truncated to %d bytes: %v", i, err)
		}
	}
	if _, err := decodeSnapshot(append(append([]byte(nil), snap...), 0)); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("a trailing byte: %v", err)
	}
	bad := append([]byte(nil), snap...)
	bad[0] = snapshotVersionV3 + 1
	if _, err := decodeSnapshot(bad); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("another version: %v", err)
	}
}

func FuzzDecodeSnapshot(f *testing.F) {
	f.Add([]byte{snapshotVersion, 1, 0, 0, 0, 0, 0, 0, 0})
	r := newRig(f, nil)
	randomWorkload(f, r, 5, 60)
	r.e.WaitHalts()
	src, err := New(Config{Journal: &memJournal{}, Actuators: r.reg})
	if err != nil {
		f.Fatal(err)
	}
	r.j.mu.Lock()
	for i := range r.j.raw {
		if err := src.Apply(uint64(i+1), r.j.types[i], r.j.raw[i]); err != nil {
			f.Fatal(err)
		}
	}
	r.j.mu.Unlock()
	if b, err := src.Snapshot(); err == nil {
		f.Add(b)
	}
	// A drain and quarantined agents (version 2), and version 1.
	bar := newRig(f, nil)
	bar.e.StartDrain(time.Minute, "ops: maintenance")
	bar.e.QuarantineAgent("rogue", "ops: erratic")
	bar.e.QuarantineAgent("x", "")
	withBarriers, _ := New(Config{Journal: &memJournal{}, Actuators: bar.reg})
	for i := range bar.j.raw {
		if err := withBarriers.Apply(uint64(i+1), bar.j.types[i], bar.j.raw[i]); err != nil {
			f.Fatal(err)
		}
	}
	if b, err := withBarriers.Snapshot(); err == nil {
		f.Add(b)
	}
	f.Add([]byte{snapshotV1, 1, 0, 0, 0, 0, 0, 0, 0})
	// A version-3 snapshot: a zone halted, then reset, then halted again,
	// with a drain and a quarantined agent (every section filled).
	z := zoned(f)
	z.e.ZoneHalt("arm", "one")
	z.e.ZoneReset("op", "arm", 1)
	z.e.ZoneHalt("arm", "two")
	z.e.StartDrain(time.Minute, "ops: maintenance")
	z.e.QuarantineAgent("rogue", "ops: erratic")
	zsrc, err := New(Config{Journal: &memJournal{}, Actuators: z.reg})
	if err != nil {
		f.Fatal(err)
	}
	z.j.mu.Lock()
	for i := range z.j.raw {
		if err := zsrc.Apply(uint64(i+1), z.j.types[i], z.j.raw[i]); err != nil {
			f.Fatal(err)
		}
	}
	z.j.mu.Unlock()
	if b, err := zsrc.Snapshot(); err == nil && b[0] == snapshotVersionV3 {
		f.Add(b)
	} else {
		f.Fatalf("no version-3 seed: %v", err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeSnapshot(b)
		if err != nil {
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("error not wrapping ErrBadSnapshot: %v", err)
			}
			return
		}
		// What decodes installs into a new engine and encodes back to
		// the same bytes (the encoding is canonical).
		e, err := New(Config{Journal: &memJournal{}, Actuators: r.reg})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if err := e.Restore(b); err != nil && !errors.Is(err, ErrSnapshotMismatch) {
			t.Fatalf("decoded (%d sagas) but Restore failed: %v", len(s.sagas), err)
		}
	})
}
