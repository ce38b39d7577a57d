package modelcheck

import (
	"fmt"
	"strconv"
	"strings"
)

// Shape is how the faulting step's effect fails.
type Shape uint8

// The failure shapes of a forward step.
const (
	// NoFault: every step applies; the saga ends by End.
	NoFault Shape = iota
	// Failed: the driver reports a failure wrapping actuators.ErrNotApplied,
	// its promise that the output did not change.
	Failed
	// DoubtApplied: the driver times out after the effect happened.
	DoubtApplied
	// DoubtNotApplied: the link is lost before the effect happened.
	DoubtNotApplied
)

var shapeNames = [...]string{"none", "failed", "doubt-applied", "doubt-not-applied"}

func (s Shape) String() string {
	if int(s) < len(shapeNames) {
		return shapeNames[s]
	}
	return fmt.Sprintf("shape(%d)", s)
}

// End is how a saga with no faulting step ends.
type End uint8

// The ends of a saga with no faulting step.
const (
	Commit End = iota // the agent commits
	Abort             // the agent aborts: every step is unwound
	Expire            // the agent's lease runs out (two-saga cases): its saga is unwound
)

var endNames = [...]string{"commit", "abort", "expire"}

func (e End) String() string {
	if int(e) < len(endNames) {
		return endNames[e]
	}
	return fmt.Sprintf("end(%d)", e)
}

// Case is one run of the model: a saga of Steps steps, one of which may
// fault, with a set of compensations that fail, perhaps a step on an
// actuator that cannot be undone, and perhaps a power cut during the run
// and another during the recovery that follows it.
//
// In a two-saga case (Sagas == 2) a second agent's saga of Steps2 steps runs
// on other actuators, interleaved with the first by Interleave, and the
// first agent's lease expires after its Expire-th step.
type Case struct {
	Steps int
	// Fault is the step whose effect fails (1-based); 0: none.
	Fault int
	Shape Shape
	// End says how a saga with no faulting step ends.
	End End
	// CompFail has bit i-1 set when every compensation of step i fails.
	CompFail uint32
	// Orphan is the step (1-based) that runs on the pulse actuator, whose
	// effect cannot be undone; 0: none.
	Orphan int
	// Crash cuts the power just before the Crash-th mutating file-system
	// call of the run (1-based); 0: no crash.
	Crash int
	// RecoveryCrash cuts the power again just before the k-th mutating call
	// of the recovery that follows the crash; 0: recovery runs to the end.
	RecoveryCrash int

	// FirstTouch runs the engine in first-touch durability: only a saga's
	// first INTENT on each actuator waits for the disk.
	FirstTouch bool

	// Two-saga cases.
	Sagas  int    // 1 (default) or 2
	Steps2 int    // steps of the second agent's saga
	Order  uint32 // bit k set: the (k+1)-th step of the run is the second saga's
	Expire int    // the first agent's lease expires after its Expire-th step

	// Zone cases (two sagas, no expiry): the zone "arm" (the shoulder)
	// halts after the Zone-th step of the run; with ZoneReset an operator
	// resets the zone once every step has been issued, before the commits.
	Zone      int
	ZoneReset bool

	// Halts latched from inside a journal sync (crash-free runs, each
	// followed by a restart): while the HaltSync-th Journal.Sync of the
	// run is under way — the engine's lock released, the records not yet
	// durable — an e-stop latches the full halt (Engine.Latch), or with
	// HaltZone the zone "arm"'s halt (Engine.ZoneLatch), from another
	// goroutine, as a real one would. With HaltFail the disk dies at that
	// moment: that sync and every later file-system call fail (EIO, a
	// dead disk). 0: no such halt.
	HaltSync int
	// HaltZone names the zone halted instead of the full halt: "arm" (the
	// shoulder, safe value) or "root" (the base, safe policy hold).
	HaltZone string
	HaltFail bool
}

// String is the case's id: `check --case ID` replays it.
func (c Case) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "n%d", c.Steps)
	if c.Sagas == 2 {
		fmt.Fprintf(&b, ".b%d.order%d.expire%d", c.Steps2, c.Order, c.Expire)
	}
	if c.Zone > 0 {
		fmt.Fprintf(&b, ".zone%d", c.Zone)
		if c.ZoneReset {
			b.WriteString(".zreset")
		}
	}
	if c.HaltSync > 0 {
		kind := "hsync"
		if c.HaltZone != "" {
			kind = "zsync"
		}
		fmt.Fprintf(&b, ".%s%d", kind, c.HaltSync)
		if c.HaltZone != "" {
			b.WriteString("-" + c.HaltZone)
		}
		if c.HaltFail {
			b.WriteString(".eio")
		}
	}
	if c.Fault > 0 {
		fmt.Fprintf(&b, ".f%d-%s", c.Fault, c.Shape)
	} else {
		fmt.Fprintf(&b, ".%s", c.End)
	}
	fmt.Fprintf(&b, ".comp%d.orphan%d.crash%d.rcrash%d", c.CompFail, c.Orphan, c.Crash, c.RecoveryCrash)
	if c.FirstTouch {
		b.WriteString(".ft")
	}
	return b.String()
}

// ParseCase reads a case id written by Case.String.
func ParseCase(id string) (Case, error) {
	c := Case{Sagas: 1}
	bad := func(part string) (Case, error) {
		return Case{}, fmt.Errorf("modelcheck: bad case id %q at %q", id, part)
	}
	for i, part := range strings.Split(id, ".") {
		num := func(prefix string) (int, bool) {
			if !strings.HasPrefix(part, prefix) {
				return 0, false
			}
			n, err := strconv.Atoi(part[len(prefix):])
			return n, err == nil && n >= 0
		}
		bits := func(prefix string) (uint32, bool) { // a set of steps, bit i-1 for step i
			n, ok := num(prefix)
			return uint32(n), ok
		}
		var ok bool
		switch {
		case i == 0:
			c.Steps, ok = num("n")
		case part == "ft":
			c.FirstTouch, ok = true, true
		case part == "zreset":
			c.ZoneReset, ok = true, true
		case part == "eio":
			c.HaltFail, ok = true, true
		case strings.HasPrefix(part, "hsync"):
			c.HaltSync, ok = num("hsync")
			ok = ok && c.HaltSync > 0
		case strings.HasPrefix(part, "zsync"):
			k, zone, found := strings.Cut(part[len("zsync"):], "-")
			n, err := strconv.Atoi(k)
			c.HaltSync, c.HaltZone = n, zone
			ok = found && err == nil && n > 0 && (zone == haltedZone || zone == rootZone)
		case strings.HasPrefix(part, "zone"):
			c.Zone, ok = num("zone")
		case strings.HasPrefix(part, "f"):
			f, shape, found := strings.Cut(part[1:], "-")
			n, err := strconv.Atoi(f)
			ok = found && err == nil && n > 0
			c.Fault = n
			c.Shape = NoFault
			for s, name := range shapeNames {
				if name == shape && s != 0 {
					c.Shape = Shape(s)
				}
			}
			ok = ok && c.Shape != NoFault
		case part == "commit" || part == "abort" || part == "expire":
			ok = true
			for e, name := range endNames {
				if name == part {
					c.End = End(e)
				}
			}
		case strings.HasPrefix(part, "comp"):
			c.CompFail, ok = bits("comp")
		case strings.HasPrefix(part, "orphan"):
			c.Orphan, ok = num("orphan")
		case strings.HasPrefix(part, "crash"):
			c.Crash, ok = num("crash")
		case strings.HasPrefix(part, "rcrash"):
			c.RecoveryCrash, ok = num("rcrash")
		case strings.HasPrefix(part, "b"):
			c.Sagas = 2
			c.Steps2, ok = num("b")
		case strings.HasPrefix(part, "order"):
			c.Order, ok = bits("order")
		case strings.HasPrefix(part, "expire"):
			c.Expire, ok = num("expire")
		}
		if !ok {
			return bad(part)
		}
	}
	if err := c.valid(); err != nil {
		return Case{}, fmt.Errorf("modelcheck: case %q: %w", id, err)
	}
	return c, nil
}

func (c Case) valid() error {
	switch {
	case c.Steps < 1 || c.Steps > maxSteps:
		return fmt.Errorf("steps must be 1..%d", maxSteps)
	case c.Fault > c.Steps || c.Orphan > c.Steps:
		return fmt.Errorf("fault and orphan must name a step")
	case c.CompFail>>uint(c.Steps) != 0:
		return fmt.Errorf("compensation mask names a step beyond %d", c.Steps)
	case c.Sagas != 2 && (c.Steps2 != 0 || c.Order != 0 || c.Expire != 0):
		return fmt.Errorf("an interleaving or a lease expiry without a second saga")
	case c.Sagas == 2 && (c.Steps2 < 1 || c.Steps+c.Steps2 > maxSteps || c.Expire > c.Steps || (c.Zone == 0 && c.Expire == 0 && c.End != Commit)):
		return fmt.Errorf("two-saga case out of range")
	case c.HaltZone != "" && (c.Sagas != 2 || c.Zone != 0):
		return fmt.Errorf("a zone halt at a sync is a case of two sagas without a scheduled zone halt")
	case (c.HaltFail || c.HaltZone != "") && c.HaltSync == 0:
		return fmt.Errorf("a dead disk or a zone without a halt at a sync")
	case c.HaltSync < 0 || c.HaltSync > maxHaltSync:
		return fmt.Errorf("halt at sync %d out of range", c.HaltSync)
	case c.Zone > 0 && (c.Sagas != 2 || c.Expire != 0 || c.End != Commit || c.Zone > c.Steps+c.Steps2):
		return fmt.Errorf("zone case out of range")
	case c.ZoneReset && c.Zone == 0:
		return fmt.Errorf("a zone reset without a zone halt")
	case c.Sagas == 2 && c.Order>>uint(c.Steps+c.Steps2) != 0:
		return fmt.Errorf("interleaving names a step beyond the run")
	}
	return nil
}

// maxSteps bounds a case: step targets and masks are sized for it.
const maxSteps = 16

// maxHaltSync bounds HaltSync (a run of maxSteps steps syncs far fewer
// times).
const maxHaltSync = 1 << 12

// compensated lists the steps an unwind of this case attempts to move back
// (those whose effect may have happened), as a mask: the compensation-failure
// subsets range over it.
func (c Case) compensated() uint32 {
	var last int
	switch {
	case c.Fault > 0 && c.Shape == Failed:
		last = c.Fault - 1
	case c.Fault > 0:
		last = c.Fault
	case c.End == Commit:
		return 0
	default:
		last = c.Steps
	}
	mask := uint32(1)<<uint(last) - 1
	if c.Orphan > 0 {
		mask &^= 1 << uint(c.Orphan-1)
	}
	return mask
}

// BaseCases lists, for n = 1..maxN steps, every crash-free single-saga case:
// which step faults (or none, ending in commit or abort), how, every subset
// of the attempted compensations that fails, and which step (or none) runs
// on the actuator with no undo.
func BaseCases(maxN int) []Case {
	var out []Case
	for n := 1; n <= maxN; n++ {
		for orphan := 0; orphan <= n; orphan++ {
			var shapes []Case
			shapes = append(shapes, Case{Steps: n, End: Commit}, Case{Steps: n, End: Abort})
			for f := 1; f <= n; f++ {
				for _, s := range []Shape{Failed, DoubtApplied, DoubtNotApplied} {
					shapes = append(shapes, Case{Steps: n, Fault: f, Shape: s})
				}
			}
			for _, c := range shapes {
				c.Orphan, c.Sagas = orphan, 1
				for _, sub := range subsets(c.compensated()) {
					c.CompFail = sub
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// TwoSagaCases lists, for two sagas of a and b steps with a+b <= maxN
// (a, b >= 1), every interleaving of their steps, with the first agent's
// lease expiring after each of its steps in turn while the second agent
// commits. No step faults: what is checked is that one agent's unwind
// never touches the other's actuators.
func TwoSagaCases(maxN int) []Case {
	var out []Case
	interleavings(maxN, func(a, b int, order uint32) {
		for exp := 1; exp <= a; exp++ {
			out = append(out, Case{Steps: a, Steps2: b, Sagas: 2, Order: order, Expire: exp, End: Expire})
		}
	})
	return out
}

// ZoneCases lists, for two sagas of a and b steps with a+b <= maxN, every
// interleaving, with the zone "arm" (the shoulder, an actuator of the first
// saga's from its second step) halted after each step of the run in turn,
// and with and without a zone reset after the last step. The first saga is
// unwound whole if it touched the zone by then; the second, on the other
// zone, must commit.
func ZoneCases(maxN int) []Case {
	var out []Case
	interleavings(maxN, func(a, b int, order uint32) {
		for z := 1; z <= a+b; z++ {
			for _, reset := range []bool{false, true} {
				out = append(out, Case{Steps: a, Steps2: b, Sagas: 2, Order: order, End: Commit, Zone: z, ZoneReset: reset})
			}
		}
	})
	return out
}

// interleavings calls f, for two sagas of a and b steps (a, b >= 1, a+b <=
// maxN) by total then a, with every order: a bit per step of the run, set
// where the second saga's step comes.
func interleavings(maxN int, f func(a, b int, order uint32)) {
	for total := 2; total <= maxN; total++ {
		for a := 1; a < total; a++ {
			b := total - a
			for order := uint32(0); order < 1<<uint(total); order++ {
				if popcount(order) == b {
					f(a, b, order)
				}
			}
		}
	}
}

func popcount(x uint32) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}

// subsets lists every subset of mask, the empty one first.
func subsets(mask uint32) []uint32 {
	out := []uint32{0}
	for sub := mask; sub != 0; sub = (sub - 1) & mask {
		out = append(out, sub)
	}
	return out
}

// TwoSagaCommitCases lists, for two sagas of a and b steps with a+b <=
// maxN, every interleaving in which both agents commit: runs the halts
// latched at a sync are laid on (HaltCases). Run as they are they have no
// oracle; the invariants judge them.
func TwoSagaCommitCases(maxN int) []Case {
	var out []Case
	interleavings(maxN, func(a, b int, order uint32) {
		out = append(out, Case{Steps: a, Steps2: b, Sagas: 2, Order: order, End: Commit})
	})
	return out
}

// HaltCases lists the cases that latch a halt from inside a journal sync,
// laid on c, whose run without one made syncs journal syncs: the full
// halt at each sync k = 1..syncs, with the disk alive and with it dying
// there; and in two-saga cases without a scheduled zone halt, the zone's
// halt the same way.
func HaltCases(c Case, syncs int) []Case {
	zone := []string{""}
	if c.Sagas == 2 && c.Zone == 0 {
		zone = append(zone, haltedZone, rootZone)
	}
	var out []Case
	for k := 1; k <= syncs && k <= maxHaltSync; k++ {
		for _, z := range zone {
			for _, fail := range []bool{false, true} {
				hc := c
				hc.HaltSync, hc.HaltZone, hc.HaltFail = k, z, fail
				out = append(out, hc)
			}
		}
	}
	return out
}

// commitBoth reports whether c is a TwoSagaCommitCases run.
func (c Case) commitBoth() bool { return c.Sagas == 2 && c.Zone == 0 && c.Expire == 0 }
