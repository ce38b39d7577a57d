package replay

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/recovery"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// armYAML is a small arm for the tests: limits of every kind, each safe
// policy, a supply. Its fields are filled by armConfig.
const armYAML = `device: testarm
supplies:
  battery:
    driver: sim
    min_volts: 6
    max_volts: 9
actuators:
  shoulder:
    kind: servo
    driver: sim
    sim: {slew: 0}
    min: 0
    max: %g
    initial: 10
    safe: {value: 10}
  elbow:
    kind: servo
    driver: sim
    sim: {slew: 0}
    min: 0
    max: 135
    max_rate: %g
    policy: clamp
    initial: 20
    safe: {value: 45}
  gripper:
    kind: servo
    driver: sim
    sim: {slew: 0}
    min: 0
    max: 60
    safe: detach
    supply: battery
    supply_min_volts: 6.6
    timeout: 20ms
`

// armConfig is the test arm with shoulder's max and elbow's max_rate.
func armConfig(t *testing.T, shoulderMax, elbowRate float64) (*config.Config, string) {
	t.Helper()
	text := fmt.Sprintf(armYAML, shoulderMax, elbowRate)
	cfg, err := config.ParseLayout([]byte(text), "arm.yaml")
	if err != nil {
		t.Fatalf("test config: %v", err)
	}
	path := filepath.Join(t.TempDir(), "arm.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg, path
}

// supplies are the writer's supplies, set by hand.
type supplies struct {
	mu    sync.Mutex
	volts map[string]float64
}

func (s *supplies) set(name string, v float64) {
	s.mu.Lock()
	s.volts[name] = v
	s.mu.Unlock()
}

func (s *supplies) SupplyState(name string, now time.Time) (limits.SupplyState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.volts[name]
	return limits.SupplyState{Name: name, Known: true, Volts: v, At: now, Since: now}, ok
}

// writer writes a journal as the daemon does: the real engine under a
// config, over wal.Log, with simulated devices, a clock moved by hand, and
// recovery.Open for a restart.
type writer struct {
	t      *testing.T
	dir    string
	cfg    *config.Config
	now    time.Time
	mu     sync.Mutex
	world  *sim.World
	servos map[string]*sim.Servo
	sup    *supplies
	reg    *actuators.Registry
	log    *wal.Log
	e      *rollback.Engine
	rec    *recovery.Result
	walOpt wal.Options
	// ckptOpt, when Manual, keeps checkpoints as the daemon does: the
	// journal is opened by recovery.Open, and checkpoint writes one.
	ckptOpt recovery.CheckpointOptions
	n       int // command ids handed out
	// drift, if set, moves the clock on at every reading, as real time
	// passes between the gate's reading and the record's stamp.
	drift func() time.Duration
}

// walOptions are the writer's journal options: small segments, so a
// journal spans several, and the anchor moved only at rollovers and Close,
// so nothing the writer's open log does changes the directory while a
// test compares it before and after a replay.
var walOptions = wal.Options{SegmentSize: 4 << 10, AnchorEvery: -1}

var start = time.Date(2025, 6, 1, 14, 0, 0, 0, time.UTC)

func newWriter(t *testing.T, cfg *config.Config) *writer {
	t.Helper()
	return newWriterWith(t, cfg, walOptions, recovery.CheckpointOptions{})
}

// retainingWAL are the journal options of a writer that keeps checkpoints:
// 4 KiB segments, at most four of them kept behind the older checkpoint,
// and records nobody waits for (a step's APPLIED) written only at the next
// sync, so a checkpoint taken right after a step covers its INTENT and not
// its outcome, on every run.
var retainingWAL = wal.Options{SegmentSize: 4096, AnchorEvery: -1, FlushDelay: time.Hour,
	Retention: wal.Retention{MaxBytes: 4 * 4096}}

// newRetainingWriter is a writer that keeps checkpoints (one each time
// checkpoint is called) and lets retention delete the segments behind the
// older one, as the daemon does: the journal it leaves begins after seq 1.
func newRetainingWriter(t *testing.T, cfg *config.Config) *writer {
	t.Helper()
	return newWriterWith(t, cfg, retainingWAL, recovery.CheckpointOptions{Manual: true, Records: 1})
}

func newWriterWith(t *testing.T, cfg *config.Config, walOpt wal.Options, ckptOpt recovery.CheckpointOptions) *writer {
	t.Helper()
	w := &writer{t: t, dir: filepath.Join(t.TempDir(), "journal"), cfg: cfg, now: start, servos: map[string]*sim.Servo{},
		walOpt: walOpt, ckptOpt: ckptOpt}
	w.world = sim.NewMemoryWorld(sim.WithClock(w.clock))
	var list []*actuators.Actuator
	for _, name := range cfg.ActuatorNames() {
		a := cfg.Actuators[name]
		s := w.world.Servo(name, a.Initial, 0)
		w.servos[name] = s
		list = append(list, a.Actuator(name, s))
	}
	reg, err := actuators.NewRegistry(list...)
	if err != nil {
		t.Fatal(err)
	}
	w.reg = reg
	w.sup = &supplies{volts: map[string]float64{}}
	for _, name := range cfg.SupplyNames() {
		s := cfg.Supplies[name]
		w.sup.volts[name] = (s.MinVolts + s.MaxVolts) / 2
	}
	t.Cleanup(w.close)
	if ckptOpt.Manual {
		w.restart()
		return w
	}
	if w.log, err = wal.Open(w.dir, walOpt); err != nil {
		t.Fatal(err)
	}
	if w.e, err = rollback.New(w.engineConfig(w.log)); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *writer) clock() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.drift != nil {
		w.now = w.now.Add(w.drift())
	}
	return w.now
}

// tick moves the clock on.
func (w *writer) tick(d time.Duration) {
	w.mu.Lock()
	w.now = w.now.Add(d)
	w.mu.Unlock()
}

func (w *writer) engineConfig(j rollback.Journal) rollback.Config {
	c := w.cfg.RollbackConfig()
	c.Journal, c.Actuators, c.Supplies, c.Now = j, w.reg, w.sup, w.clock
	c.RetryBackoff = time.Microsecond
	return c
}

func (w *writer) close() {
	if w.e != nil {
		w.e.Close()
		w.e = nil
	}
	if w.rec != nil {
		w.rec.Close()
		w.rec = nil
	} else if w.log != nil {
		w.log.Close()
	}
	w.log = nil
}

// crash stops the engine and the journal without finishing anything, as a
// kill would (what was enqueued is flushed by Close: nothing is lost that
// the test relies on).
func (w *writer) crash() { w.close() }

// restart takes the journal over as the daemon does at start.
func (w *writer) restart() {
	w.t.Helper()
	res, err := recovery.Open(recovery.Options{Dir: w.dir, WAL: w.walOpt, Engine: w.engineConfig(nil), Checkpoint: w.ckptOpt})
	if err != nil {
		w.t.Fatalf("recovery: %v", err)
	}
	w.rec, w.e, w.log = res, res.Engine, res.Log
}

type saga struct {
	id    uint64
	owner rollback.Owner
}

func (w *writer) begin(agent string) saga {
	w.t.Helper()
	w.tick(5 * time.Millisecond)
	o := rollback.Owner{Agent: agent, Lease: agent + "-lease", Epoch: 1}
	id, err := w.e.Begin(o)
	if err != nil {
		w.t.Fatalf("begin: %v", err)
	}
	return saga{id, o}
}

// step sends one step after dt and returns its command id.
func (w *writer) step(s saga, dt time.Duration, actuator string, v float64) (string, error) {
	return w.stepCmd(s, dt, rollback.Command{Actuator: actuator, Value: v})
}

// stepCmd sends cmd, with a fresh id unless it has one.
func (w *writer) stepCmd(s saga, dt time.Duration, cmd rollback.Command) (string, error) {
	w.tick(dt)
	if cmd.ID == "" {
		w.n++
		cmd.ID = fmt.Sprintf("c%d", w.n)
	}
	_, err := w.e.Step(s.id, s.owner, cmd)
	return cmd.ID, err
}

// mustStep is step where the test needs the command served.
func (w *writer) mustStep(s saga, dt time.Duration, actuator string, v float64) string {
	w.t.Helper()
	id, err := w.step(s, dt, actuator, v)
	if err != nil {
		w.t.Fatalf("step %s %s=%g: %v", id, actuator, v, err)
	}
	return id
}

func (w *writer) commit(s saga) {
	w.t.Helper()
	w.tick(5 * time.Millisecond)
	if err := w.e.Commit(s.id, s.owner); err != nil {
		w.t.Fatalf("commit: %v", err)
	}
}

// flush makes everything enqueued durable, so the journal on disk holds
// it before the test reads it.
func (w *writer) flush() {
	w.t.Helper()
	if err := w.log.Sync(); err != nil {
		w.t.Fatal(err)
	}
}

// checkpoint writes a checkpoint of every durable record, as the daemon's
// checkpointer does, and returns the seq it covers; retention follows.
func (w *writer) checkpoint() uint64 {
	w.t.Helper()
	if err := w.rec.Checkpointer.CheckpointNow(); err != nil {
		w.t.Fatalf("checkpoint: %v", err)
	}
	good, _, err := wal.Checkpoints(w.dir, wal.Options{})
	if err != nil || len(good) == 0 {
		w.t.Fatalf("no checkpoint after CheckpointNow: %v", err)
	}
	return good[0].At.Seq
}

// firstSeq is the first record the journal holds.
func firstSeq(t *testing.T, dir string) uint64 {
	t.Helper()
	vr, err := wal.Verify(dir, wal.Options{})
	if err != nil || !vr.OK() {
		t.Fatalf("verify: %+v %v", vr, err)
	}
	return vr.FirstSeq
}

// records reads the journal back.
func records(t *testing.T, dir string) []seqRecord {
	t.Helper()
	var out []seqRecord
	err := wal.Scan(dir, wal.Options{}, 1, func(r wal.Record) error {
		rec, err := rollback.DecodeRecord(r.Type, r.Payload)
		if err != nil {
			return err
		}
		out = append(out, seqRecord{r.Seq, rec})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

type seqRecord struct {
	seq uint64
	rollback.Record
}

// seqOf is the seq of the INTENT or REFUSED record of command id.
func seqOf(t *testing.T, rs []seqRecord, id string) uint64 {
	t.Helper()
	for _, r := range rs {
		if r.CmdID == id && (r.Type == rollback.RecIntent || r.Type == rollback.RecRefused) {
			return r.seq
		}
	}
	t.Fatalf("no record of command %s", id)
	return 0
}

// run runs the command and returns its exit status and output.
func run(t *testing.T, args ...string) (int, string, error) {
	t.Helper()
	var out bytes.Buffer
	err := Run(args, &out)
	var ee *cli.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("replay %s: an error without an exit status: %v", strings.Join(args, " "), err)
	}
	return cli.Status(err), out.String(), err
}

// tree lists every path under root with its size and modification time,
// so that a test sees anything created or changed.
func tree(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %d %s %d\n", p, fi.Size(), fi.Mode(), fi.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
