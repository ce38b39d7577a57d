package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/client"
	"github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/journaltool"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// The kill -9 torture loop. Every round starts the real binary on simulated
// servos whose world persists in a file, drives sagas at it from controllers
// in this test, SIGKILLs it at a moment drawn from a seeded RNG, and checks
// that the world file, the journal and the restarted daemon agree with each
// other and with what the controllers were told. Hundreds of rounds run by
// default; -torture.rounds N runs more, -torture.seed S replays the random
// choices of a run (the timing of a kill is the machine's, so a replay
// draws the same delays but need not land on the same instruction).

// defaultTortureRounds fits in about a minute on an idle 2-core machine
// with the plain binary (see tortureBinary); -short runs a few. On a busy
// machine (CI runs packages in parallel) tortureBudget stops the default
// run early rather than let it run for minutes; an explicit -torture.rounds
// always runs every round.
const (
	defaultTortureRounds = 300
	tortureBudget        = 75 * time.Second
	// minTortureRounds always run, budget or not: CI must see hundreds.
	minTortureRounds = 200
)

var (
	tortureRounds = flag.Int("torture.rounds", 0, fmt.Sprintf("rounds of TestTorture (0: %d, or 20 with -short)", defaultTortureRounds))
	tortureSeed   = flag.Uint64("torture.seed", 0, "seed of TestTorture's random choices (0: drawn; every run prints its seed)")
	tortureRace   = flag.Bool("torture.race", false, "run TestTorture on the race-built binary (about 3x slower to start, so fewer rounds fit)")
)

// tortureBinary is the binary the loop kills. A race-built daemon takes
// about 0.3 s to become ready on the CI machine against 0.1 s for a plain
// build, and start-up dominates a round, so by default the loop builds its
// own plain binary: three times the rounds in the same time. The rest of
// the suite runs the daemon under the race detector, and -torture.race (or
// SAGA_TEST_NO_RACE, when `binary` is plain already) uses `binary` here too.
func tortureBinary(t *testing.T) (path string, race bool) {
	t.Helper()
	if *tortureRace && os.Getenv("SAGA_TEST_NO_RACE") == "" {
		return binary, true
	}
	return plainBinary(t), false
}

func TestTorture(t *testing.T) {
	rounds, budget := *tortureRounds, time.Duration(0)
	if rounds <= 0 {
		rounds, budget = defaultTortureRounds, tortureBudget
		if testing.Short() {
			rounds = 20
		}
	}
	seed := *tortureSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("torture: seed %d, %d rounds (replay: go test -run TestTorture ./cmd/saga-supervisor/ -torture.seed %d -torture.rounds %d -v)", seed, rounds, seed, rounds)

	bin, race := tortureBinary(t)
	tt := newTorture(t, bin, seed)
	tt.stats.race = race
	t.Cleanup(tt.stop)
	began := time.Now()
	for r := 1; r <= rounds; r++ {
		tt.round(r)
		if len(tt.violations) > 0 {
			tt.fail(r, began)
		}
		if budget > 0 && time.Since(began) > budget && r < rounds && r >= minTortureRounds {
			t.Logf("torture: stopping after round %d of %d: the default run's time budget of %v is spent (a busy machine?)", r, rounds, budget)
			rounds = r
		}
	}
	tt.final(rounds + 1)
	if len(tt.violations) > 0 {
		tt.fail(rounds+1, began)
	}
	t.Log(tt.stats.report(rounds, seed, time.Since(began)))
}

// torture is the state the loop carries from round to round: the daemon's
// files and the test's own oracle of where every actuator is.
type torture struct {
	t    *testing.T
	bin  string
	seed uint64

	dir, cfgPath, journal, world, logPath string
	httpAddr, broker                      string
	names                                 []string // actuators, sorted
	spec                                  map[string]config.Actuator
	hc                                    *http.Client

	proc   *exec.Cmd
	exited chan struct{} // closed when proc has been waited for
	killed atomic.Bool   // the test sent the SIGKILL (errors after it are expected)

	mu    sync.Mutex
	model map[string]float64 // where each actuator is, as far as the controllers know for sure
	// pending are the sagas a kill cut off: their outcome (committed or
	// unwound, never half) is read off the world and the journal at the
	// next ready daemon. Their actuators are disjoint.
	pending []*sagaRun
	// acked are the sagas whose commit or abort was acknowledged since the
	// last ready check; the journal must say the same.
	acked []*sagaRun

	openAtDeath      int  // sagas the journal showed unfinished at the last kill
	lastKillDrove    bool // the last kill came while controllers drove sagas
	stepsOpenAtDeath int  // steps of those sagas not yet undone, which recovery must undo
	lastStart        time.Time
	// finishedThrough is the newest saga in the journal at the last ready
	// check, when every saga was finished; none of them may reopen.
	finishedThrough uint64
	jv              *journalView // the journal as read so far
	violations      []string
	stats           tortureStats
}

// sagaRun is one saga as a controller saw it.
type sagaRun struct {
	agent      string
	id         uint64             // 0 until begin was acknowledged
	acts       []string           // actuators touched, in order of first touch
	pre        map[string]float64 // each touched actuator before the saga
	final      map[string]float64 // each touched actuator's last value sent
	commitSent bool
	committed  bool // commit acknowledged
	aborted    bool // abort acknowledged (unwind reported clean)
}

type tortureStats struct {
	race             bool
	starts           int
	earlyKills       int // killed while starting (recovering), before ready
	earlyAfterMove   int // of those: after recovery had moved a servo
	earlyCutRecovery int // of those: the journal shows a recovery begun and not finished
	killsSagaOpen    int // the journal had a saga open at a kill while sagas ran
	killsMidUnwind   int // the journal shows an unwind cut off by the kill
	recoveries       int // starts whose recovery unwound something
	recoveredSagas   int // sagas those recoveries finished
	doubtCommitted   int // cut-off commits recovery found committed
	doubtUnwound     int // cut-off commits recovery unwound
	sagas            int
	commits, aborts  int
	steps, refusals  int
	tornTails        int
	records          uint64
	segments         int
	violationsFound  int
	readyTime        time.Duration // start to ready, summed over readyStarts
	readyStarts      int
	checking         time.Duration // the test's own checks, all rounds
}

func (s *tortureStats) report(rounds int, seed uint64, took time.Duration) string {
	bin := "plain"
	if s.race {
		bin = "race-built"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "torture report (seed %d, %s binary)\n", seed, bin)
	fmt.Fprintf(&b, "  rounds                      %d in %v (%v a round; start→ready %v on average)\n", rounds, took.Round(time.Millisecond),
		(took / time.Duration(max(rounds, 1))).Round(time.Millisecond), (s.readyTime / time.Duration(max(s.readyStarts, 1))).Round(time.Millisecond))
	fmt.Fprintf(&b, "  the test's checks           %v a round\n", (s.checking / time.Duration(max(rounds, 1))).Round(time.Millisecond))
	fmt.Fprintf(&b, "  kills                       %d (plus one after the final check); %d while recovering (%d after it had moved a servo, %d leaving its unwind unfinished)\n", rounds, s.earlyKills, s.earlyAfterMove, s.earlyCutRecovery)
	fmt.Fprintf(&b, "  kills with a saga open      %d; %d commits cut off unacknowledged: %d found committed, %d unwound\n", s.killsSagaOpen, s.doubtCommitted+s.doubtUnwound, s.doubtCommitted, s.doubtUnwound)
	fmt.Fprintf(&b, "  kills that cut an unwind    %d\n", s.killsMidUnwind)
	fmt.Fprintf(&b, "  recoveries that unwound     %d (%d sagas)\n", s.recoveries, s.recoveredSagas)
	fmt.Fprintf(&b, "  sagas begun (acknowledged)  %d: %d commits and %d aborts acknowledged; %d steps acknowledged, %d refused as intended\n", s.sagas, s.commits, s.aborts, s.steps, s.refusals)
	fmt.Fprintf(&b, "  journal                     %d records in %d segments; %d torn tails seen after a kill\n", s.records, s.segments, s.tornTails)
	fmt.Fprintf(&b, "  violations                  %d", s.violationsFound)
	return b.String()
}

func newTorture(t *testing.T, bin string, seed uint64) *torture {
	dir := t.TempDir()
	tt := &torture{
		t: t, bin: bin, seed: seed, dir: dir,
		journal: filepath.Join(dir, "journal"),
		world:   filepath.Join(dir, "world"),
		logPath: filepath.Join(dir, "daemon.log"),
		hc:      &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
		model:   map[string]float64{},
	}
	ports := stablePorts(t, 2)
	mqttAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	tt.httpAddr = fmt.Sprintf("127.0.0.1:%d", ports[1])
	tt.broker = "tcp://" + mqttAddr
	// The embedded default, with instant servos (positions are exact), small
	// journal segments (a kill lands in segment rollover now and then), and
	// everything in the test's directory.
	text := defaultYAMLForTests(t)
	for old, new := range map[string]string{
		"  dir: ./saga-data/journal": "  dir: " + tt.journal,
		"  world: ./saga-data/world": "  world: " + tt.world,
		"  listen: 127.0.0.1:1883":   "  listen: " + mqttAddr,
		"  listen: 127.0.0.1:8080":   "  listen: " + tt.httpAddr,
		"  segment_size: 16MiB":      "  segment_size: 64KiB",
		// Checkpoints and retention at work: a kill lands in a
		// checkpoint write or a retention delete now and then.
		"  checkpoint_records: 16384": "  checkpoint_records: 64",
		"    max_size: 256MiB":        "    max_size: 256KiB",
		"sim: {slew: 720}":            "sim: {slew: 0}",
	} {
		if !strings.Contains(text, old) {
			t.Fatalf("the default config no longer has %q; adapt the torture test", old)
		}
		text = strings.ReplaceAll(text, old, new)
	}
	tt.cfgPath = filepath.Join(dir, "arm.yaml")
	if err := os.WriteFile(tt.cfgPath, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, "check-config", tt.cfgPath); code != 0 {
		t.Fatalf("torture config invalid:\n%s", out)
	}
	cfg, err := config.Load(tt.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	tt.spec = cfg.Actuators
	for name, a := range cfg.Actuators {
		if a.Kind != "servo" {
			t.Fatalf("actuator %s is a %s; the torture test drives servos", name, a.Kind)
		}
		tt.names = append(tt.names, name)
		tt.model[name] = a.Initial
	}
	slices.Sort(tt.names)
	tt.jv = newJournalView(tt.names, tt.spec)
	return tt
}

// stablePorts returns n loopback ports that are free now and lie below the
// kernel's ephemeral range. The daemon binds them again at every restart;
// a port from the ephemeral range could meanwhile become the source port of
// some other test's connection, and a daemon that cannot bind its HTTP port
// stops in order, parking the arm — a move no saga made.
func stablePorts(t *testing.T, n int) []int {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		fmt.Sscan(string(b), &low)
	}
	base := max(1024, low-20000)
	var ports []int
	for tries := 0; len(ports) < n && tries < 1000; tries++ {
		p := base + rand.IntN(low-base)
		if slices.Contains(ports, p) {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		ln.Close()
		ports = append(ports, p)
	}
	if len(ports) < n {
		t.Fatalf("no %d free ports below %d", n, low)
	}
	return ports
}

// violate records a broken promise of the round.
func (tt *torture) violate(format string, args ...any) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	tt.violations = append(tt.violations, fmt.Sprintf(format, args...))
}

func (tt *torture) fail(r int, began time.Time) {
	tt.t.Helper()
	tt.stats.violationsFound = len(tt.violations)
	tt.t.Log(tt.stats.report(r, tt.seed, time.Since(began)))
	logText, _ := os.ReadFile(tt.logPath)
	tt.t.Fatalf("torture round %d (seed %d) broke %d promises:\n  %s\nreplay: go test -run TestTorture ./cmd/saga-supervisor/ -torture.seed %d -torture.rounds %d -v\nthe journal's last records:\n%s\nlast daemon's log:\n%s",
		r, tt.seed, len(tt.violations), strings.Join(tt.violations, "\n  "), tt.seed, r, journalTail(tt.journal, 40), logText)
}

// journalTail formats the last n records of the journal, for a failure.
func journalTail(dir string, n int) string {
	var lines []string
	err := wal.Scan(dir, wal.Options{}, 1, func(r wal.Record) error {
		rec, err := rollback.DecodeRecord(r.Type, r.Payload)
		if err != nil {
			return err
		}
		lines = append(lines[max(0, len(lines)-n+1):], fmt.Sprintf("  %6d %-11s saga %d step %d %s target %v prior %v code %q %s",
			r.Seq, rec.Type, rec.Saga, rec.Step, rec.Actuator, rec.Target, rec.Prior, rec.Code, rec.Message))
		return nil
	})
	if err != nil {
		lines = append(lines, "  (scan: "+err.Error()+")")
	}
	return strings.Join(lines, "\n")
}

// round is one kill: after checking what the last kill left, start the
// daemon and either kill it while it recovers, or let it get ready, check
// what recovery did, drive sagas and kill it in the middle of them.
func (tt *torture) round(r int) {
	rng := rand.New(rand.NewPCG(tt.seed, uint64(r)))
	t0 := time.Now()
	tt.deadChecks(r)
	tt.stats.checking += time.Since(t0)
	if len(tt.violations) > 0 {
		return
	}
	// Now and then a kill during start-up instead, while recovery unwinds
	// what the last kill left open: recovery must survive its own crash.
	if tt.stepsOpenAtDeath > 0 && rng.Float64() < 0.25 {
		tt.lastKillDrove = false
		tt.killDuringRecovery(time.Duration(rng.Int64N(int64(2 * time.Millisecond))))
		return
	}
	tt.lastKillDrove = true
	tt.start()
	if !tt.waitReady() {
		return
	}
	t0 = time.Now()
	tt.readyChecks(r)
	tt.stats.checking += time.Since(t0)
	if len(tt.violations) > 0 {
		tt.kill()
		return
	}
	tt.drive(r, rng)
}

// final restarts once more after the last round: everything must be
// finished, and the CLI's verify and certify must pass the journal.
func (tt *torture) final(r int) {
	tt.deadChecks(r)
	if len(tt.violations) > 0 {
		return
	}
	tt.start()
	if !tt.waitReady() {
		return
	}
	tt.readyChecks(r)
	tt.kill()
	for _, cmd := range []string{"verify", "certify"} {
		if out, code := run(tt.t, cmd, "--wal", tt.journal); code != 0 {
			tt.violate("after the last recovery `%s --wal` exited %d:\n%s", cmd, code, out)
		}
	}
}

func (tt *torture) start() {
	tt.t.Helper()
	logf, err := os.Create(tt.logPath)
	if err != nil {
		tt.t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(tt.bin, "run", "--config", tt.cfgPath)
	// A file, not a pipe: what the daemon wrote before it answered ready
	// is in the file by the time the answer arrives.
	cmd.Stdout, cmd.Stderr = logf, logf
	tt.killed.Store(false)
	tt.lastStart = time.Now()
	if err := cmd.Start(); err != nil {
		tt.t.Fatal(err)
	}
	tt.proc, tt.exited = cmd, make(chan struct{})
	go func(done chan struct{}) { cmd.Wait(); close(done) }(tt.exited)
	tt.stats.starts++
}

// killDuringRecovery starts the daemon and kills it extra after recovery
// first moves a servo: the world file changes only through compensations
// until the daemon serves. (A kill timed by the clock alone rarely lands in
// the few milliseconds an unwind takes: start-up varies by tens.)
func (tt *torture) killDuringRecovery(extra time.Duration) {
	before, err := os.ReadFile(tt.world)
	if err != nil {
		tt.violate("reading the world file: %v", err)
		return
	}
	tt.start()
	defer tt.kill()
	tt.stats.earlyKills++
	// Bounded: if nothing moves (it should), kill it anyway.
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		select {
		case <-tt.exited:
			tt.violate("the daemon exited while recovering (%v)", tt.proc.ProcessState)
			return
		default:
		}
		if now, err := os.ReadFile(tt.world); err == nil && !bytes.Equal(now, before) {
			tt.stats.earlyAfterMove++
			tt.sleepOrExit(extra)
			return
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// sleepOrExit sleeps d or until the daemon exits.
func (tt *torture) sleepOrExit(d time.Duration) {
	select {
	case <-time.After(d):
	case <-tt.exited:
	}
}

// kill sends SIGKILL and waits until the process is gone (and with it its
// locks on the journal and the world file).
func (tt *torture) kill() {
	if tt.proc == nil {
		return
	}
	tt.killed.Store(true)
	tt.proc.Process.Signal(syscall.SIGKILL)
	<-tt.exited
	tt.proc = nil
}

func (tt *torture) stop() { tt.kill() }

func (tt *torture) get(path string) (int, []byte, error) {
	resp, err := tt.hc.Get("http://" + tt.httpAddr + path)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// waitReady polls /readyz; a daemon that exits or is not ready within the
// hang guard is a violation.
func (tt *torture) waitReady() bool {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if code, _, _ := tt.get("/readyz"); code == http.StatusOK {
			tt.stats.readyTime += time.Since(tt.lastStart)
			tt.stats.readyStarts++
			return true
		}
		select {
		case <-tt.exited:
			tt.violate("the daemon exited instead of getting ready (%v)", tt.proc.ProcessState)
			tt.proc = nil
			return false
		default:
		}
		if time.Now().After(deadline) {
			_, body, _ := tt.get("/readyz")
			tt.violate("the daemon was not ready after 30 s: %s", body)
			tt.kill()
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// journalView is the journal read in order: its history, and per actuator
// the values it was driven to. It is read on from where it stopped, since
// records are only ever appended (a valid record is never cut: only a torn
// tail is, and Scan stops before one); wal.Verify checks the whole chain
// every round besides.
type journalView struct {
	hist    *rollback.History
	next    uint64               // the seq to read from
	targets map[string][]float64 // the initial value, then the latest targets journaled before their effects (a few)
	settled map[string]bool      // the last target's effect is journaled as done
	// cands are the values the world may hold each actuator at: see
	// allowed.
	cands map[string][]float64
	// proc counts the processes that wrote the journal (each begins with
	// a RECOVERY record), and lastProc is the one that wrote each
	// actuator's last target.
	proc     int
	lastProc map[string]int
	// recoveryCut: the last RECOVERY record opens a recovery that no
	// "recovery finished" closes.
	recoveryCut bool
	last        map[string]stepKey // each actuator's last target record
	stepAct     map[stepKey]string // the actuator of each step's target record
}

type stepKey struct {
	saga uint64
	step uint32
	comp bool // a compensation's
}

func newJournalView(names []string, spec map[string]config.Actuator) *journalView {
	jv := &journalView{hist: rollback.NewHistory(), next: 1, targets: map[string][]float64{}, settled: map[string]bool{},
		cands: map[string][]float64{}, lastProc: map[string]int{}, last: map[string]stepKey{}, stepAct: map[stepKey]string{}}
	for _, n := range names {
		jv.targets[n] = []float64{spec[n].Initial}
		jv.settled[n] = true
		jv.cands[n] = []float64{spec[n].Initial}
	}
	return jv
}

// read reads the records appended since the last read. Besides the history
// it checks that every INTENT's prior is the value the journal last drove
// the actuator to: a stale prior would make an unwind restore the wrong
// value.
func (jv *journalView) read(dir string) (problems []string, err error) {
	err = wal.Scan(dir, wal.Options{}, jv.next, func(r wal.Record) error {
		rec, err := rollback.DecodeRecord(r.Type, r.Payload)
		if err != nil {
			return fmt.Errorf("record seq %d: %w", r.Seq, err)
		}
		jv.next = r.Seq + 1
		jv.hist.Add(rec)
		switch rec.Type {
		case rollback.RecIntent, rollback.RecCompIntent:
			ts, ok := jv.targets[rec.Actuator]
			if !ok {
				problems = append(problems, fmt.Sprintf("record seq %d names an unknown actuator %q", r.Seq, rec.Actuator))
				return nil
			}
			if rec.Type == rollback.RecIntent && rec.Prior != ts[len(ts)-1] {
				problems = append(problems, fmt.Sprintf("record seq %d: saga %d step %d on %s has prior %v, but the journal last drove it to %v",
					r.Seq, rec.Saga, rec.Step, rec.Actuator, rec.Prior, ts[len(ts)-1]))
			}
			k, a := stepKey{rec.Saga, rec.Step, rec.Type == rollback.RecCompIntent}, rec.Actuator
			if jv.settled[a] || jv.lastProc[a] == jv.proc {
				// The last effect on it is done: the process that wrote
				// it drives one actuator one command at a time.
				jv.cands[a] = []float64{ts[len(ts)-1]}
			}
			// Otherwise an earlier process died with it in doubt, and
			// the world may still be anywhere that one allowed.
			if !slices.Contains(jv.cands[a], rec.Target) {
				jv.cands[a] = append(jv.cands[a], rec.Target)
			}
			jv.targets[a] = append(ts[max(0, len(ts)-7):], rec.Target)
			jv.settled[a], jv.lastProc[a] = false, jv.proc
			jv.last[a], jv.stepAct[k] = k, a
		case rollback.RecApplied:
			k := stepKey{rec.Saga, rec.Step, false}
			if a := jv.stepAct[k]; a != "" && jv.last[a] == k {
				jv.settle(a)
			}
		case rollback.RecCompDone:
			k := stepKey{rec.Saga, rec.Step, true}
			if a := jv.stepAct[k]; a != "" && jv.last[a] == k && rec.Code == string(rollback.Compensated) {
				jv.settle(a)
			}
		case rollback.RecFailed:
			problems = append(problems, fmt.Sprintf("record seq %d: saga %d step %d FAILED (%s) on a fault-free simulation", r.Seq, rec.Saga, rec.Step, rec.Message))
		case rollback.RecRecovery:
			jv.recoveryCut = rec.Message != "recovery finished"
			if jv.recoveryCut {
				jv.proc++
			}
		case rollback.RecHalt, rollback.RecSafe:
			problems = append(problems, fmt.Sprintf("record seq %d: %s on a fault-free simulation: %s", r.Seq, rec.Type, rec.Message))
		}
		return nil
	})
	return problems, err
}

// settle records that the effect of a's last target is journaled as done.
func (jv *journalView) settle(a string) {
	ts := jv.targets[a]
	jv.settled[a], jv.cands[a] = true, []float64{ts[len(ts)-1]}
}

// allowed is where the world may hold an actuator after a kill: at the last
// journaled target or — if that effect is not journaled as done — where it
// was before it: the target before, or, when the process that wrote that
// one died with it in doubt too (a compensation cut off twice), wherever
// that one allowed. Anything else moved without a durable intent.
func (jv *journalView) allowed(name string) []float64 { return jv.cands[name] }

// deadChecks runs while no daemon is: the journal verifies, the world file
// can be opened (the kill dropped its lock), and everything in the world
// was journaled before it moved and agrees with the controllers' oracle.
func (tt *torture) deadChecks(r int) {
	if tt.stats.starts == 0 {
		return // nothing has run yet
	}
	// The whole chain every round; through the CLI's verify (which also
	// decodes every record again) every tenth.
	rep, err := wal.Verify(tt.journal, wal.Options{})
	if err != nil || !rep.OK() {
		tt.violate("after the kill the journal does not verify: %v %+v", err, rep.Broken)
		return
	}
	if rep.TornTail != nil {
		tt.stats.tornTails++
	}
	tt.stats.records, tt.stats.segments = rep.Records, rep.Segments
	if r%10 == 0 {
		var out bytes.Buffer
		if err := journaltool.Verify([]string{"--wal", tt.journal}, &out); err != nil {
			tt.violate("after the kill `verify --wal` fails: %v\n%s", err, out.String())
			return
		}
	}
	jv := tt.jv
	problems, err := jv.read(tt.journal)
	if err != nil {
		tt.violate("after the kill the journal cannot be read: %v", err)
		return
	}
	for _, p := range problems {
		tt.violate("after the kill: %s", p)
	}
	w, err := sim.OpenWorld(tt.world)
	if err != nil {
		tt.violate("after the kill the world file cannot be opened (was its lock dropped?): %v", err)
		return
	}
	snap := w.Snapshot()
	w.Close()
	inFlight := tt.pendingActs()
	for _, n := range tt.names {
		ds := snap[n]
		if !ds.Known {
			tt.violate("after the kill the world has no %s", n)
			continue
		}
		if allowed := jv.allowed(n); !slices.Contains(allowed, ds.Position) {
			tt.violate("after the kill %s is at %v in the world, but the journal allows only %v (journaled targets %v): an effect without a durable intent",
				n, ds.Position, allowed, tail(jv.targets[n], 6))
		}
		if _, cut := inFlight[n]; !cut && ds.Position != tt.model[n] {
			tt.violate("after the kill %s is at %v in the world, but no saga in flight touched it and the controllers last saw it settle at %v", n, ds.Position, tt.model[n])
		}
	}
	tt.openAtDeath, tt.stepsOpenAtDeath = 0, 0
	for _, s := range jv.hist.Sagas {
		switch {
		case s.State == rollback.SagaUnwound && !s.Clean():
			tt.violate("after the kill: saga %d of %s was unwound PARTIAL on a fault-free simulation (%s)", s.ID, s.Agent, s.Reason)
		case s.State == rollback.SagaOpen || s.State == rollback.SagaUnwinding:
			if s.ID <= tt.finishedThrough {
				tt.violate("after the kill: saga %d of %s is %s, but a recovery since should have finished it", s.ID, s.Agent, s.State)
			}
			tt.openAtDeath++
			for _, st := range s.Steps {
				if st.Bucket == "" {
					tt.stepsOpenAtDeath++
				}
			}
		}
	}
	if slices.ContainsFunc(jv.hist.Unfinished(), func(s *rollback.SagaHistory) bool { return s.State == rollback.SagaUnwinding }) {
		tt.stats.killsMidUnwind++
	}
	if tt.openAtDeath > 0 && tt.lastKillDrove {
		tt.stats.killsSagaOpen++
	}
	if jv.recoveryCut && !tt.lastKillDrove {
		tt.stats.earlyCutRecovery++
	}
}

func tail(v []float64, n int) []float64 { return v[max(0, len(v)-n):] }

// pendingActs are the actuators of the sagas a kill cut off.
func (tt *torture) pendingActs() map[string]*sagaRun {
	m := map[string]*sagaRun{}
	for _, s := range tt.pending {
		for _, a := range s.acts {
			m[a] = s
		}
	}
	return m
}

type statusJSON struct {
	Ready     bool     `json:"ready"`
	Reasons   []string `json:"reasons"`
	Halted    bool     `json:"halted"`
	OpenSagas []uint64 `json:"open_sagas"`
	Actuators []struct {
		Name      string   `json:"name"`
		Commanded float64  `json:"commanded"`
		ReadBack  *float64 `json:"read_back"`
		Error     string   `json:"error"`
	} `json:"actuators"`
}

// readyChecks run on a ready daemon before anything is sent to it: it
// finished every saga the kill cut off, cleanly, and the engine, the world,
// the journal and the controllers' oracle agree on where everything is.
func (tt *torture) readyChecks(r int) {
	code, body, err := tt.get("/api/v1/status")
	var st statusJSON
	if err != nil || code != http.StatusOK || json.Unmarshal(body, &st) != nil {
		tt.violate("status: %d %v %s", code, err, body)
		return
	}
	if !st.Ready || st.Halted || len(st.OpenSagas) != 0 {
		tt.violate("ready after recovery, but status says ready=%v halted=%v open sagas %v (%v)", st.Ready, st.Halted, st.OpenSagas, st.Reasons)
	}
	commanded := map[string]float64{}
	for _, a := range st.Actuators {
		commanded[a.Name] = a.Commanded
		if a.ReadBack == nil {
			tt.violate("status: %s cannot be read back (%s)", a.Name, a.Error)
		} else if *a.ReadBack != a.Commanded {
			tt.violate("status: %s commanded %v but reads back %v", a.Name, a.Commanded, *a.ReadBack)
		}
	}

	// The world as the file says, read from a copy so the daemon's lock is
	// left alone.
	snap, err := tt.worldCopy()
	if err != nil {
		tt.violate("reading a copy of the world file: %v", err)
		return
	}
	jv := tt.jv
	problems, err := jv.read(tt.journal)
	if err != nil {
		tt.violate("reading the journal after recovery: %v", err)
		return
	}
	for _, p := range problems {
		tt.violate("after recovery: %s", p)
	}
	// certify's rule, every round on the history just read, and through
	// the CLI's own code now and then (it reads the journal three times).
	for _, s := range jv.hist.Sagas {
		if s.State != rollback.SagaCommitted && (s.State != rollback.SagaUnwound || !s.Clean()) {
			tt.violate("after recovery saga %d of %s is %s %s (%s): neither committed nor unwound clean", s.ID, s.Agent, s.State, s.Verdict, s.Reason)
		}
	}
	if r%10 == 0 {
		var out bytes.Buffer
		if err := journaltool.Certify([]string{"--wal", tt.journal}, &out); err != nil {
			tt.violate("after recovery `certify --wal` fails: %v\n%s", err, out.String())
		}
	}
	for _, n := range tt.names {
		c, ok := commanded[n]
		if !ok {
			tt.violate("status has no actuator %s", n)
			continue
		}
		ds := snap[n]
		if ds.Position != c || ds.Commanded != c || ds.Detached {
			tt.violate("after recovery the engine says %s is at %v, the world file says %+v", n, c, ds)
		}
		ts := jv.targets[n]
		if ts[len(ts)-1] != c || !jv.settled[n] {
			tt.violate("after recovery the engine says %s is at %v, the journal last drove it to %v (settled %v)", n, c, ts[len(ts)-1], jv.settled[n])
		}
	}

	// The daemon's own account of its recovery.
	logText, _ := os.ReadFile(tt.logPath)
	reports := strings.Count(string(logText), `msg="recovered: `)
	if strings.Contains(string(logText), `msg="recovered: partial"`) {
		tt.violate("recovery reported a partial unwind on a fault-free simulation")
	}
	if reports != tt.openAtDeath {
		tt.violate("the journal had %d sagas unfinished at the kill, recovery reported %d", tt.openAtDeath, reports)
	}
	if reports > 0 {
		tt.stats.recoveries++
		tt.stats.recoveredSagas += reports
	}

	// The controllers' oracle, against the world itself.
	world := map[string]float64{}
	for _, n := range tt.names {
		world[n] = snap[n].Position
	}
	cut := tt.pendingActs()
	for _, n := range tt.names {
		if _, ok := cut[n]; !ok && world[n] != tt.model[n] {
			tt.violate("after recovery %s is at %v, but no saga was cut off on it and the controllers last saw it settle at %v", n, world[n], tt.model[n])
		}
	}
	for _, s := range tt.acked {
		h := jv.hist.Saga(s.id)
		switch {
		case h == nil:
			tt.violate("saga %d of %s was acknowledged, but the journal does not know it", s.id, s.agent)
		case s.committed && h.State != rollback.SagaCommitted:
			tt.violate("saga %d of %s: commit acknowledged, journal says %s", s.id, s.agent, h.State)
		case s.aborted && (h.State != rollback.SagaUnwound || !h.Clean()):
			tt.violate("saga %d of %s: abort acknowledged clean, journal says %s %s", s.id, s.agent, h.State, h.Verdict)
		}
	}
	for _, s := range tt.pending {
		tt.resolve(s, world, jv.hist)
	}
	for _, n := range tt.names {
		tt.model[n] = world[n]
	}
	tt.pending, tt.acked = nil, nil
	if n := len(jv.hist.Sagas); n > 0 {
		tt.finishedThrough = jv.hist.Sagas[n-1].ID
	}
}

// resolve decides what became of a saga a kill cut off: all its actuators
// at their values from before it (unwound), or — only if its commit was
// sent — all at its last values (committed). Never half, and the journal
// must say the same.
func (tt *torture) resolve(s *sagaRun, world map[string]float64, h *rollback.History) {
	atPre, atFinal := true, s.commitSent
	for _, a := range s.acts {
		atPre = atPre && world[a] == s.pre[a]
		atFinal = atFinal && world[a] == s.final[a]
	}
	if !atPre && !atFinal {
		now := map[string]float64{}
		for _, a := range s.acts {
			now[a] = world[a]
		}
		tt.violate("saga %d of %s was cut off and left HALF done: actuators at %v, before it %v, its targets %v (commit sent: %v)",
			s.id, s.agent, now, s.pre, s.final, s.commitSent)
		return
	}
	if s.id == 0 {
		return // begin unacknowledged: it touched nothing
	}
	hs := h.Saga(s.id)
	if hs == nil {
		// Its BEGIN rode a batch the kill lost, so no INTENT of it was
		// durable either, and nothing may have moved.
		if !atPre {
			tt.violate("saga %d of %s is not in the journal, but its actuators are not at their priors", s.id, s.agent)
		}
		return
	}
	switch {
	case hs.State == rollback.SagaCommitted && atFinal:
		if s.commitSent {
			tt.stats.doubtCommitted++
		}
	case hs.State == rollback.SagaUnwound && hs.Clean() && atPre:
		if s.commitSent {
			tt.stats.doubtUnwound++
		}
	default:
		tt.violate("saga %d of %s was cut off: the journal says %s %s, the world says at its priors %v, at its targets %v",
			s.id, s.agent, hs.State, hs.Verdict, atPre, atFinal)
	}
}

func (tt *torture) worldCopy() (map[string]sim.DeviceState, error) {
	b, err := os.ReadFile(tt.world)
	if err != nil {
		return nil, err
	}
	cp := filepath.Join(tt.dir, "world.copy")
	if err := os.WriteFile(cp, b, 0o600); err != nil {
		return nil, err
	}
	w, err := sim.OpenWorld(cp)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	return w.Snapshot(), nil
}

// drive runs one or two controllers against the ready daemon and kills it
// after a random delay.
func (tt *torture) drive(r int, rng *rand.Rand) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// One controller on the whole arm, or two at once on disjoint halves.
	groups := [][]string{tt.names}
	if rng.Float64() < 0.35 {
		perm := rng.Perm(len(tt.names))
		var a, b []string
		for i, p := range perm {
			if i < len(perm)/2 {
				a = append(a, tt.names[p])
			} else {
				b = append(b, tt.names[p])
			}
		}
		groups = [][]string{a, b}
	}
	delay := time.Duration(rng.Int64N(int64(120 * time.Millisecond)))
	ws := make([]*tortureWorker, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		ws[i] = &tortureWorker{tt: tt, name: fmt.Sprintf("torturer-%c", 'a'+i), acts: g,
			rng: rand.New(rand.NewPCG(tt.seed^0x746f7274, uint64(r)<<2|uint64(i)))}
		wg.Add(1)
		go func(w *tortureWorker) {
			defer wg.Done()
			w.run(ctx)
		}(ws[i])
	}
	tt.sleepOrExit(delay)
	select {
	case <-tt.exited:
		tt.violate("the daemon exited on its own while sagas ran (%v)", tt.proc.ProcessState)
	default:
	}
	tt.kill()
	cancel()
	wg.Wait()
	for _, w := range ws {
		if w.cur != nil && (w.cur.id != 0 || len(w.cur.acts) > 0) {
			tt.pending = append(tt.pending, w.cur)
		}
	}
}

// tortureWorker is one controller: sagas one after another, each of a few
// steps on its actuators, ended by commit or abort, until the kill.
type tortureWorker struct {
	tt   *torture
	name string
	acts []string
	rng  *rand.Rand
	// cur is the saga whose end no reply has confirmed yet. Only the
	// worker's goroutine touches it until drive has waited for it.
	cur *sagaRun
}

func (w *tortureWorker) run(ctx context.Context) {
	tt := w.tt
	c, err := client.Dial(ctx, client.Options{Broker: tt.broker, Agent: w.name, Device: "arm1", TTL: 5 * time.Second})
	if err != nil {
		w.lost("dial", err)
		return
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		c.Close(cctx)
		cancel()
	}()
	for ctx.Err() == nil {
		s := &sagaRun{agent: w.name, pre: map[string]float64{}, final: map[string]float64{}}
		w.cur = s
		sg, err := c.Begin(ctx)
		if err != nil {
			w.lost("begin", err)
			return
		}
		s.id = sg.ID()
		tt.mu.Lock()
		tt.stats.sagas++
		tt.mu.Unlock()
		for n := 1 + w.rng.IntN(5); n > 0; n-- {
			if !w.step(ctx, sg, s) {
				return
			}
			if w.rng.Float64() < 0.2 {
				time.Sleep(time.Duration(w.rng.IntN(3000)) * time.Microsecond)
			}
		}
		if w.rng.Float64() < 0.7 {
			s.commitSent = true
			if err := sg.Commit(ctx); err != nil {
				w.lost("commit", err)
				return
			}
			s.committed = true
			tt.mu.Lock()
			for _, a := range s.acts {
				tt.model[a] = s.final[a]
			}
			tt.acked = append(tt.acked, s)
			tt.stats.commits++
			tt.mu.Unlock()
		} else {
			rep, err := sg.Abort(ctx, "torture")
			if err != nil {
				w.lost("abort", err)
				return
			}
			if rep == nil || rep.Verdict != "clean" {
				tt.violate("saga %d of %s: abort reported %+v, want a clean unwind", s.id, w.name, rep)
			}
			tt.mu.Lock()
			for _, a := range s.acts {
				tt.model[a] = s.pre[a]
			}
			s.aborted = true
			tt.acked = append(tt.acked, s)
			tt.stats.aborts++
			tt.mu.Unlock()
		}
		w.cur = nil
	}
}

// step sends one step: usually an in-limit value, now and then one past a
// limit that must be refused with nothing moved. It reports whether the
// saga goes on.
func (w *tortureWorker) step(ctx context.Context, sg *client.Saga, s *sagaRun) bool {
	tt := w.tt
	a := w.acts[w.rng.IntN(len(w.acts))]
	spec := tt.spec[a]
	if w.rng.Float64() < 0.05 {
		v, want := spec.Max+1+float64(w.rng.IntN(50)), string(limits.LimitMax)
		if w.rng.IntN(2) == 0 {
			v, want = spec.Min-1-float64(w.rng.IntN(50)), string(limits.LimitMin)
		}
		_, err := sg.Step(ctx, a, v)
		if client.CodeOf(err) == "" {
			if err == nil {
				tt.violate("saga %d of %s: %s to %v (outside %v..%v) was accepted", s.id, w.name, a, v, spec.Min, spec.Max)
				return false
			}
			w.lost("step", err)
			return false
		}
		if client.CodeOf(err) != want || !client.IsRefusal(err) {
			tt.violate("saga %d of %s: %s to %v refused %v, want %s", s.id, w.name, a, v, err, want)
			return false
		}
		tt.mu.Lock()
		tt.stats.refusals++
		tt.mu.Unlock()
		return true
	}
	// Half-degree values, so two steps often differ and sometimes repeat.
	v := spec.Min + 0.5*float64(w.rng.IntN(int((spec.Max-spec.Min)/0.5)+1))
	prior, touched := s.final[a]
	if !touched {
		tt.mu.Lock()
		prior = tt.model[a]
		tt.mu.Unlock()
		s.pre[a] = prior
		s.acts = append(s.acts, a)
	}
	// Recorded before sending: the step may take effect even if its reply
	// never comes.
	s.final[a] = v
	res, err := sg.Step(ctx, a, v)
	if err != nil {
		w.lost("step", err)
		return false
	}
	if res.Prior != prior || res.Value != v {
		tt.violate("saga %d of %s: step %s to %v acknowledged with value %v and prior %v; the controller knew it at %v", s.id, w.name, a, v, res.Value, res.Prior, prior)
	}
	tt.mu.Lock()
	tt.stats.steps++
	tt.mu.Unlock()
	return true
}

// lost handles a call that failed: after the kill that is expected; before
// it, or as a refusal from the supervisor, it is a violation.
func (w *tortureWorker) lost(op string, err error) {
	switch {
	case client.CodeOf(err) != "":
		w.tt.violate("%s %s: refused: %v", w.name, op, err)
	case !w.tt.killed.Load() && !errors.Is(err, context.Canceled):
		w.tt.violate("%s %s: %v (before the kill, on a healthy daemon)", w.name, op, err)
	}
}
