package modelcheck

import (
	"cmp"
	"hash/fnv"
	"math/rand/v2"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Invariants are what every case is checked against, in the words the
// command prints.
var Invariants = []string{
	"intent durable before every effect: each step's INTENT and each compensation's COMP_INTENT survives a power cut taken at the moment its effect starts (first-touch durability: a saga's first INTENT on each actuator)",
	"no effect after a refusal: a command over the limits, on an ended saga or after a halt is refused with its code and no driver is called",
	"no effect after a halt: no step or compensation starts once the engine is halted, in the run or in a recovery of a journal that latched halt",
	"LIFO: within a saga, compensations run last step first, across crashes and recoveries",
	"no step compensated twice: a step's bucket is journaled once, and no recovery moves a step whose bucket was durable",
	"retries bounded: at most 1+retries known-failed compensation attempts per step",
	"one bucket per step in every RollbackReport",
	"clean iff every step compensated, in every report and in the journal's verdicts",
	"in-doubt steps are compensated, unless a halt, an actuator with no undo or that step's own failing compensation prevents it",
	"crash-free cases: every outcome, bucket and actuator position equals an independent model of the case",
	"after recovery every actuator is where the journal says (its prior, its target, its safe value), or the journal reports it partial or detached — never silently elsewhere",
	"the journal verifies after every crash (at most a torn tail) and after every recovery (intact), and replay's rules accept every record in it (what verify checks)",
	"no saga open or half-unwound after recovery",
	"two sagas: one agent's lease expiry unwinds only its own actuators; the other's commit stands",
	"zones: no step or compensation moves an actuator of a halted zone (in the run, or in a recovery of a journal that ends with the zone halted); only its safe policy does",
	"zones: a zone halt unwinds exactly the sagas that touch the zone (whole: their other steps compensated), refuses steps on the zone with ZONE_HALTED, never latches the full halt, and the saga outside the zone keeps stepping and commits",
	"zones: the zone's halt rebuilt from the journal (after every power cut, in the run or in recovery) is the journal's last word on it, and a crash-free zone case ends where an independent model puts every actuator",
	"halts at a sync: every invariant above holds with a full halt, or a zone's halt, latched from another goroutine inside every journal sync of the run (the engine's lock released), with the disk alive and with it dying there, and after the restart that follows",
	"no RollbackReport names a saga whose BEGIN is not durable when the report is delivered (after a restart that id would be handed out again)",
	"a saga id is handed out once: Begin returns only ids whose BEGIN is durable and that no report has ended, and after a restart Begin hands out none an agent was given or a report named before",
	"a saga whose commit was acknowledged is never named by a RollbackReport, in any process; a reported saga never commits",
	"a halt applied leaves no saga open (a halt ends every open saga; the journal's own failure's halt included)",
	"after the restart that follows a halt at a sync, the rebuilt engine believes every actuator where the engine that wrote the journal believed it (when that engine closed with no saga open and the disk alive)",
}

// Config bounds a check.
type Config struct {
	MaxSteps int // steps per case, 1..16
	Sagas    int // 1: single sagas; 2: also two interleaved sagas
	// AllRecoveryCrashes cuts the power at every mutating call of each
	// recovery; otherwise at one call per crash case, chosen by the case's
	// hash, so that the population covers every position.
	AllRecoveryCrashes bool
	Workers            int // 0: GOMAXPROCS
	// FirstTouch also runs every case in first-touch durability.
	FirstTouch bool
	// NoHaltSync leaves out the halts latched inside a journal sync
	// (HaltCases); HaltSyncSteps, if set, lays them only on runs of at
	// most that many steps in all.
	NoHaltSync    bool
	HaltSyncSteps int
	// Progress, when set, is called every ProgressEvery (default 500ms)
	// from a goroutine of its own while the check runs, never from a
	// worker: a slow terminal cannot slow the check.
	Progress      func(Progress)
	ProgressEvery time.Duration
}

// Progress is how far a check has come. The cases a crash-free case
// spawns (a power cut before each of its file-system calls, and cuts in
// the recoveries) are only known once it has run, so the whole is
// measured in crash-free cases: they are run in an order that mixes
// lengths and kinds (shuffled with a fixed seed), so the share done so far
// is a fair sample and ETA a fair guess.
type Progress struct {
	Cases      int64 // cases run so far, of every kind
	Violations int64 // of them, cases that violate an invariant
	BaseDone   int   // crash-free cases finished, with all their crash cases
	BaseTotal  int
	Elapsed    time.Duration
}

// Rate is cases per second so far.
func (p Progress) Rate() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Cases) / p.Elapsed.Seconds()
}

// ETA is the time left if the rest goes as the share done so far went;
// ok is false until there is a share to judge by.
func (p Progress) ETA() (left time.Duration, ok bool) {
	if p.BaseDone == 0 || p.BaseTotal == 0 {
		return 0, false
	}
	per := float64(p.Elapsed) / float64(p.BaseDone)
	return time.Duration(per * float64(p.BaseTotal-p.BaseDone)), true
}

// Result counts what a check ran and found.
type Result struct {
	Base, Crash, RecoveryCrash, TwoSaga  int64 // cases of each kind
	Zone                                 int64 // crash-free zone cases (two sagas, a zone halt)
	CrashesStruck, RecoveryCrashesStruck int64
	// FromCheckpoint counts the recoveries (after a cut, a cut in
	// recovery included) that started from a checkpoint.
	FromCheckpoint int64
	// CrashEquivalent counts crash points not run because an earlier cut
	// of the same case leaves the same durable journal and world.
	CrashEquivalent int64
	// HaltSync counts the cases that latch a halt from inside a journal
	// sync (HaltCases), HaltFired those in which it fired (the rest found
	// the engine already halted), HaltBase the runs of two committing
	// sagas the zone's halts at a sync are laid on.
	HaltSync, HaltFired, HaltBase int64
	Cases                         int64
	Failed                        []*Outcome // sorted by case id order
	Took                          time.Duration
}

// Check enumerates every case within the bound and runs them in parallel.
// Each crash-free case is run first to count its file-system calls; then
// the power is cut before each of them in turn (and once past the end),
// and each of those runs is recovered, also with a power cut during the
// recovery.
func Check(cfg Config) *Result {
	start := time.Now()
	workers := cfg.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	base := BaseCases(cfg.MaxSteps)
	if cfg.Sagas >= 2 {
		base = append(base, TwoSagaCases(cfg.MaxSteps)...)
		base = append(base, ZoneCases(cfg.MaxSteps)...)
		if !cfg.NoHaltSync {
			base = append(base, TwoSagaCommitCases(cfg.MaxSteps)...)
		}
	}
	if cfg.FirstTouch {
		for _, c := range base[:len(base):len(base)] {
			c.FirstTouch = true
			base = append(base, c)
		}
	}
	// A fixed shuffle: results do not depend on the order (failures are
	// sorted below), but progress does (see Progress).
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(base), func(i, j int) { base[i], base[j] = base[j], base[i] })
	res := &Result{}
	var mu sync.Mutex
	var done, failed atomic.Int64
	var baseDone atomic.Int32
	record := func(o *Outcome, kind *int64) {
		done.Add(1)
		mu.Lock()
		*kind++
		if !o.OK() {
			res.Failed = append(res.Failed, o)
			failed.Add(1)
		}
		mu.Unlock()
	}
	if cfg.Progress != nil {
		every := cmp.Or(cfg.ProgressEvery, 500*time.Millisecond)
		stop := make(chan struct{})
		stopped := make(chan struct{})
		defer func() { close(stop); <-stopped }()
		go func() {
			defer close(stopped)
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					cfg.Progress(Progress{Cases: done.Load(), Violations: failed.Load(),
						BaseDone: int(baseDone.Load()), BaseTotal: len(base), Elapsed: time.Since(start)})
				}
			}
		}()
	}
	jobs := make(chan Case)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range jobs {
				o := Run(c)
				if !cfg.NoHaltSync && (cfg.HaltSyncSteps == 0 || c.Steps+c.Steps2 <= cfg.HaltSyncSteps) {
					for _, hc := range HaltCases(c, o.Syncs) {
						ho := Run(hc)
						record(ho, &res.HaltSync)
						if ho.HaltFired {
							atomicAdd(&mu, &res.HaltFired)
						}
					}
				}
				if c.commitBoth() {
					// Laid on for the halts at a sync only.
					record(o, &res.HaltBase)
					baseDone.Add(1)
					continue
				}
				if c.Zone > 0 {
					record(o, &res.Zone)
				} else if c.Sagas == 2 {
					record(o, &res.TwoSaga)
				} else {
					record(o, &res.Base)
				}
				seen := map[crashClass]bool{}
				for cut := 1; cut <= o.Ops+1; cut++ {
					if cl := o.CrashClass[cut-1]; seen[cl] {
						atomicAdd(&mu, &res.CrashEquivalent)
						continue
					} else {
						seen[cl] = true
					}
					cc := c
					cc.Crash = cut
					outs := RunRecoveries(cc, func(first *Outcome) []int {
						var cuts []int
						if cfg.AllRecoveryCrashes {
							for k := 1; k <= first.RecoveryOps; k++ {
								cuts = append(cuts, k)
							}
						} else if first.RecoveryOps > 0 {
							cuts = []int{1 + int(hash(cc.String())%uint64(first.RecoveryOps))}
						}
						return cuts
					})
					record(outs[0], &res.Crash)
					if outs[0].Crashed {
						atomicAdd(&mu, &res.CrashesStruck)
					}
					for _, ro := range outs {
						if ro.FromCheckpoint {
							atomicAdd(&mu, &res.FromCheckpoint)
						}
					}
					for _, ro := range outs[1:] {
						record(ro, &res.RecoveryCrash)
						if ro.RecoveryCrashed {
							atomicAdd(&mu, &res.RecoveryCrashesStruck)
						}
					}
				}
				baseDone.Add(1)
			}
		}()
	}
	for _, c := range base {
		jobs <- c
	}
	close(jobs)
	wg.Wait()
	res.Cases = done.Load()
	sort.Slice(res.Failed, func(i, j int) bool { return res.Failed[i].Case.String() < res.Failed[j].Case.String() })
	res.Took = time.Since(start)
	return res
}

func atomicAdd(mu *sync.Mutex, v *int64) {
	mu.Lock()
	*v++
	mu.Unlock()
}

func hash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}
