package main

// prove breaks a user's sequence at every step in every failure shape, on a
// simulated copy of their robot, and checks that the world comes back to
// where the saga found it and that the engine's report says so truthfully.
//
// Each probe runs on a fresh simulated world (kept in memory, on a virtual
// clock) with the real engine and a real journal in its own directory. A
// crash is simulated in-process: at the effect, the supervisor "process" is
// severed — from that instant nothing it writes reaches the journal and
// nothing it drives reaches the world, as after a SIGKILL — and a second
// process takes over the same journal through package recovery.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim"
	"github.com/saga-supervisor/saga-supervisor/recovery"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

const (
	// proveDefaultInterval is the virtual time between two steps when the
	// scenario gives none: what the slew limits (max_rate) measure against.
	proveDefaultInterval = time.Second
	// proveMaxInterval bounds a scenario's interval.
	proveMaxInterval = time.Hour
	// proveSettle is how far the virtual clock moves before the world is
	// compared, so that every simulated servo has finished its move.
	proveSettle = 24 * time.Hour
	// proveCallBound bounds every driver call that is not hung on purpose.
	// A simulated device answers at once; the bound is wall time and generous
	// so that a loaded machine (the race detector, a build running) never
	// turns a healthy step into an in-doubt one and a probe into noise.
	proveCallBound = 10 * time.Second
	// proveSegmentSize keeps each probe's journal small: a probe writes a
	// few dozen records, and a new journal writes its first segment in full.
	proveSegmentSize = 64 << 10
	// proveWorkers probes run at once. Each has its own world, clock and
	// journal; most of a probe's time is spent waiting for fsync, so a few
	// overlap well even on one core.
	proveWorkers = 4
)

// Verdicts of a probe.
const (
	verdictClean     = "CLEAN"
	verdictDirty     = "DIRTY"
	verdictDisagrees = "ENGINE DISAGREES"
)

// ---------------------------------------------------------------------------
// The scenario file.

// scenario is a user's sequence: the steps of one saga, on a config.
type scenario struct {
	File       string        // the path as given
	Config     string        // the config path as written ("" = the embedded default)
	ConfigLine int           // where config: is written
	Interval   time.Duration // virtual time between steps
	Steps      []scenarioStep
}

// scenarioStep is one command of the saga.
type scenarioStep struct {
	Actuator string  `json:"actuator"`
	Value    float64 `json:"value"`
	Line     int     `json:"line"`
}

// scenarioYAML is the document as decoded (strictly: KnownFields).
type scenarioYAML struct {
	Config   locatedString `yaml:"config"`
	Interval yamlDuration  `yaml:"interval"`
	Steps    []stepYAML    `yaml:"steps"`
}

// locatedString is a string scalar that remembers its line.
type locatedString struct {
	Value string
	Line  int
}

func (s *locatedString) UnmarshalYAML(n *yaml.Node) error {
	s.Line = n.Line
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		return yamlTypeError(n.Line, "config: want a file path")
	}
	s.Value = n.Value
	return nil
}

// yamlDuration is a Go duration written as a string, e.g. 500ms.
type yamlDuration struct {
	D    time.Duration
	Line int
}

func (d *yamlDuration) UnmarshalYAML(n *yaml.Node) error {
	d.Line = n.Line
	if n.Kind != yaml.ScalarNode {
		return yamlTypeError(n.Line, "interval: want a duration such as 500ms or 2s")
	}
	v, err := time.ParseDuration(n.Value)
	switch {
	case err != nil:
		return yamlTypeError(n.Line, "interval: want a duration such as 500ms or 2s, not %q", n.Value)
	case v <= 0 || v > proveMaxInterval:
		return yamlTypeError(n.Line, "interval: %s is outside (0, %s]", v, proveMaxInterval)
	}
	d.D = v
	return nil
}

// stepYAML is one step as written: {actuator: NAME, value: V}. It is
// decoded by hand so that each problem names its own line.
type stepYAML struct {
	actuator    string
	value       float64
	hasActuator bool
	hasValue    bool
	line        int
}

func (s *stepYAML) UnmarshalYAML(n *yaml.Node) error {
	s.line = n.Line
	if n.Kind != yaml.MappingNode {
		return yamlTypeError(n.Line, "a step is a mapping {actuator: NAME, value: V}")
	}
	var problems []string
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if seen[k.Value] {
			problems = append(problems, fmt.Sprintf("line %d: key %q written twice", k.Line, k.Value))
			continue
		}
		seen[k.Value] = true
		switch k.Value {
		case "actuator":
			if v.Kind != yaml.ScalarNode || v.Tag != "!!str" || v.Value == "" {
				problems = append(problems, fmt.Sprintf("line %d: actuator: want an actuator name", v.Line))
				continue
			}
			s.actuator, s.hasActuator = v.Value, true
		case "value":
			if v.Kind != yaml.ScalarNode || (v.Tag != "!!int" && v.Tag != "!!float") {
				problems = append(problems, fmt.Sprintf("line %d: value: want a number, not %q", v.Line, v.Value))
				continue
			}
			if err := v.Decode(&s.value); err != nil {
				problems = append(problems, fmt.Sprintf("line %d: value: %q is not a number", v.Line, v.Value))
				continue
			}
			s.hasValue = true
		default:
			problems = append(problems, fmt.Sprintf("line %d: unknown key %q in a step (known keys: actuator, value)", k.Line, k.Value))
		}
	}
	if !s.hasActuator && !seen["actuator"] {
		problems = append(problems, fmt.Sprintf("line %d: step without actuator", n.Line))
	}
	if !s.hasValue && !seen["value"] {
		problems = append(problems, fmt.Sprintf("line %d: step without value", n.Line))
	}
	if len(problems) > 0 {
		return &yaml.TypeError{Errors: problems}
	}
	return nil
}

func yamlTypeError(line int, format string, args ...any) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %s", line, fmt.Sprintf(format, args...))}}
}

var (
	yamlLineRE      = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)
	yamlUnknownRE   = regexp.MustCompile(`field (\S+) not found in type main\.scenarioYAML`)
	yamlGoTypeNames = strings.NewReplacer("main.scenarioYAML", "a scenario (config, interval, steps)",
		"[]main.stepYAML", "a list of steps", "main.stepYAML", "a step")
)

// scenarioErrors turns the YAML library's errors into file:line: message
// lines, with Go type names replaced by what the user wrote.
func scenarioErrors(name string, err error) error {
	var msgs []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	} else {
		msgs = []string{err.Error()}
	}
	var errs []error
	for _, m := range msgs {
		m = yamlUnknownRE.ReplaceAllString(m, `unknown key "$1" (known keys: config, interval, steps)`)
		m = yamlGoTypeNames.Replace(m)
		if sub := yamlLineRE.FindStringSubmatch(m); sub != nil {
			errs = append(errs, fmt.Errorf("%s:%s: %s", name, sub[1], sub[2]))
		} else {
			errs = append(errs, fmt.Errorf("%s: %s", name, strings.TrimPrefix(m, "yaml: ")))
		}
	}
	return errors.Join(errs...)
}

// parseScenario reads a scenario strictly: an unknown key, a key written
// twice, a value of the wrong type, a missing field or a second document is
// an error naming its line. It does not check the steps against a config.
func parseScenario(data []byte, name string) (*scenario, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var y scenarioYAML
	if err := dec.Decode(&y); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty scenario: want steps: [{actuator: NAME, value: V}, ...]", name)
		}
		return nil, scenarioErrors(name, err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, scenarioErrors(name, err)
		}
		return nil, fmt.Errorf("%s:%d: a second YAML document: a scenario is one document", name, next.Line)
	}
	if len(y.Steps) == 0 {
		return nil, fmt.Errorf("%s: no steps: want steps: [{actuator: NAME, value: V}, ...]", name)
	}
	sc := &scenario{File: name, Config: y.Config.Value, ConfigLine: y.Config.Line, Interval: proveDefaultInterval}
	if y.Interval.D > 0 {
		sc.Interval = y.Interval.D
	}
	for _, s := range y.Steps {
		sc.Steps = append(sc.Steps, scenarioStep{Actuator: s.actuator, Value: s.value, Line: s.line})
	}
	return sc, nil
}

// loadScenario reads the scenario file and its config (relative to the
// scenario's directory; the embedded default when none is named).
func loadScenario(path string) (*scenario, *config.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	sc, err := parseScenario(data, path)
	if err != nil {
		return nil, nil, err
	}
	if sc.Config == "" {
		return sc, config.Default(), nil
	}
	cpath := sc.Config
	if !filepath.IsAbs(cpath) {
		cpath = filepath.Join(filepath.Dir(path), cpath)
	}
	cfg, err := config.Load(cpath)
	var pe *fs.PathError
	switch {
	case errors.As(err, &pe):
		return nil, nil, fmt.Errorf("%s:%d: config: %w", path, sc.ConfigLine, err)
	case err != nil:
		// The config's own errors name their file:line:col, one a line.
		return nil, nil, fmt.Errorf("%s:%d: config %s is not valid:\n%w", path, sc.ConfigLine, cpath, err)
	}
	return sc, cfg, nil
}

// ---------------------------------------------------------------------------
// Failure shapes.

// shape is one way a step can break. arm is called just before the step
// is sent; it injects the fault on the step's device (drivers/sim Faults)
// and, through the process, what happens at and after the effect.
type shape struct {
	Name  string `json:"name"`
	About string `json:"about"`
	arm   func(pr *prober, p *process, k int)
}

// proveShapes are the shapes every step is broken in.
var proveShapes = []shape{
	{Name: "driver-refuses", About: "the driver refuses the step: an error that promises the output unchanged (actuators.ErrNotApplied)",
		arm: func(pr *prober, p *process, k int) { p.rig.deviceOf(pr, k).faults.FailOnNth(1) }},
	{Name: "timeout-applied", About: "the driver times out after the effect happened (in doubt)",
		arm: func(pr *prober, p *process, k int) {
			p.rig.deviceOf(pr, k).faults.HangNext(true)
			p.arm(effectHook{hang: true})
		}},
	{Name: "timeout-lost", About: "the driver times out and the effect never happened (in doubt)",
		arm: func(pr *prober, p *process, k int) {
			p.rig.deviceOf(pr, k).faults.HangNext(false)
			p.arm(effectHook{hang: true})
		}},
	{Name: "link-lost", About: "the link drops during the step (the command got through) and is back for the unwind",
		arm: func(pr *prober, p *process, k int) {
			f := p.rig.deviceOf(pr, k).faults
			f.LoseLink(true)
			p.arm(effectHook{after: f.RestoreLink})
		}},
	{Name: "crash-before-effect", About: "the supervisor dies after the intent is journaled, before the effect; a new process recovers",
		arm: func(pr *prober, p *process, k int) { p.arm(effectHook{crash: true}) }},
	{Name: "crash-after-effect", About: "the supervisor dies after the effect, before its outcome is journaled; a new process recovers",
		arm: func(pr *prober, p *process, k int) { p.arm(effectHook{crash: true, applied: true}) }},
	{Name: "compensation-retried", About: "the step times out (applied); every compensation fails once, then succeeds on retry",
		arm: func(pr *prober, p *process, k int) {
			p.rig.deviceOf(pr, k).faults.HangNext(true)
			p.arm(effectHook{hang: true, after: func() {
				for _, d := range p.rig.devices {
					d.faults.FailOnNth(1)
				}
			}})
		}},
}

// permanentShape is added by --permanent-compensation-failures. It is
// expected DIRTY: it checks that the engine admits what it could not undo.
var permanentShape = shape{Name: "compensation-fails", About: "the step times out (applied); every compensation back to a prior fails, always (expected DIRTY)",
	arm: func(pr *prober, p *process, k int) {
		p.rig.deviceOf(pr, k).faults.HangNext(true)
		// The priors come from the dry run: the values the unwind drives
		// each actuator back to. Failing exactly those lets a safe value
		// that differs from them still be reached, as with a joint jammed
		// on its way back.
		priors := map[string][]float64{}
		for j := 0; j < k; j++ {
			a := pr.sc.Steps[j].Actuator
			priors[a] = append(priors[a], pr.dry[j].Prior)
		}
		p.arm(effectHook{hang: true, after: func() {
			for name, ps := range priors {
				p.rig.devices[name].faults.FailWhen(func(v float64) bool { return slices.Contains(ps, v) })
			}
		}})
	}}

// ---------------------------------------------------------------------------
// The simulated robot of one probe, and the supervisor processes on it.

// virtualClock is the time of one probe: it moves only when told, so limits
// measured over time (slew) and servo motion are the same on every run.
type virtualClock struct {
	base time.Time
	off  atomic.Int64
}

func (c *virtualClock) Now() time.Time          { return c.base.Add(time.Duration(c.off.Load())) }
func (c *virtualClock) Advance(d time.Duration) { c.off.Add(int64(d)) }

// simDevice is one actuator's simulated device.
type simDevice struct {
	kind   actuators.Kind
	driver actuators.Driver
	faults *sim.Faults
	reader actuators.ReadBacker // nil for a pulse
	pulse  *sim.Pulse           // set for a pulse
}

// rig is the simulated robot one probe runs on: a world in memory on a
// virtual clock, with a device for every actuator and supply of the config.
// The world outlives the supervisor processes that drive it, as a robot
// outlives a crashed daemon.
type rig struct {
	cfg      *config.Config
	clock    *virtualClock
	world    *sim.World
	devices  map[string]*simDevice
	supplies map[string]*sim.Supply
}

func newRig(cfg *config.Config) (*rig, error) {
	clk := &virtualClock{base: time.Now()}
	r := &rig{cfg: cfg, clock: clk, world: sim.NewMemoryWorld(sim.WithClock(clk.Now)),
		devices: map[string]*simDevice{}, supplies: map[string]*sim.Supply{}}
	for _, name := range cfg.ActuatorNames() {
		a := cfg.Actuators[name]
		var d *simDevice
		var err error
		switch a.Kind {
		case actuators.Servo:
			slew := 0.0 // a substituted servo: the sim section is for sim drivers only
			if sa, ok := a.Section.(*config.SimActuator); ok {
				slew = sa.Slew
			}
			s := r.world.Servo(name, a.Initial, slew)
			d, err = &simDevice{driver: s, faults: &s.Faults, reader: s}, s.Err()
		case actuators.Digital:
			s := r.world.Digital(name, a.Initial)
			d, err = &simDevice{driver: s, faults: &s.Faults, reader: s}, s.Err()
		case actuators.PWM, actuators.Setpoint:
			s := r.world.Setpoint(name, a.Initial)
			d, err = &simDevice{driver: s, faults: &s.Faults, reader: s}, s.Err()
		case actuators.Pulse:
			s := r.world.Pulse(name)
			d, err = &simDevice{driver: s, faults: &s.Faults, pulse: s}, s.Err()
		default:
			err = fmt.Errorf("no simulated device for kind %q", a.Kind)
		}
		if err != nil {
			r.world.Close()
			return nil, fmt.Errorf("%s: actuators.%s: %w", cfg.Where("actuators."+name), name, err)
		}
		d.kind = a.Kind
		r.devices[name] = d
	}
	for _, name := range cfg.SupplyNames() {
		s := r.world.Supply(name, supplyVolts(cfg.Supplies[name]))
		if err := s.Err(); err != nil {
			r.world.Close()
			return nil, fmt.Errorf("%s: supplies.%s: %w", cfg.Where("supplies."+name), name, err)
		}
		r.supplies[name] = s
	}
	return r, nil
}

func (r *rig) Close() error { return r.world.Close() }

// supplyVolts is where a supply's simulated device holds: its sim voltage,
// or for a substituted hardware monitor (whose sim section is unused) the
// middle of its band, so that it permits motion as a healthy rail would.
func supplyVolts(s config.Supply) float64 {
	if ss, ok := s.Section.(*config.SimSupply); ok {
		return ss.Volts
	}
	return (s.MinVolts + s.MaxVolts) / 2
}

// deviceOf returns the device of step k (1-based).
func (r *rig) deviceOf(pr *prober, k int) *simDevice { return r.devices[pr.sc.Steps[k-1].Actuator] }

// clearFaults leaves every device healthy, as a restarted process finds
// them after reconnecting.
func (r *rig) clearFaults() {
	for _, d := range r.devices {
		d.faults.Clear()
	}
}

// errProcessDead is what a crashed process's connections answer.
var errProcessDead = errors.New("prove: this supervisor process has crashed")

// effectHook is what happens at the next effect of a process.
type effectHook struct {
	hang    bool   // the device hangs: cut the wait at the driver timeout
	crash   bool   // the process dies at this effect ...
	applied bool   // ... after the effect happened (crash only)
	after   func() // runs when the effect returns, before the engine sees it
}

// process is one supervisor process on a rig: the real engine on a real
// journal, taken over through recovery, driving the rig's devices through
// connections of its own. When it crashes, its connections and its journal
// files are severed at that instant.
type process struct {
	rig     *rig
	res     *recovery.Result
	fs      *severableFS
	timeout time.Duration // of a hung driver call

	mu      sync.Mutex
	dead    bool
	hook    *effectHook
	crashed chan struct{} // closed at the crash
	release chan struct{} // closed to let the crashed process's effect return
}

// start takes over the journal in dir with a new process.
func (r *rig) start(dir string, pr *prober) (*process, error) {
	p := &process{rig: r, fs: &severableFS{}, timeout: pr.timeout, crashed: make(chan struct{}), release: make(chan struct{})}
	var list []*actuators.Actuator
	for _, name := range r.cfg.ActuatorNames() {
		a := r.cfg.Actuators[name].Actuator(name, &processDriver{p: p, dev: r.devices[name].driver})
		a.Timeout = proveCallBound
		list = append(list, a)
	}
	reg, err := actuators.NewRegistry(list...)
	if err != nil {
		return nil, err
	}
	sup := supervisor.NewSupplies()
	for _, name := range r.cfg.SupplyNames() {
		if err := sup.Add(r.cfg.Supplies[name].Spec(name), r.supplies[name]); err != nil {
			return nil, err
		}
	}
	ecfg := r.cfg.RollbackConfig()
	ecfg.Actuators, ecfg.Supplies, ecfg.Now = reg, sup, r.clock.Now
	wo := r.cfg.Journal.WALOptions()
	wo.SegmentSize = min(wo.SegmentSize, proveSegmentSize)
	wo.FS = p.fs
	p.res, err = recovery.Open(recovery.Options{Dir: dir, WAL: wo, Engine: ecfg})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// arm sets what happens at the process's next effect.
func (p *process) arm(h effectHook) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hook = &h
}

// takeHook returns the hook for an effect starting now, or an error if the
// process is dead.
func (p *process) takeHook() (effectHook, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return effectHook{}, errProcessDead
	}
	var h effectHook
	if p.hook != nil {
		h, p.hook = *p.hook, nil
	}
	return h, nil
}

// die is the crash: from now on nothing the process does reaches the
// journal or the world. What it had written stays (the page cache survives
// a killed process); what it had only enqueued is lost.
func (p *process) die() {
	p.mu.Lock()
	p.dead = true
	p.mu.Unlock()
	p.fs.cut.Store(true)
	close(p.crashed)
}

func (p *process) isDead() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dead
}

// processDriver is a process's connection to one device.
type processDriver struct {
	p   *process
	dev actuators.Driver
}

func (d *processDriver) Set(ctx context.Context, v float64) error {
	h, err := d.p.takeHook()
	if err != nil {
		// A dead process's connection sends nothing.
		return fmt.Errorf("%w: %w", err, actuators.ErrNotApplied)
	}
	if h.crash {
		if h.applied {
			d.dev.Set(ctx, v)
		}
		d.p.die()
		<-d.p.release
		return errProcessDead
	}
	if h.hang {
		// The device never answers; the call times out at the probe's
		// driver timeout rather than after the generous bound every other
		// call has.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.p.timeout)
		defer cancel()
	}
	err = d.dev.Set(ctx, v)
	if h.after != nil {
		h.after()
	}
	return err
}

func (d *processDriver) Halt() error {
	if d.p.isDead() {
		return errProcessDead
	}
	return d.dev.Halt()
}

// severableFS is the operating system's file system until the process using
// it crashes; from then on every write, sync and directory change fails.
type severableFS struct {
	wal.OSFS
	cut atomic.Bool
}

var errSevered = errors.New("prove: the process crashed; nothing more reaches the disk")

func (f *severableFS) check() error {
	if f.cut.Load() {
		return errSevered
	}
	return nil
}

func (f *severableFS) OpenFile(name string, flag int, perm fs.FileMode) (wal.File, error) {
	if flag&(os.O_RDWR|os.O_WRONLY|os.O_CREATE|os.O_TRUNC) != 0 {
		if err := f.check(); err != nil {
			return nil, err
		}
	}
	file, err := f.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &severableFile{File: file, fs: f}, nil
}

func (f *severableFS) Rename(o, n string) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.OSFS.Rename(o, n)
}

func (f *severableFS) Remove(name string) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.OSFS.Remove(name)
}

func (f *severableFS) MkdirAll(dir string, perm fs.FileMode) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.OSFS.MkdirAll(dir, perm)
}

func (f *severableFS) SyncDir(dir string) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.OSFS.SyncDir(dir)
}

type severableFile struct {
	wal.File
	fs *severableFS
}

func (s *severableFile) WriteAt(p []byte, off int64) (int, error) {
	if err := s.fs.check(); err != nil {
		return 0, err
	}
	return s.File.WriteAt(p, off)
}

func (s *severableFile) Sync() error {
	if err := s.fs.check(); err != nil {
		return err
	}
	return s.File.Sync()
}

func (s *severableFile) Truncate(size int64) error {
	if err := s.fs.check(); err != nil {
		return err
	}
	return s.File.Truncate(size)
}

func (s *severableFile) Allocate(size int64) error {
	if err := s.fs.check(); err != nil {
		return err
	}
	return s.File.Allocate(size)
}

// ---------------------------------------------------------------------------
// Probing.

// worldView is one actuator's state at the start and at the end of a probe:
// a position (read back) or, for a pulse, its kick count.
type worldView struct {
	Actuator string  `json:"actuator"`
	Kind     string  `json:"kind"`
	Measure  string  `json:"measure"` // "position" or "kicks"
	Start    float64 `json:"start"`
	End      float64 `json:"end"`
	Error    string  `json:"error,omitempty"` // a read-back that failed: counted as moved
}

// Moved reports whether the actuator is not where it started.
func (v worldView) Moved() bool {
	return v.Error != "" || math.Abs(v.End-v.Start) > 1e-9
}

// String says where the actuator went, e.g. "elbow 20→45" or "kicker
// 0→1 kicks".
func (v worldView) String() string {
	s := fmt.Sprintf("%s %g→%g", v.Actuator, v.Start, v.End)
	if v.Measure == "kicks" {
		s += " kicks"
	}
	if v.Error != "" {
		s += " (" + v.Error + ")"
	}
	return s
}

// engineView is what the engine reported for a probe.
type engineView struct {
	Clean     bool         `json:"clean"`
	Verdict   string       `json:"verdict"` // "clean" or "partial"
	Halted    bool         `json:"halted"`
	Recovered bool         `json:"recovered"` // finished by a new process's recovery
	Steps     []engineStep `json:"steps"`
}

type engineStep struct {
	Step     uint32           `json:"step"`
	Actuator string           `json:"actuator"`
	Outcome  rollback.Outcome `json:"outcome"`
	Bucket   rollback.Bucket  `json:"bucket"`
	Attempts uint32           `json:"attempts"`
	Error    string           `json:"error,omitempty"`
}

func newEngineView(reports []*rollback.Report, halted bool) engineView {
	v := engineView{Clean: true, Halted: halted}
	for _, r := range reports {
		v.Clean = v.Clean && r.Clean()
		v.Recovered = v.Recovered || r.Recovered
		for _, s := range r.Steps {
			v.Steps = append(v.Steps, engineStep{Step: s.Step, Actuator: s.Actuator, Outcome: s.Outcome, Bucket: s.Bucket, Attempts: s.Attempts, Error: s.Error})
		}
	}
	v.Verdict = "clean"
	if !v.Clean {
		v.Verdict = "partial"
	}
	return v
}

// probeResult is one probe: step k broken in one shape.
type probeResult struct {
	Step     int         `json:"step"`
	Actuator string      `json:"actuator"`
	Value    float64     `json:"value"`
	Shape    string      `json:"shape"`
	Verdict  string      `json:"verdict"`
	Why      string      `json:"why"`
	Engine   engineView  `json:"engine"`
	World    []worldView `json:"world"`
	Journal  string      `json:"journal,omitempty"` // kept with --wal-dir
}

// classify compares the engine's word with the world. CLEAN: the engine
// says clean and the world is back at its start. DIRTY: the engine says
// partial and the world is not back — or is, but only because a step the
// engine could not undo (orphaned: a pulse) turned out not to have happened;
// the engine cannot know that, so saying partial is honest. ENGINE DISAGREES:
// anything else, and above all a clean report over a world that moved.
func classify(eng engineView, world []worldView) (verdict, why string) {
	var moved []string
	for _, w := range world {
		if w.Moved() {
			moved = append(moved, w.String())
		}
	}
	var notCompensated, notOrphaned []string
	for _, s := range eng.Steps {
		if s.Bucket != rollback.Compensated {
			notCompensated = append(notCompensated, fmt.Sprintf("step %d %s %s", s.Step, s.Actuator, s.Bucket))
			if s.Bucket != rollback.Orphaned {
				notOrphaned = append(notOrphaned, s.Actuator)
			}
		}
	}
	switch {
	case eng.Clean && len(moved) == 0:
		return verdictClean, "the engine says clean and the world is back at its start"
	case eng.Clean:
		return verdictDisagrees, fmt.Sprintf("the engine says clean but the world did not come back (%s)", strings.Join(moved, ", "))
	case len(moved) > 0:
		return verdictDirty, fmt.Sprintf("the engine says partial (%s) and the world did not come back (%s)", strings.Join(notCompensated, "; "), strings.Join(moved, ", "))
	case len(notOrphaned) == 0:
		return verdictDirty, fmt.Sprintf("the engine says partial (%s): no undo exists, so it cannot know the step had no effect", strings.Join(notCompensated, "; "))
	default:
		return verdictDisagrees, fmt.Sprintf("the engine says partial (%s) but the world is back at its start", strings.Join(notCompensated, "; "))
	}
}

// prober runs the probes of one scenario.
type prober struct {
	sc      *scenario
	cfg     *config.Config
	timeout time.Duration // of a hung driver call
	root    string        // journals: one directory per probe
	dry     []rollback.StepResult
}

var proveOwner = rollback.Owner{Agent: "prove", Lease: "prove", Epoch: 1}

// runOutcome is how a run of the steps ended.
type runOutcome struct {
	failedAt  int              // 1-based step that ended the run; 0 when it committed
	report    *rollback.Report // the unwind, when a step failed
	err       error            // a refusal or another error
	results   []rollback.StepResult
	committed bool
}

// runSteps runs the scenario as one saga, arming shape sh just before
// step k (k = 0: no fault), and commits if no step fails.
func (pr *prober) runSteps(p *process, k int, sh *shape) runOutcome {
	e := p.res.Engine
	saga, err := e.Begin(proveOwner)
	if err != nil {
		return runOutcome{err: err}
	}
	var out runOutcome
	for i, st := range pr.sc.Steps {
		p.rig.clock.Advance(pr.sc.Interval)
		if i+1 == k {
			sh.arm(pr, p, k)
		}
		res, err := e.Step(saga, proveOwner, rollback.Command{ID: fmt.Sprintf("step-%d", i+1), Actuator: st.Actuator, Value: st.Value})
		if err != nil {
			out.failedAt, out.err = i+1, err
			var ee *rollback.Error
			if errors.As(err, &ee) && ee.Report != nil {
				out.report = ee.Report
			}
			return out
		}
		out.results = append(out.results, res)
	}
	if err := e.Commit(saga, proveOwner); err != nil {
		out.err = err
		return out
	}
	out.committed = true
	return out
}

// badScenario is a scenario the supervisor would refuse or could not run.
type badScenario struct{ err error }

func (b *badScenario) Error() string { return b.err.Error() }
func (b *badScenario) Unwrap() error { return b.err }

// dryRun runs the scenario once without faults. A step the gate refuses
// (limits, supply, unknown actuator), or one that fails with nothing
// injected, makes the scenario bad: probing it would prove nothing.
func (pr *prober) dryRun() error {
	r, err := newRig(pr.cfg)
	if err != nil {
		return err
	}
	defer r.Close()
	p, err := r.start(filepath.Join(pr.root, "dry-run"), pr)
	if err != nil {
		return err
	}
	defer p.res.Close()
	out := pr.runSteps(p, 0, nil)
	if out.failedAt > 0 {
		st := pr.sc.Steps[out.failedAt-1]
		where := fmt.Sprintf("%s:%d: step %d (%s → %g)", pr.sc.File, st.Line, out.failedAt, st.Actuator, st.Value)
		if code := rollback.CodeOf(out.err); out.report == nil && code != "" {
			return &badScenario{fmt.Errorf("%s: refused %s: %s", where, code, refusalMessage(out.err))}
		}
		return &badScenario{fmt.Errorf("%s: fails with no fault injected: %w", where, out.err)}
	}
	if out.err != nil {
		return fmt.Errorf("dry run: %w", out.err)
	}
	pr.dry = out.results
	return nil
}

func refusalMessage(err error) string {
	var ee *rollback.Error
	if errors.As(err, &ee) {
		return ee.Message
	}
	return err.Error()
}

// readWorld reads every actuator: its position, or a pulse's kick count.
func (r *rig) readWorld() map[string]worldView {
	out := map[string]worldView{}
	for name, d := range r.devices {
		v := worldView{Actuator: name, Kind: string(d.kind), Measure: "position"}
		if d.pulse != nil {
			v.Measure, v.End = "kicks", float64(d.pulse.Kicks())
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), proveCallBound)
			pos, err := d.reader.ReadBack(ctx)
			cancel()
			v.End = pos
			if err != nil {
				v.Error = err.Error()
			}
		}
		out[name] = v
	}
	return out
}

// compareWorld lets every servo finish its move and reads the world
// against the start, in actuator name order.
func (r *rig) compareWorld(start map[string]worldView) []worldView {
	r.clock.Advance(proveSettle)
	end := r.readWorld()
	var out []worldView
	for _, name := range r.cfg.ActuatorNames() {
		v := end[name]
		v.Start = start[name].End
		if start[name].Error != "" {
			v.Error = "at start: " + start[name].Error
		}
		out = append(out, v)
	}
	return out
}

// probe breaks step k in shape sh and reports what the engine and the
// world say afterwards.
func (pr *prober) probe(k int, sh *shape) (*probeResult, error) {
	st := pr.sc.Steps[k-1]
	res := &probeResult{Step: k, Actuator: st.Actuator, Value: st.Value, Shape: sh.Name,
		Journal: filepath.Join(pr.root, fmt.Sprintf("step%02d-%s", k, sh.Name))}
	r, err := newRig(pr.cfg)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	start := r.readWorld()

	p, err := r.start(res.Journal, pr)
	if err != nil {
		return nil, err
	}
	done := make(chan runOutcome, 1)
	go func() { done <- pr.runSteps(p, k, sh) }()

	var reports []*rollback.Report
	var halted bool
	select {
	case out := <-done:
		p.res.Close()
		if out.report == nil {
			return nil, fmt.Errorf("probe step %d %s: the fault did not end the saga (committed %v, error %v)", k, sh.Name, out.committed, out.err)
		}
		if out.failedAt != k {
			return nil, fmt.Errorf("probe step %d %s: step %d failed instead: %v", k, sh.Name, out.failedAt, out.err)
		}
		reports = []*rollback.Report{out.report}
		halted, _ = p.res.Engine.Halted()
	case <-p.crashed:
		// The process is dead: close what the kernel would close for it
		// (its files; the lock goes with them), then a new process takes
		// over the journal and finishes what the dead one left open.
		p.res.Close()
		r.clearFaults()
		p2, err := r.start(res.Journal, pr)
		if err != nil {
			close(p.release)
			<-done
			return nil, fmt.Errorf("probe step %d %s: recovery: %w", k, sh.Name, err)
		}
		reports = p2.res.Reports
		halted, _ = p2.res.Engine.Halted()
		p2.res.Close()
		// Let the dead process's effect return: everything it does from
		// here fails against its severed journal and connections.
		close(p.release)
		<-done
		if len(reports) == 0 {
			return nil, fmt.Errorf("probe step %d %s: recovery found no open saga", k, sh.Name)
		}
	}
	res.Engine = newEngineView(reports, halted)
	res.World = r.compareWorld(start)
	res.Verdict, res.Why = classify(res.Engine, res.World)
	return res, nil
}

// probeAll breaks every step in every shape, a few probes at a time, and
// returns the results step by step, shape by shape.
func (pr *prober) probeAll(shapes []shape) ([]*probeResult, error) {
	type job struct{ i, k, s int }
	n := len(pr.sc.Steps) * len(shapes)
	results := make([]*probeResult, n)
	errs := make([]error, n)
	jobs := make(chan job)
	var wg sync.WaitGroup
	for range min(proveWorkers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				results[j.i], errs[j.i] = pr.probe(j.k, &shapes[j.s])
			}
		}()
	}
	for i := range n {
		jobs <- job{i: i, k: i/len(shapes) + 1, s: i % len(shapes)}
	}
	close(jobs)
	wg.Wait()
	return results, errors.Join(errs...)
}

// ---------------------------------------------------------------------------
// The command.

// proveReport is the whole run, as printed with --json.
type proveReport struct {
	Scenario     string         `json:"scenario"`
	Config       string         `json:"config"`
	Substituted  []string       `json:"substituted,omitempty"` // non-sim drivers simulated
	Irreversible []string       `json:"irreversible,omitempty"`
	Steps        []scenarioStep `json:"steps"`
	Shapes       []shape        `json:"shapes"`
	Probes       []*probeResult `json:"probes"`
	Summary      proveSummary   `json:"summary"`
}

type proveSummary struct {
	Probes          int `json:"probes"`
	Clean           int `json:"clean"`
	Dirty           int `json:"dirty"`
	EngineDisagrees int `json:"engine_disagrees"`
}

func runProve(args []string, w io.Writer) error {
	fs := newFlags("prove")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	walDir := fs.String("wal-dir", "", "keep each probe's journal under this directory (new or empty), for verify, graph and certify")
	permanent := fs.Bool("permanent-compensation-failures", false, "also probe compensations that never succeed (expected DIRTY)")
	timeout := fs.Duration("driver-timeout", 20*time.Millisecond, "how long a hung driver call waits before it times out")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: saga-supervisor prove [flags] SCENARIO.yaml")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return exitWith(2, "%v", err)
	}
	if fs.NArg() == 0 {
		return exitWith(2, "usage: saga-supervisor prove [flags] SCENARIO.yaml")
	}
	file := fs.Arg(0)
	if err := fs.Parse(fs.Args()[1:]); err != nil { // flags may follow the file
		return exitWith(2, "%v", err)
	}
	if fs.NArg() > 0 {
		return exitWith(2, "one scenario at a time (extra arguments: %v)", fs.Args())
	}
	if *timeout <= 0 || *timeout > proveCallBound {
		return exitWith(2, "--driver-timeout must be in (0, %s]", proveCallBound)
	}
	sc, cfg, err := loadScenario(file)
	if err != nil {
		return exitWith(2, "%v", err)
	}
	root, cleanup, err := proveDir(*walDir)
	if err != nil {
		return exitWith(2, "%v", err)
	}
	defer cleanup()

	pr := &prober{sc: sc, cfg: cfg, timeout: *timeout, root: root}
	if err := pr.dryRun(); err != nil {
		var bad *badScenario
		if errors.As(err, &bad) {
			return exitWith(2, "%v", err)
		}
		return err
	}
	shapes := slices.Clone(proveShapes)
	if *permanent {
		shapes = append(shapes, permanentShape)
	}
	rep := &proveReport{Scenario: file, Config: cfg.File(), Steps: sc.Steps, Shapes: shapes}
	if sc.Config == "" {
		rep.Config = "the embedded default config"
	}
	for _, name := range cfg.ActuatorNames() {
		if a := cfg.Actuators[name]; a.Driver != "sim" {
			rep.Substituted = append(rep.Substituted, fmt.Sprintf("actuator %s: driver %s simulated as a %s", name, a.Driver, a.Kind))
		}
	}
	for _, name := range cfg.SupplyNames() {
		if d := cfg.Supplies[name].Driver; d != "sim" {
			rep.Substituted = append(rep.Substituted, fmt.Sprintf("supply %s: driver %s simulated at %g V", name, d, supplyVolts(cfg.Supplies[name])))
		}
	}
	for i, st := range sc.Steps {
		if kind := cfg.Actuators[st.Actuator].Kind; !kind.Reversible() {
			rep.Irreversible = append(rep.Irreversible, fmt.Sprintf("step %d %s (%s, line %d)", i+1, st.Actuator, kind, st.Line))
		}
	}
	if rep.Probes, err = pr.probeAll(shapes); err != nil {
		return err
	}
	for _, res := range rep.Probes {
		if *walDir == "" {
			res.Journal = ""
		}
		switch res.Verdict {
		case verdictClean:
			rep.Summary.Clean++
		case verdictDirty:
			rep.Summary.Dirty++
		default:
			rep.Summary.EngineDisagrees++
		}
	}
	rep.Summary.Probes = len(rep.Probes)

	if *asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printProve(w, rep, pr)
	}
	if rep.Summary.Clean != rep.Summary.Probes {
		return &exitError{code: 1, err: fmt.Errorf("%d of %d probes are not CLEAN", rep.Summary.Probes-rep.Summary.Clean, rep.Summary.Probes)}
	}
	return nil
}

// proveDir returns the directory the probes' journals go in: the user's
// (which must be new or empty: a probe must start on an empty journal), or a
// temporary one removed afterwards.
func proveDir(keep string) (string, func(), error) {
	if keep == "" {
		dir, err := os.MkdirTemp("", "saga-prove-")
		if err != nil {
			return "", nil, err
		}
		return dir, func() { os.RemoveAll(dir) }, nil
	}
	ents, err := os.ReadDir(keep)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(keep, 0o700); err != nil {
			return "", nil, err
		}
	case err != nil:
		return "", nil, fmt.Errorf("--wal-dir: %w", err)
	case len(ents) > 0:
		return "", nil, fmt.Errorf("--wal-dir %s is not empty: give a new or empty directory", keep)
	}
	return keep, func() {}, nil
}

// printProve writes the table and the summary.
func printProve(w io.Writer, rep *proveReport, pr *prober) {
	fmt.Fprintf(w, "prove %s on %s: %d steps in one saga, each broken in %d shapes: %d probes\n",
		rep.Scenario, rep.Config, len(rep.Steps), len(rep.Shapes), len(rep.Probes))
	for _, s := range rep.Substituted {
		fmt.Fprintf(w, "note: %s (the probes never touch real hardware)\n", s)
	}
	fmt.Fprintf(w, "virtual time between steps %s; a hung driver call times out after %s\n", pr.sc.Interval, pr.timeout)
	if pr.cfg != nil && pr.cfg.Journal.Durability == rollback.FirstTouch {
		fmt.Fprintln(w, "note: durability first-touch: only a saga's first intent on an actuator is durable before its effect, so a crash may lose later intents; recovery still restores each actuator to where the saga found it")
	}
	for i, st := range pr.sc.Steps {
		note := ""
		if d := pr.dry[i]; d.Clamped {
			note = fmt.Sprintf(" (clamped to %g)", d.Value)
		}
		fmt.Fprintf(w, "  step %d  %s → %g%s  (line %d)\n", i+1, st.Actuator, st.Value, note, st.Line)
	}
	fmt.Fprintln(w, "shapes:")
	for _, s := range rep.Shapes {
		fmt.Fprintf(w, "  %-21s %s\n", s.Name, s.About)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tSHAPE\tENGINE\tWORLD\tVERDICT")
	for _, p := range rep.Probes {
		fmt.Fprintf(tw, "%d %s → %g\t%s\t%s\t%s\t%s\n", p.Step, p.Actuator, p.Value, p.Shape, engineWord(p.Engine), worldWord(p.World), p.Verdict)
	}
	tw.Flush()
	// A DIRTY probe is the engine telling the truth about a world it could
	// not restore: one line says which. A disagreement is a bug in the
	// engine (or in this command) and gets both views in full.
	if rep.Summary.Dirty > 0 {
		fmt.Fprintln(w)
	}
	for _, p := range rep.Probes {
		if p.Verdict == verdictDirty {
			fmt.Fprintf(w, "DIRTY: step %d %s, %s: %s\n", p.Step, p.Actuator, p.Shape, p.Why)
		}
	}
	for _, p := range rep.Probes {
		if p.Verdict == verdictDisagrees {
			fmt.Fprintf(w, "\n%s: step %d %s → %g, %s: %s\n", p.Verdict, p.Step, p.Actuator, p.Value, p.Shape, p.Why)
			fmt.Fprint(w, indent(probeViews(p)))
		}
	}
	s := rep.Summary
	fmt.Fprintf(w, "\n%d probes: %d CLEAN, %d DIRTY, %d ENGINE DISAGREES\n", s.Probes, s.Clean, s.Dirty, s.EngineDisagrees)
	for _, irr := range rep.Irreversible {
		fmt.Fprintf(w, "irreversible: %s — no undo exists; a failure at or after it leaves the world changed\n", irr)
	}
	switch {
	case s.Clean == s.Probes:
		fmt.Fprintln(w, "PROVEN: every probe unwound clean, and the world came back every time")
	case s.EngineDisagrees > 0:
		fmt.Fprintln(w, "NOT PROVEN, and the engine's word did not match the world: report this as a bug")
	default:
		fmt.Fprintln(w, "NOT PROVEN: some failures leave the world changed (the engine says so)")
	}
}

// probeViews prints both views of a probe: the engine's report and the
// world against its start.
func probeViews(p *probeResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "engine: %s", p.Engine.Verdict)
	if p.Engine.Recovered {
		b.WriteString(", finished by recovery")
	}
	if p.Engine.Halted {
		b.WriteString(", halted")
	}
	b.WriteString("\n")
	for _, s := range p.Engine.Steps {
		fmt.Fprintf(&b, "  step %d %-10s %-9s %s", s.Step, s.Actuator, s.Outcome, s.Bucket)
		if s.Attempts > 1 {
			fmt.Fprintf(&b, " after %d attempts", s.Attempts)
		}
		if s.Error != "" {
			fmt.Fprintf(&b, " — %s", s.Error)
		}
		b.WriteString("\n")
	}
	b.WriteString("world:\n")
	for _, v := range p.World {
		mark := "at start"
		if v.Moved() {
			mark = "MOVED"
		}
		fmt.Fprintf(&b, "  %-10s %-8s %s %g → %g  %s", v.Actuator, v.Kind, v.Measure, v.Start, v.End, mark)
		if v.Error != "" {
			fmt.Fprintf(&b, " (%s)", v.Error)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func engineWord(e engineView) string {
	if e.Clean {
		return "clean"
	}
	var bad []string
	for b, n := range countBuckets(e) {
		bad = append(bad, fmt.Sprintf("%d %s", n, b))
	}
	slices.Sort(bad)
	return "partial (" + strings.Join(bad, ", ") + ")"
}

func countBuckets(e engineView) map[rollback.Bucket]int {
	m := map[rollback.Bucket]int{}
	for _, s := range e.Steps {
		if s.Bucket != rollback.Compensated {
			m[s.Bucket]++
		}
	}
	return m
}

func worldWord(ws []worldView) string {
	var moved []string
	for _, v := range ws {
		if v.Moved() {
			moved = append(moved, v.String())
		}
	}
	if len(moved) == 0 {
		return "at start"
	}
	return "moved: " + strings.Join(moved, ", ")
}
