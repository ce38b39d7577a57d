//go:build !saga_lean

package hil

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// TestSoak is `make soak` (docs/HIL.md, "The soak"): the real supervisor on
// the sim rig, with a mosquitto of its own and its journal on a file system
// of its own, while one worker per actuator runs sagas without pause, takes
// fault after fault, picked at random from a seed: broker restarts and
// crashes, the serial cable pulled, the journal's disk full (ENOSPC) or
// failing (EIO), a supply sag, the supervisor stopped (SIGSTOP past the
// MQTT keepalive), terminated (SIGTERM) or killed (SIGKILL), and an agent
// process killed or hung. After each, once the supervisor is ready again —
// an operator resetting a halt that was the right outcome — it checks that
// the world (the board's outputs), the supervisor's belief (its status),
// the journal (an engine rebuilt from it, as at a restart) and the retained
// state topics agree; that no acknowledged commit is missing from the
// journal or was undone; and that a halt was honoured: nothing moved until
// the reset, and it was journaled.
//
// SOAK_KINDS (e.g. boot-no-broker,eio) runs only the kinds it names.
// SOAK_DURATION (e.g. 10m) runs faults until it has passed, the first
// round a shuffle of every kind; unset (make test), every kind runs once,
// in an order the seed picks. SOAK_SEED replays a run's sequence of faults
// and their parameters (the timing of the workers and the supervisor is
// the machine's).
func TestSoak(t *testing.T) {
	if avrMode {
		t.Skip("the soak runs on the sim board: its faults (the journal's disk, signals) are the supervisor's, not the board's")
	}
	if rigFile != nil {
		t.Skipf("the soak runs on the sim rig only: it fills and fails the journal's disk and signals the supervisor and the broker, which a rig file does not describe")
	}
	set := soakSettingsFromEnv(t)
	s := newSoak(t, set)
	defer s.finish()
	s.work.start()
	for s.index = 1; ; s.index++ {
		k := s.next()
		if k == nil {
			break
		}
		s.runFault(k)
		if s.suspect || len(s.violations) >= maxViolations {
			break // stop and keep the evidence
		}
	}
}

// soakSettings are TestSoak's knobs.
type soakSettings struct {
	duration time.Duration // 0: brief, every fault kind once
	seed     uint64
	kinds    []string // SOAK_KINDS: only these fault kinds (none: all)
}

func soakSettingsFromEnv(t *testing.T) soakSettings {
	t.Helper()
	var s soakSettings
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("SOAK_DURATION=%q: want a positive duration such as 10m (%v)", v, err)
		}
		s.duration = d
	}
	s.seed = uint64(time.Now().UnixNano())
	if v := os.Getenv("SOAK_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SOAK_SEED=%q: want an unsigned integer (%v)", v, err)
		}
		s.seed = n
	}
	if v := os.Getenv("SOAK_KINDS"); v != "" {
		known := map[string]bool{}
		for _, k := range faultKinds() {
			known[k.name] = true
		}
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); !known[name] {
				t.Fatalf("SOAK_KINDS=%q: no fault kind %q", v, name)
			}
			s.kinds = append(s.kinds, name)
		}
	}
	return s
}

// soak is one soak run.
type soak struct {
	t     *testing.T
	set   soakSettings
	r     *rig
	cfg   *config.Config
	disk  *journalDisk
	work  *workload
	probe *agent // tries to move things while the supervisor is halted
	rng   *rand.Rand
	began time.Time

	kinds      []*faultKind
	order      []*faultKind // the first round: every kind once, shuffled
	index      int          // the fault being run, from 1
	stats      map[string]*faultStats
	history    []string // one line per fault
	violations []string
	harness    []string   // harness errors (check): at most one, it ends the soak
	current    *faultKind // the fault being run
	// haltedMissing: the supervisor said it was halted (this reason)
	// while a boot-time fault's part was missing; the halt must latch.
	haltedMissing string
	reported      map[string]bool // journal problems already reported
	daemons       []*proc         // every supervisor process, for the evidence
	brokers       []*proc         // every mosquitto process, for the evidence
	controllers   int             // controller processes started
	betweenHalts  int             // halts found before a fault was injected (reset by the harness)
	startInDoubt  int             // agent faults' controllers whose step went in doubt at their start (unwound clean; started again)
	// mustFind is what the supervisor just started must find at its
	// start and halt on (startDaemon).
	mustFind []rollback.Mismatch
	// suspect: a violation after which the state cannot be trusted (the
	// supervisor gone, not recovering, views that never agree): the soak
	// stops there.
	suspect bool
	looks   atomic.Int64
}

// faultStats is one row of the report.
type faultStats struct {
	injected   int
	violations int
	halts      int
	recovered  []time.Duration
}

// maxViolations stops a soak that has found enough.
const maxViolations = 50

// soakHangGuard is how long past its duration the soak may run before it
// is declared hung: the longest fault with every hang guard spent.
const soakHangGuard = 15 * time.Minute

func newSoak(t *testing.T, set soakSettings) *soak {
	t.Helper()
	s := &soak{t: t, set: set, rng: rand.New(rand.NewPCG(set.seed, 0x50a4)), stats: map[string]*faultStats{},
		reported: map[string]bool{}, began: time.Now()}
	mode := "brief: every fault kind once (SOAK_DURATION unset)"
	if set.duration > 0 {
		mode = "for " + set.duration.String()
	}
	t.Logf("soak: seed %d (SOAK_SEED=%d replays this sequence of faults), %s", set.seed, set.seed, mode)
	guard := set.duration + soakHangGuard
	hung := time.AfterFunc(guard, func() {
		debug.SetTraceback("all")
		panic(fmt.Sprintf("soak: still running %v after it began (seed %d, fault %d): hung", guard, set.seed, s.index))
	})
	t.Cleanup(func() { hung.Stop() })

	dir := t.TempDir()
	s.disk = newJournalDisk(t, dir)
	t.Logf("soak: the journal is on %s at %s", s.disk.kind, s.disk.mnt)
	// Small segments: a full disk is met at the next segment, a few
	// steps away.
	s.r = newRig(t, rigOptions{mosquitto: true, action: "halt", journal: s.disk.JournalDir(), segment: "16KiB"})
	s.cfg = s.r.plan.Config
	s.keep(s.r.sup, s.r.mosq.p, s.r.board)
	s.work = newWorkload(s.r, set.seed)
	t.Cleanup(s.work.close) // before the agents disconnect (cleanups run last first)
	s.probe = s.r.newAgent("soak-probe")
	s.probe.timeout = workerReplyTimeout

	for _, k := range faultKinds() {
		if len(set.kinds) == 0 || slices.Contains(set.kinds, k.name) {
			s.kinds = append(s.kinds, k)
		}
	}
	for _, k := range s.kinds {
		s.stats[k.name] = &faultStats{}
		if why := k.unavailable(s); why != "" {
			t.Logf("soak: %s NOT EXERCISED on this machine: %s", k.name, why)
		}
	}
	for _, i := range s.rng.Perm(len(s.kinds)) {
		s.order = append(s.order, s.kinds[i])
	}
	return s
}

// next picks the next fault: the first round in its shuffled order, then
// at random until the duration has passed. A kind this machine cannot
// inject is never picked (the report says so).
func (s *soak) next() *faultKind {
	for len(s.order) > 0 {
		k := s.order[0]
		s.order = s.order[1:]
		if k.unavailable(s) == "" {
			return k
		}
	}
	if s.set.duration == 0 || time.Since(s.began) >= s.set.duration {
		return nil
	}
	var can []*faultKind
	for _, k := range s.kinds {
		if k.unavailable(s) == "" {
			can = append(can, k)
		}
	}
	return can[s.rng.IntN(len(can))]
}

// logf logs a line of the soak's history.
func (s *soak) logf(format string, args ...any) {
	s.t.Helper()
	line := fmt.Sprintf("%7.1fs ", time.Since(s.began).Seconds()) + fmt.Sprintf(format, args...)
	s.history = append(s.history, line)
	s.t.Log("soak: " + line)
}

// violate records an invariant violation of the fault being run.
func (s *soak) violate(k *faultKind, format string, args ...any) {
	s.t.Helper()
	v := fmt.Sprintf("fault #%d (%s): ", s.index, k.name) + fmt.Sprintf(format, args...)
	s.violations = append(s.violations, v)
	s.stats[k.name].violations++
	s.logf("VIOLATION %s", v)
}

// finish prints the report and, if the soak failed, keeps the evidence.
func (s *soak) finish() {
	t := s.t
	t.Log("soak report\n" + s.report())
	if len(s.violations) == 0 && !t.Failed() {
		return
	}
	keep := s.keepEvidence()
	for _, v := range s.violations {
		t.Errorf("soak invariant violated: %s", v)
	}
	tailOf := ""
	if s.r != nil && s.r.sup != nil {
		tailOf = tail(s.r.sup.out.String(), 4000)
	}
	dur := "unset"
	if s.set.duration > 0 {
		dur = s.set.duration.String()
	}
	t.Errorf("soak failed: %d violations in %d faults; replay with SOAK_SEED=%d SOAK_DURATION=%s; evidence (journal, logs, history) kept in %s\nthe last supervisor's log, last 4000 bytes:\n%s",
		len(s.violations), s.faults(), s.set.seed, dur, keep, tailOf)
}

// report is the per-fault table.
func (s *soak) report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, ran %v, %d faults, journal on %s\n", s.set.seed, time.Since(s.began).Round(time.Second), s.faults(), s.disk.kind)
	fmt.Fprintf(&b, "%-15s %8s %10s %6s  %s\n", "fault", "injected", "violations", "halts", "recovered (p50 / max)")
	for _, k := range s.kinds {
		st := s.stats[k.name]
		if why := k.unavailable(s); why != "" {
			fmt.Fprintf(&b, "%-15s %8s %10s %6s  NOT EXERCISED: %s\n", k.name, "-", "-", "-", why)
			continue
		}
		rec := "-"
		if n := len(st.recovered); n > 0 {
			d := slices.Clone(st.recovered)
			slices.Sort(d)
			rec = fmt.Sprintf("%v / %v", d[n/2].Round(10*time.Millisecond), d[n-1].Round(10*time.Millisecond))
		}
		fmt.Fprintf(&b, "%-15s %8d %10d %6d  %s\n", k.name, st.injected, st.violations, st.halts, rec)
	}
	if s.work != nil {
		out := s.work.outcomes()
		var keys []string
		for k := range out {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s %d", k, out[k]))
		}
		fmt.Fprintf(&b, "workers: %s\n", strings.Join(parts, ", "))
	}
	if s.startInDoubt > 0 {
		fmt.Fprintf(&b, "agent faults' controllers whose step went in doubt as they started (unwound clean, started again; the log names each): %d\n", s.startInDoubt)
	}
	if s.betweenHalts > 0 {
		fmt.Fprintf(&b, "halts found before a fault was injected (none of the faults': the log names each): %d\n", s.betweenHalts)
	}
	fmt.Fprintf(&b, "violations: %d, harness errors: %d\n", len(s.violations), len(s.harness))
	for _, h := range s.harness {
		fmt.Fprintf(&b, "harness error %s\n", h)
	}
	return b.String()
}

// keep notes the processes whose logs the evidence holds: the
// supervisors, the brokers and the board. A failed soak does not also log
// them (startProc would), which would bury its report.
func (s *soak) keep(ps ...*proc) {
	for _, p := range ps {
		p.quiet = true
		switch p {
		case s.r.sup:
			s.daemons = append(s.daemons, p)
		case s.r.mosq.p:
			s.brokers = append(s.brokers, p)
		}
	}
}

// faults is how many faults were injected.
func (s *soak) faults() int {
	n := 0
	for _, st := range s.stats {
		n += st.injected
	}
	return n
}

// keepEvidence copies what a failure needs to be understood out of the
// test's temporary directory: the journal, every supervisor's log, the
// board's and the broker's, and the soak's history.
func (s *soak) keepEvidence() string {
	keep, err := os.MkdirTemp("", "saga-soak-")
	if err != nil {
		return "nowhere (" + err.Error() + ")"
	}
	write := func(name, text string) { os.WriteFile(filepath.Join(keep, name), []byte(text), 0o644) }
	write("report.txt", s.report()+"\n"+strings.Join(s.violations, "\n")+"\n")
	write("history.txt", strings.Join(s.history, "\n")+"\n")
	for i, d := range s.daemons {
		write(fmt.Sprintf("supervisor-%02d.log", i+1), d.out.String())
	}
	for i, b := range s.brokers {
		write(fmt.Sprintf("mosquitto-%02d.log", i+1), tail(b.out.String(), 4<<20))
	}
	if s.r != nil {
		if s.r.board != nil {
			write("sim-mcu.log", s.r.board.out.String())
		}
		write("sim.yaml", readOr(s.r.cfgPath))
	}
	if s.disk != nil {
		if err := os.CopyFS(filepath.Join(keep, "journal"), os.DirFS(s.disk.JournalDir())); err != nil {
			write("journal.error.txt", fmt.Sprintf("copying the journal from %s: %v\n", s.disk.JournalDir(), err))
		}
	}
	return keep
}

func readOr(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
