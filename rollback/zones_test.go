package rollback

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// zoned is the rig with two zones: arm (shoulder, elbow) and base (base);
// gripper and kicker are in none.
func zoned(t testing.TB) *rig {
	return newRig(t, func(c *Config) {
		c.Zones = map[string][]string{"arm": {"shoulder", "elbow"}, "base": {"base"}}
	})
}

func TestZoneConfigRefused(t *testing.T) {
	for name, zones := range map[string]map[string][]string{
		"an actuator in two zones": {"arm": {"shoulder"}, "wrist": {"shoulder"}},
		"an unknown actuator":      {"arm": {"shoulder", "tail"}},
		"a zone without a name":    {"": {"shoulder"}},
	} {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, nil)
			if _, err := New(Config{Journal: &memJournal{}, Actuators: r.reg, Zones: zones}); err == nil {
				t.Fatal("New accepted the zones")
			}
		})
	}
}

func TestUnknownZone(t *testing.T) {
	r := zoned(t)
	if _, err := r.e.ZoneLatch("wrist", "x"); CodeOf(err) != CodeUnknownZone {
		t.Errorf("ZoneLatch: %v", err)
	}
	if _, err := r.e.ZoneHalt("wrist", "x"); CodeOf(err) != CodeUnknownZone {
		t.Errorf("ZoneHalt: %v", err)
	}
	if err := r.e.ZoneReset("op", "wrist", 1); CodeOf(err) != CodeUnknownZone {
		t.Errorf("ZoneReset: %v", err)
	}
	if _, err := r.e.ZoneGen("wrist"); CodeOf(err) != CodeUnknownZone {
		t.Errorf("ZoneGen: %v", err)
	}
	for _, z := range r.e.Zones() {
		if z.Halted {
			t.Errorf("zone %s halted by a refused request", z.Name)
		}
	}
	if len(r.j.all()) != 0 {
		t.Errorf("journaled %v", types(r.j.all()))
	}
}

// TestZoneHaltIsScoped: a zone halt unwinds only the sagas that touch the
// zone — a saga touching the zone and more is unwound whole, its steps in
// the zone unresolved and its others put back — parks only the zone's
// actuators, refuses steps on them, and leaves the rest serving.
func TestZoneHaltIsScoped(t *testing.T) {
	r := zoned(t)
	other := Owner{Agent: "driver", Lease: "L2", Epoch: 2}
	a := r.begin(t)
	r.step(t, a, "1", "shoulder", 40)
	m := r.begin(t)
	r.step(t, m, "1", "elbow", 50)
	r.step(t, m, "2", "gripper", 1)
	b, err := r.e.Begin(other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.e.Step(b, other, Command{ID: "1", Actuator: "base", Value: 30}); err != nil {
		t.Fatal(err)
	}
	before := len(r.w.setCalls())

	reps, err := r.e.ZoneHalt("arm", "light curtain")
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 2 {
		t.Fatalf("reports %v, want sagas %d and %d", reps, a, m)
	}
	buckets := map[string]Bucket{}
	for _, rep := range reps {
		if rep.Clean() || !strings.Contains(rep.Reason, "zone arm halted: light curtain") {
			t.Errorf("report %s", rep)
		}
		for _, s := range rep.Steps {
			buckets[s.Actuator] = s.Bucket
		}
	}
	want := map[string]Bucket{"shoulder": Unresolved, "elbow": Unresolved, "gripper": Compensated}
	if !mapsEqual(buckets, want) {
		t.Errorf("buckets %v, want %v", buckets, want)
	}
	// Only the gripper's compensation and the arm's safe values moved
	// anything; the base stayed where its saga put it.
	moved := r.w.setCalls()[before:]
	parked := map[string]bool{}
	for _, c := range moved {
		switch {
		case c.Actuator == "gripper" && c.Value == 0:
		case (c.Actuator == "shoulder" || c.Actuator == "elbow") && c.Value == 0:
			parked[c.Actuator] = true
		default:
			t.Errorf("moved %s to %g", c.Actuator, c.Value)
		}
	}
	w := r.w.snapshot()
	if w["base"] != 30 {
		t.Errorf("base at %g, want 30 (its zone is not halted)", w["base"])
	}
	for _, name := range []string{"shoulder", "elbow"} {
		if got, _ := r.e.Commanded(name); got != 0 {
			t.Errorf("%s commanded %g after the zone halt, want its safe value 0", name, got)
		}
		if !parked[name] {
			t.Errorf("%s was not sent to its safe value", name)
		}
	}
	if r.drivers["base"].halts != 0 || r.drivers["gripper"].halts != 0 {
		t.Error("an actuator outside the zone went to its safe policy")
	}

	// The zone refuses; the base keeps serving, in the saga it had.
	if _, err := r.e.Step(b, other, Command{ID: "2", Actuator: "base", Value: 20}); err != nil {
		t.Errorf("base step during the arm's halt: %v", err)
	}
	n := r.begin(t)
	if _, err := r.e.Step(n, r.owner, Command{ID: "1", Actuator: "shoulder", Value: 5}); CodeOf(err) != CodeZoneHalted {
		t.Errorf("shoulder step during the arm's halt: %v", err)
	}
	if _, err := r.e.Step(n, r.owner, Command{ID: "2", Actuator: "gripper", Value: 1}); err != nil {
		t.Errorf("gripper (no zone) step: %v", err)
	}
	zs := r.e.Zones()
	if len(zs) != 2 || !zs[0].Halted || zs[0].Reason != "light curtain" || zs[1].Halted {
		t.Errorf("Zones() = %+v", zs)
	}
	if h, _ := r.e.Halted(); h {
		t.Error("a zone halt latched the full halt")
	}
	if !slices.Contains(types(r.j.all()), RecZoneHalt) {
		t.Error("no ZONE_HALT journaled")
	}

	// A full halt and its reset leave the zone halted; the zone reset
	// clears it.
	if _, err := r.e.Halt("e-stop"); err != nil {
		t.Fatal(err)
	}
	if err := r.e.Reset("op", r.e.HaltGen()); err != nil {
		t.Fatal(err)
	}
	n2 := r.begin(t)
	if _, err := r.e.Step(n2, r.owner, Command{ID: "1", Actuator: "shoulder", Value: 5}); CodeOf(err) != CodeZoneHalted {
		t.Errorf("after a full reset, a step on the halted zone: %v", err)
	}
	gen, _ := r.e.ZoneGen("arm")
	if err := r.e.ZoneReset("op", "arm", gen); err != nil {
		t.Fatal(err)
	}
	if _, err := r.e.Step(n2, r.owner, Command{ID: "2", Actuator: "shoulder", Value: 5}); err != nil {
		t.Errorf("after the zone reset: %v", err)
	}
	if !slices.Contains(types(r.j.all()), RecZoneReset) {
		t.Error("no ZONE_RESET journaled")
	}
}

func mapsEqual(a, b map[string]Bucket) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestZoneResetKeepsLaterHalt: a zone halt latched after the generation a
// reset was decided on stays latched.
func TestZoneResetKeepsLaterHalt(t *testing.T) {
	r := zoned(t)
	if _, err := r.e.ZoneHalt("arm", "one"); err != nil {
		t.Fatal(err)
	}
	gen, _ := r.e.ZoneGen("arm")
	if _, err := r.e.ZoneHalt("arm", "two"); err != nil {
		t.Fatal(err)
	}
	if err := r.e.ZoneReset("op", "arm", gen); CodeOf(err) != CodeZoneHalted {
		t.Fatalf("reset of an older generation: %v", err)
	}
	if !r.e.Zones()[0].Halted {
		t.Fatal("zone cleared")
	}
}

// TestZoneHaltWaitsForTheEffectInFlight: a step on the zone in flight when
// the zone halts finishes and is recorded before the zone's safe values,
// and its saga is unwound once it returns.
func TestZoneHaltWaitsForTheEffectInFlight(t *testing.T) {
	r := zoned(t)
	release := make(chan struct{})
	entered := make(chan struct{})
	r.drivers["shoulder"].fail = func(v float64, n int) error {
		if n == 1 {
			close(entered)
			<-release
		}
		return nil
	}
	r.drivers["shoulder"].world.check = nil
	s := r.begin(t)
	done := make(chan error, 1)
	go func() {
		_, err := r.e.Step(s, r.owner, Command{ID: "1", Actuator: "shoulder", Value: 40})
		done <- err
	}()
	<-entered
	if _, err := r.e.ZoneLatch("arm", "halt mid-step"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // the zone's goroutine is waiting for the effect
	if calls := r.w.setCalls(); len(calls) != 0 {
		t.Fatalf("the zone moved %v while the shoulder's effect was in flight", calls)
	}
	close(release)
	<-done
	r.e.WaitZoneHalts()
	recs := r.j.all()
	applied, safe := -1, -1
	for i, rec := range recs {
		if rec.Type == RecApplied && rec.Saga == s {
			applied = i
		}
		if rec.Type == RecSafe && rec.Actuator == "shoulder" {
			safe = i
		}
	}
	if applied < 0 || safe < applied {
		t.Fatalf("APPLIED at %d, SAFE at %d: %v", applied, safe, types(recs))
	}
	if len(r.e.OpenSagas()) != 0 {
		t.Error("the saga on the halted zone is still open")
	}
	if got, _ := r.e.Commanded("shoulder"); got != 0 {
		t.Errorf("shoulder commanded %g, want its safe value", got)
	}
}

// TestZoneHaltRebuiltAtEveryCut: a crash at every record of a zone halt's
// story rebuilds the zone's latch, and recovery never moves an actuator of
// a halted zone anywhere but to its safe value.
func TestZoneHaltRebuiltAtEveryCut(t *testing.T) {
	src := zoned(t)
	s := src.begin(t)
	src.step(t, s, "1", "gripper", 1)
	src.step(t, s, "2", "shoulder", 40)
	if _, err := src.e.ZoneHalt("arm", "curtain"); err != nil {
		t.Fatal(err)
	}
	gen, _ := src.e.ZoneGen("arm")
	if err := src.e.ZoneReset("op", "arm", gen); err != nil {
		t.Fatal(err)
	}
	all := src.j.all()
	for cut := 1; cut <= len(all); cut++ {
		halted := false
		for _, rec := range all[:cut] {
			switch rec.Type {
			case RecZoneHalt:
				halted = true
			case RecZoneReset:
				halted = false
			}
		}
		dst := zoned(t)
		src.j.rebuildInto(t, dst.e, cut)
		for name := range dst.drivers {
			v, _ := dst.e.Commanded(name)
			dst.w.value[name] = v
		}
		if got := dst.e.Zones()[0].Halted; got != halted {
			t.Fatalf("cut %d: arm rebuilt halted=%v, want %v", cut, got, halted)
		}
		if _, err := dst.e.Recover(); err != nil {
			t.Fatalf("cut %d: %v", cut, err)
		}
		parked := false
		for _, c := range dst.w.setCalls() {
			if halted && (c.Actuator == "shoulder" || c.Actuator == "elbow") && c.Value != 0 {
				t.Errorf("cut %d: recovery moved %s to %g in a halted zone", cut, c.Actuator, c.Value)
			}
			parked = parked || (c.Actuator == "shoulder" && c.Value == 0)
		}
		if halted {
			if _, err := dst.e.Step(mustBegin(t, dst), dst.owner, Command{ID: "x", Actuator: "elbow", Value: 1}); CodeOf(err) != CodeZoneHalted {
				t.Errorf("cut %d: step on the rebuilt halted zone: %v", cut, err)
			}
			if !parked {
				t.Errorf("cut %d: recovery did not park the halted zone", cut)
			}
		}
	}
}

func mustBegin(t *testing.T, r *rig) uint64 {
	t.Helper()
	id, err := r.e.Begin(r.owner)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestZoneNoLongerConfiguredHaltsAll: a journal that ends with a zone
// halted which today's configuration does not name cannot say which
// actuators must stay still: recovery halts everything.
func TestZoneNoLongerConfiguredHaltsAll(t *testing.T) {
	src := zoned(t)
	if _, err := src.e.ZoneHalt("arm", "curtain"); err != nil {
		t.Fatal(err)
	}
	dst := newRig(t, nil) // no zones
	src.j.rebuildInto(t, dst.e, len(src.j.all()))
	if _, err := dst.e.Recover(); err != nil {
		t.Fatal(err)
	}
	if h, why := dst.e.Halted(); !h || !strings.Contains(why, "zone arm") {
		t.Fatalf("halted %v %q", h, why)
	}
	// The zone is known from the journal, so an operator can clear it.
	gen, err := dst.e.ZoneGen("arm")
	if err != nil {
		t.Fatal(err)
	}
	if err := dst.e.ZoneReset("op", "arm", gen); err != nil {
		t.Fatal(err)
	}
}

// TestZoneSnapshot: a checkpoint taken while a zone is halted carries the
// zone's latch (version 3); one taken with no zone records is the version 2
// layout.
func TestZoneSnapshot(t *testing.T) {
	src := zoned(t)
	s := src.begin(t)
	src.step(t, s, "1", "base", 10)
	plain := zoned(t)
	src.j.rebuildInto(t, plain.e, len(src.j.all()))
	snap, err := plain.e.Snapshot()
	if err != nil || snap[0] != snapshotVersion {
		t.Fatalf("snapshot without zone records: version %d, %v", snap[0], err)
	}
	if _, err := src.e.ZoneHalt("arm", "curtain"); err != nil {
		t.Fatal(err)
	}
	full := zoned(t)
	src.j.rebuildInto(t, full.e, len(src.j.all()))
	snap, err = full.e.Snapshot()
	if err != nil || snap[0] != snapshotVersionV3 {
		t.Fatalf("snapshot with a zone halt: version %d, %v", snap[0], err)
	}
	back := zoned(t)
	if err := back.e.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if got, want := back.e.Zones(), full.e.Zones(); !slices.EqualFunc(got, want, func(a, b ZoneState) bool {
		return a.Name == b.Name && a.Halted == b.Halted && a.Reason == b.Reason
	}) {
		t.Errorf("restored zones %+v, want %+v", got, want)
	}
	again, err := back.e.Snapshot()
	if err != nil || string(again) != string(snap) {
		t.Errorf("snapshot of the restored engine differs (%v)", err)
	}
}

// TestSnapshotV3IsV2PlusZones: with a drain, a quarantined agent and a
// halted zone, the checkpoint is version 3, and its bytes are those of
// version 2 (the drain and quarantine sections) followed by the zone
// section, as docs/JOURNAL.md lays them out. The version 2 prefix alone
// restores the drain and the quarantine without zones; version 3 restores
// all three.
func TestSnapshotV3IsV2PlusZones(t *testing.T) {
	src := zoned(t)
	s := src.begin(t)
	src.step(t, s, "1", "base", 10)
	if _, err := src.e.StartDrain(time.Minute, "ops: maintenance"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := src.e.QuarantineAgent("rogue", "ops: erratic"); err != nil {
		t.Fatal(err)
	}
	if _, err := src.e.ZoneHalt("arm", "curtain"); err != nil {
		t.Fatal(err)
	}
	full := zoned(t)
	src.j.rebuildInto(t, full.e, len(src.j.all()))
	v3, err := full.e.Snapshot()
	if err != nil || v3[0] != snapshotVersionV3 {
		t.Fatalf("snapshot: version %d, %v", v3[0], err)
	}
	zoneSection := binary.AppendUvarint(nil, 1)
	zoneSection = appendString(zoneSection, "arm")
	zoneSection = binary.AppendUvarint(zoneSection, 1) // latched
	zoneSection = binary.AppendUvarint(zoneSection, 0) // reset
	zoneSection = appendString(zoneSection, "curtain")
	if !bytes.HasSuffix(v3, zoneSection) {
		t.Fatalf("version 3 does not end with the zone section: % x", v3)
	}
	v2 := append([]byte{snapshotVersion}, v3[1:len(v3)-len(zoneSection)]...)
	check := func(e *Engine, how string, wantZone bool) {
		t.Helper()
		if d, on := e.Draining(); !on || d.Why != "ops: maintenance" {
			t.Errorf("%s: drain %+v %v", how, d, on)
		}
		if q := e.Quarantined(); len(q) != 1 || q[0].Agent != "rogue" {
			t.Errorf("%s: quarantined %+v", how, q)
		}
		halted := false
		for _, z := range e.Zones() {
			if z.Name == "arm" && z.Halted && z.Reason == "curtain" {
				halted = true
			}
		}
		if halted != wantZone {
			t.Errorf("%s: arm halted %v, want %v (%+v)", how, halted, wantZone, e.Zones())
		}
	}
	back := zoned(t)
	if err := back.e.Restore(v3); err != nil {
		t.Fatal(err)
	}
	check(back.e, "version 3", true)
	if again, err := back.e.Snapshot(); err != nil || !bytes.Equal(again, v3) {
		t.Errorf("snapshot of the restored engine differs (%v)", err)
	}
	old := zoned(t)
	if err := old.e.Restore(v2); err != nil {
		t.Fatalf("the version 2 prefix: %v", err)
	}
	check(old.e, "version 2", false)
	// A zone section behind a version 2 byte is trailing garbage.
	bad := append([]byte{snapshotVersion}, v3[1:]...)
	if _, err := decodeSnapshot(bad); !errors.Is(err, ErrBadSnapshot) {
		t.Errorf("version 2 with a zone section: %v", err)
	}
}

// TestBarrierUnwindsSkipAHaltedZone: a quarantine's unwind and a drain
// deadline's unwind that meet a saga touching a zone whose halt is latched
// but not yet applied (the zone's pass has not run) never move the zone's
// actuator: they unwind through the same compensation as every unwind, which
// settles the zone's steps unresolved and puts the others back. The zone's
// pass then parks the zone.
func TestBarrierUnwindsSkipAHaltedZone(t *testing.T) {
	for _, how := range []string{"quarantine", "drain deadline"} {
		t.Run(how, func(t *testing.T) {
			r := zoned(t)
			s := r.begin(t)
			r.step(t, s, "1", "shoulder", 40)
			r.step(t, s, "2", "gripper", 1)
			var d Drain
			if how == "drain deadline" {
				var err error
				if d, err = r.e.StartDrain(time.Millisecond, "ops: maintenance"); err != nil {
					t.Fatal(err)
				}
			}
			before := len(r.w.setCalls())
			// Hold the zone's pass: the latch is set, nothing of the zone
			// has been unwound or parked yet.
			r.e.zl.pass.Lock()
			if _, err := r.e.ZoneLatch("arm", "light curtain"); err != nil {
				r.e.zl.pass.Unlock()
				t.Fatal(err)
			}
			var reps []*Report
			if how == "quarantine" {
				var err error
				reps, _, err = r.e.QuarantineAgent(r.owner.Agent, "ops: erratic")
				if err != nil {
					r.e.zl.pass.Unlock()
					t.Fatal(err)
				}
			} else {
				reps = r.e.UnwindDrained(d)
			}
			moved := r.w.setCalls()[before:]
			r.e.zl.pass.Unlock()
			r.e.WaitZoneHalts()

			if len(reps) != 1 {
				t.Fatalf("reports %v, want saga %d's", reps, s)
			}
			buckets := map[string]Bucket{}
			for _, st := range reps[0].Steps {
				buckets[st.Actuator] = st.Bucket
			}
			if want := map[string]Bucket{"shoulder": Unresolved, "gripper": Compensated}; !mapsEqual(buckets, want) {
				t.Errorf("buckets %v, want %v", buckets, want)
			}
			for _, c := range moved {
				if c.Actuator != "gripper" {
					t.Errorf("the %s unwind moved %s to %g (zone arm halted)", how, c.Actuator, c.Value)
				}
			}
			if got, _ := r.e.Commanded("shoulder"); got != 0 {
				t.Errorf("shoulder commanded %g after the zone's pass, want its safe value 0", got)
			}
		})
	}
}
