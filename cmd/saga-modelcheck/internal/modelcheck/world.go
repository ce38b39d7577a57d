package modelcheck

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/recovery"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
	"github.com/saga-supervisor/saga-supervisor/wal/crashfs"
)

// The model's robot: four servos, each with a different safe policy, and a
// pulse output (a kick) that no compensation can undo.
var servoNames = []string{"base", "shoulder", "elbow", "gripper"}

const pulseName = "kick"

var (
	initial = map[string]float64{"base": 1, "shoulder": 2, "elbow": 3, "gripper": 4, pulseName: 0}
	safe    = map[string]actuators.SafePolicy{
		"base":     {Mode: actuators.SafeHold},
		"shoulder": {Mode: actuators.SafeValue, Value: 60},
		"elbow":    {Mode: actuators.SafeDetach},
		"gripper":  {Mode: actuators.SafeValue, Value: 70},
		pulseName:  {Mode: actuators.SafeHold},
	}
)

// The model's zones: the shoulder alone in "arm" (the zone cases halt
// it), the second saga's actuators in "wheels"; the base is in none.
var zones = map[string][]string{"arm": {"shoulder"}, "wheels": {"elbow", "gripper"}, "root": {"base"}}

const haltedZone = "arm"

// rootZone holds the base alone (safe policy hold): only the zone halts
// at a sync (Case.HaltZone) halt it.
const rootZone = "root"

func inHaltedZone(act string) bool { return act == "shoulder" }

// inZone reports whether act is in the zone named.
func inZone(zone, act string) bool {
	return (zone == haltedZone && act == "shoulder") || (zone == rootZone && act == "base")
}

// retries is the engine's compensation retry budget in the model.
const retries = 2

// refusedValue lies outside every actuator's limits: the refusal probe.
const refusedValue = 500

// planned is one step of the run as the harness plans it.
type planned struct {
	saga   int // 1 or 2
	n      int // the step's number within its saga (1-based)
	act    string
	target float64
	prior  float64
}

// plan lays out the run's steps in the order they are issued.
func (c Case) plan() []planned {
	var out []planned
	last := map[string]float64{}
	for k, v := range initial {
		last[k] = v
	}
	add := func(saga, n int, act string, target float64) {
		out = append(out, planned{saga: saga, n: n, act: act, target: target, prior: last[act]})
		last[act] = target
	}
	if c.Sagas != 2 {
		for i := 1; i <= c.Steps; i++ {
			act := servoNames[(i-1)%len(servoNames)]
			if i == c.Orphan {
				act = pulseName
			}
			add(1, i, act, float64(100+i))
		}
		return out
	}
	a, b := 0, 0
	for k := 0; k < c.Steps+c.Steps2; k++ {
		if c.Order&(1<<uint(k)) == 0 {
			a++
			add(1, a, servoNames[(a-1)%2], float64(100+a))
		} else {
			b++
			add(2, b, servoNames[2+(b-1)%2], float64(150+b))
		}
	}
	return out
}

type callKind uint8

const (
	forwardCall callKind = iota + 1
	compCall
	safeCall
	haltCall
)

func (k callKind) String() string {
	return [...]string{"?", "forward", "compensation", "safe", "detach"}[k]
}

// call is one driver call the engine made.
type call struct {
	proc  int // 0: the run; 1, 2: recoveries
	act   string
	value float64
	kind  callKind
	saga  int // the planned saga and step it belongs to (forward, compensation)
	step  int
	err   bool
}

func (c call) String() string {
	s := fmt.Sprintf("p%d %s %s→%g", c.proc, c.kind, c.act, c.value)
	if c.step > 0 {
		s += fmt.Sprintf(" (saga %d step %d)", c.saga, c.step)
	}
	if c.err {
		s += " ERR"
	}
	return s
}

// proc is one supervisor process: its file system and engine. The world
// outlives it.
type proc struct {
	id     int
	fs     *crashfs.FS
	engine atomic.Pointer[rollback.Engine]
	// haltedAtStart: the journal this process recovered had latched halt;
	// zoneHaltedAtStart, the zone's halt.
	haltedAtStart, zoneHaltedAtStart bool
	rootHaltedAtStart                bool
	// ckpt keeps the journal's checkpoints (manual: drive writes one
	// halfway through the run, Close another at the end).
	ckpt *recovery.Checkpointer
	// journal is the run's engine's journal (syncJournal); dead: the
	// disk died (HaltFail), every file-system call fails.
	journal *syncJournal
	dead    atomic.Bool
}

// errPowerOff is what a crashed process's drivers answer: they drive
// nothing, so the error says so.
var errPowerOff = fmt.Errorf("modelcheck: the computer is off: %w", actuators.ErrNotApplied)

// robot is the simulated world and the scripted physics of one case.
type robot struct {
	c     Case
	steps []planned
	world *sim.World
	devs  map[string]actuators.Driver

	mu        sync.Mutex
	cur       *proc
	expect    *planned // the forward step being issued
	calls     []call
	opsAtCall []int // for the run's driver calls: mutating file-system calls done before each
	violation []string
	// zoneLatched: the run has asked for the zone's halt and not reset it
	// (set before ZoneHalt is called, cleared once ZoneReset returned).
	zoneLatched bool
	// rootLatched: the run latched the root zone's halt at a sync.
	rootLatched bool
	// pending: a halt latched at a sync that waited for that sync's step,
	// perhaps still applying (see syncJournal.latch).
	pending chan struct{}
	// fired: a halt latched at a sync (Case.HaltSync) has been latched;
	// openAfterHalt: a saga was found open once it was applied.
	fired, openAfterHalt bool
	// onHalt: the reports the engine's halt goroutines delivered.
	onHalt []*rollback.Report
	// known: every saga id an agent was handed or a report named, in any
	// process; reported and commits: by saga id, the processes that
	// reported it unwound, and that acknowledged its commit.
	known    map[uint64]bool
	reported map[uint64][]string
	commits  map[uint64][]string
	// live: what the run's engine believed of each actuator when it
	// closed (halt-at-sync cases that closed with no saga open, the disk
	// alive), for the restart to compare its rebuild with.
	live map[string]float64
	// unjournaled: actuators a halt moved to their safe policy after the
	// disk died (HaltFail): no record of it could be made.
	unjournaled map[string]bool
}

// newRobot makes the robot of case c. With from, it starts as a copy of
// from's robot after its run: the same world positions, the same call log
// and violations so far (a recovery variant of a crash case).
func newRobot(c Case, from *robot) *robot {
	r := &robot{c: c, steps: c.plan(), world: sim.NewMemoryWorld(), devs: map[string]actuators.Driver{},
		known: map[uint64]bool{}, reported: map[uint64][]string{}, commits: map[uint64][]string{}, unjournaled: map[string]bool{}}
	pos := initial
	var snap map[string]sim.DeviceState
	if from != nil {
		snap = from.world.Snapshot()
		pos = map[string]float64{}
		for n, st := range snap {
			pos[n] = st.Commanded
		}
		from.mu.Lock()
		r.calls = slices.Clone(from.calls)
		r.violation = slices.Clone(from.violation)
		r.known = maps.Clone(from.known)
		r.reported = maps.Clone(from.reported)
		r.commits = maps.Clone(from.commits)
		r.unjournaled = maps.Clone(from.unjournaled)
		r.live = from.live
		from.mu.Unlock()
	}
	for _, n := range servoNames {
		s := r.world.Servo(n, pos[n], 0)
		if snap[n].Detached {
			s.Halt()
		}
		r.devs[n] = s
	}
	r.devs[pulseName] = r.world.Pulse(pulseName)
	return r
}

func (r *robot) violate(format string, args ...any) {
	r.mu.Lock()
	r.violation = append(r.violation, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// registry wires the robot to process p.
func (r *robot) registry(p *proc) *actuators.Registry {
	var list []*actuators.Actuator
	for _, n := range append(append([]string(nil), servoNames...), pulseName) {
		kind := actuators.Servo
		if n == pulseName {
			kind = actuators.Pulse
		}
		list = append(list, &actuators.Actuator{Name: n, Kind: kind, Limits: limits.Spec{Min: 0, Max: 200},
			Safe: safe[n], Initial: initial[n], Timeout: time.Second, Driver: &driver{r: r, p: p, name: n}})
	}
	reg, err := actuators.NewRegistry(list...)
	if err != nil {
		panic(err)
	}
	return reg
}

// driver is one actuator's driver as process p sees it: the scripted
// physics in front of a sim device, and the invariant checks that must hold
// at the moment of an effect.
type driver struct {
	r    *robot
	p    *proc
	name string
}

func (d *driver) classify(v float64) call {
	r := d.r
	c := call{proc: d.p.id, act: d.name, value: v}
	if e := r.expect; e != nil && e.act == d.name && e.target == v {
		r.expect = nil
		c.kind, c.saga, c.step = forwardCall, e.saga, e.n
		return c
	}
	if sp := safe[d.name]; sp.Mode == actuators.SafeValue && sp.Value == v {
		c.kind = safeCall
		return c
	}
	for _, st := range r.steps {
		if st.act == d.name && st.prior == v {
			c.kind, c.saga, c.step = compCall, st.saga, st.n
			return c
		}
	}
	return c
}

func (d *driver) Set(ctx context.Context, v float64) error {
	r := d.r
	if d.p.fs.AfterCrash() != nil {
		return errPowerOff
	}
	ops := d.p.fs.Ops()
	r.mu.Lock()
	c := d.classify(v)
	r.mu.Unlock()
	if c.kind == 0 {
		r.violate("%s: %s driven to %g, which no step, compensation or safe policy asked for", d.p.label(), d.name, v)
		return d.r.devs[d.name].Set(ctx, v)
	}
	if d.p.id == 0 && (c.kind == forwardCall || c.kind == compCall) {
		r.mu.Lock()
		pending := r.pending
		r.mu.Unlock()
		if pending != nil {
			<-pending // a halt still applying goes first (its moves are safe moves)
		}
	}
	if c.kind == compCall || (c.kind == forwardCall && (!r.c.FirstTouch || r.firstTouch(c))) {
		d.checkDurable(c)
	}
	if c.kind == forwardCall || c.kind == compCall {
		if d.halted() {
			r.violate("%s: %s after a halt", d.p.label(), c)
		}
		if inHaltedZone(d.name) && d.zoneHalted() {
			r.violate("%s: %s while its zone %s is halted", d.p.label(), c, haltedZone)
		}
		if inZone(rootZone, d.name) && d.rootHalted() {
			r.violate("%s: %s while its zone %s is halted", d.p.label(), c, rootZone)
		}
	}
	var err error
	switch {
	case c.kind == forwardCall && r.c.Sagas != 2 && c.step == r.c.Fault:
		switch r.c.Shape {
		case Failed:
			err = fmt.Errorf("scripted: the driver refused the command: %w", actuators.ErrNotApplied)
		case DoubtApplied:
			if err = r.devs[d.name].Set(ctx, v); err == nil {
				err = fmt.Errorf("scripted: no answer: %w", context.DeadlineExceeded)
			}
		case DoubtNotApplied:
			err = fmt.Errorf("scripted: %w", actuators.ErrLinkLost)
		}
	case c.kind == compCall && r.c.CompFail&(1<<uint(c.step-1)) != 0 && c.saga == 1:
		err = fmt.Errorf("scripted: the compensation was refused: %w", actuators.ErrNotApplied)
	default:
		err = r.devs[d.name].Set(ctx, v)
	}
	c.err = err != nil
	r.mu.Lock()
	if c.kind == safeCall && d.p.dead.Load() {
		r.unjournaled[d.name] = true
	}
	r.calls = append(r.calls, c)
	if d.p.id == 0 {
		r.opsAtCall = append(r.opsAtCall, ops)
	}
	r.mu.Unlock()
	return err
}

func (d *driver) Halt() error {
	if d.p.fs.AfterCrash() != nil {
		return errPowerOff
	}
	ops := d.p.fs.Ops()
	d.r.mu.Lock()
	if d.p.dead.Load() {
		d.r.unjournaled[d.name] = true
	}
	d.r.calls = append(d.r.calls, call{proc: d.p.id, act: d.name, kind: haltCall})
	if d.p.id == 0 {
		d.r.opsAtCall = append(d.r.opsAtCall, ops)
	}
	d.r.mu.Unlock()
	return d.r.devs[d.name].Halt()
}

// firstTouch reports whether a forward call is its saga's first step on
// its actuator: in first-touch durability only that INTENT must be durable
// before the effect (its prior is the saga's restore target).
func (r *robot) firstTouch(c call) bool {
	for _, st := range r.steps {
		if st.saga == c.saga && st.act == c.act {
			return st.n == c.step
		}
	}
	return false
}

// zoneHalted reports whether the zone was halted (and not reset) when the
// call was made: in the run, as the harness asked; in a recovery, as the
// journal it recovered said.
func (d *driver) zoneHalted() bool {
	if d.p.id == 0 {
		d.r.mu.Lock()
		defer d.r.mu.Unlock()
		return d.r.zoneLatched
	}
	return d.p.zoneHaltedAtStart
}

func (d *driver) rootHalted() bool {
	if d.p.id == 0 {
		d.r.mu.Lock()
		defer d.r.mu.Unlock()
		return d.r.rootLatched
	}
	return d.p.rootHaltedAtStart
}

func (d *driver) halted() bool {
	if e := d.p.engine.Load(); e != nil {
		h, _ := e.Halted()
		return h
	}
	return d.p.haltedAtStart
}

// checkDurable is the first invariant: the intent of an effect (INTENT for
// a step, COMP_INTENT for a compensation) is on durable storage before the
// effect starts. It reads what would survive a power cut right now.
func (d *driver) checkDurable(c call) {
	img := d.p.fs.Crash(crashfs.DropUnsynced())
	want := rollback.RecIntent
	if c.kind == compCall {
		want = rollback.RecCompIntent
	}
	found := false
	scanJournal(img, func(rec rollback.Record) {
		if rec.Type == want && rec.Actuator == c.act && rec.Target == c.value && int(rec.Step) == c.step {
			found = true
		}
	})
	if !found {
		d.r.violate("%s: %s started before its %s was durable", d.p.label(), c, want)
	}
}

func (p *proc) label() string {
	if p.id == 0 {
		return "run"
	}
	return fmt.Sprintf("recovery %d", p.id)
}

// scanJournal decodes every record of the journal on fs. Errors end the
// scan quietly: callers that care verify the journal separately.
func scanJournal(fs *crashfs.FS, fn func(rollback.Record)) {
	wal.Scan(journalDir, wal.Options{FS: fs}, 1, func(wr wal.Record) error {
		rec, err := rollback.DecodeRecord(wr.Type, wr.Payload)
		if err != nil {
			return err
		}
		fn(rec)
		return nil
	})
}

const journalDir = "/journal"
