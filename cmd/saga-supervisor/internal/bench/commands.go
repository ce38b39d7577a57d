package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
)

// subcommand is one bench of `saga-supervisor bench`.
type subcommand struct {
	name    string
	summary string // one line, for the list of benches
	run     func(args []string, w io.Writer) error
}

// subcommands are the benches, the default (disk) first. Set in init:
// their usages list them.
var subcommands []subcommand

func init() {
	subcommands = []subcommand{
		{"disk", "what durability costs on this disk: journal, group commit, engine step, gate and recovery against the fsync floor (the default)", runDisk},
		{"journal", "the journal over a robot's lifetime: restart-to-ready with and without checkpoints, junk's journal bytes per hour, the step with the checkpointer", runJournal},
		{"mqtt", "the MQTT front door: round trips beside the bare broker's echo and the local step, halt latency under a flood, durable steps/s of many agents", runMQTT},
		{"rss", "the daemon's resident memory idle, at the peak of a flood through its embedded broker, and after it (Linux)", runRSS},
		{"pi", "a Pi-class profile: the daemon as a process on a CPU quota (cgroup) and a slow fsync, beside the whole machine: step, halts under a flood, leases, restart, memory (Linux, root)", runPi},
	}
}

// Run is `saga-supervisor bench [disk|journal|mqtt|rss] [flags]`. With no
// subcommand, or flags first, it is disk, taking the mode flags of the
// single command bench was before (--mqtt, --broker, --journal, --rss) as
// deprecated aliases of the subcommands.
func Run(args []string, w io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return runFlagsFirst(args, w)
	}
	for _, s := range subcommands {
		if s.name == args[0] {
			return s.run(args[1:], w)
		}
	}
	if args[0] == launchCmd { // bench pi's launcher, internal
		return runLaunch(args[1:], w)
	}
	if args[0] == "help" {
		fmt.Fprint(w, subcommandList())
		return nil
	}
	return cli.Exit(2, "unknown bench %q\n%s", args[0], strings.TrimSuffix(subcommandList(), "\n"))
}

// subcommandList lists the subcommands, for usages and errors.
func subcommandList() string {
	var b strings.Builder
	b.WriteString("usage: saga-supervisor bench [disk|journal|mqtt|rss|pi] [flags] (saga-supervisor bench NAME -h for its flags)\n\n")
	for _, s := range subcommands {
		fmt.Fprintf(&b, "  %-8s %s\n", s.name, s.summary)
	}
	return b.String()
}

// deprecatedModes are the mode flags of the single command bench was, by
// the subcommand each now names.
var deprecatedModes = map[string]string{"mqtt": "mqtt", "broker": "mqtt", "journal": "journal", "rss": "rss"}

// runFlagsFirst runs bench with no subcommand: disk, unless a deprecated
// mode flag names another bench, which then runs (after one line on
// stderr naming its new form) with the other arguments as they were.
func runFlagsFirst(args []string, w io.Writer) error {
	rest, modes, via := legacyModes(args)
	if len(modes) == 0 {
		return runDisk(rest, w)
	}
	if len(modes) > 1 {
		return cli.Exit(2, "%s name different benches: one at a time (saga-supervisor bench journal|mqtt|rss)", strings.Join(via, " and "))
	}
	fmt.Fprintf(os.Stderr, "saga-supervisor bench: %s is deprecated: use saga-supervisor bench %s\n",
		via[0], strings.Join(append([]string{modes[0]}, rest...), " "))
	return Run(append([]string{modes[0]}, rest...), w)
}

// legacyModes finds the deprecated mode flags among the flags at the start
// of args (as package flag reads them: up to the first argument that is
// not a flag, or "--"). It returns args without them — --broker, a flag of
// bench mqtt, stays when it names a broker — the subcommands they name
// (each once, in order) and the flags that named them. A mode flag set
// false (--mqtt=false), or --broker set empty, names nothing and is
// dropped, as it did nothing before; one set to what is no bool is left
// for the bench to refuse.
func legacyModes(args []string) (rest, modes, via []string) {
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" || arg == "-" || !strings.HasPrefix(arg, "-") {
			rest = append(rest, args[i:]...)
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		on := true
		switch name {
		case "mqtt", "journal", "rss":
			if hasValue {
				var err error
				if on, err = strconv.ParseBool(value); err != nil {
					rest = append(rest, arg) // for the bench to refuse
					continue
				}
			}
		case "broker":
			if !hasValue && i+1 < len(args) {
				i++
				value = args[i]
			}
			if on = value != ""; on {
				rest = append(rest, "--broker", value)
			}
		case "json", "h", "help":
			rest = append(rest, arg)
			continue
		default:
			rest = append(rest, arg)
			if !hasValue && i+1 < len(args) { // every other flag takes a value
				i++
				rest = append(rest, args[i])
			}
			continue
		}
		if mode := deprecatedModes[name]; on && !slices.Contains(modes, mode) {
			modes, via = append(modes, mode), append(via, "--"+name)
		}
	}
	return rest, modes, via
}

// newFlags is the flag set of bench name, with the flags every bench
// takes: --dir and --json. Its usage (-h) says what the bench measures.
func newFlags(name, about string) (fs *flag.FlagSet, dir *string, asJSON *bool) {
	fs = cli.NewFlags("bench " + name)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "usage: saga-supervisor bench %s [flags]\n\n%s\n\nflags:\n", name, about)
		fs.PrintDefaults()
		if name == "disk" {
			fmt.Fprintf(out, "\n%s", subcommandList())
		}
	}
	dir = fs.String("dir", "", "measure on the disk holding this existing directory; bench works in a new subdirectory and removes it (default: "+os.TempDir()+")")
	asJSON = fs.Bool("json", false, "print the results as one JSON object")
	return fs, dir, asJSON
}

// parse parses a bench's arguments: -h is flag.ErrHelp, anything it cannot
// take is exit 2.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return cli.Exit(2, "%v", err)
	}
	if fs.NArg() > 0 {
		return cli.Exit(2, "unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// place is where a bench measures: a new directory, removed afterwards,
// the disk it is on, and a warning if that disk flatters.
type place struct {
	dir, disk, warning string
}

// measureIn runs body in a new directory under parent (the temporary
// directory if ""), removing it afterwards. The first SIGINT or SIGTERM
// cancels body's context, so that it stops after the sample in progress
// and the directory is removed; a second one ends the process at once.
func measureIn(parent string, body func(ctx context.Context, at place) error) (err error) {
	if parent == "" {
		parent = os.TempDir()
	}
	if st, err := os.Stat(parent); err != nil || !st.IsDir() {
		return cli.Exit(2, "cannot measure in %s: %v", parent, cli.ErrOr(err, "not a directory"))
	}
	dir, err := os.MkdirTemp(parent, "saga-bench-")
	if err != nil {
		return cli.Exit(2, "cannot measure in %s: %v", parent, err)
	}
	defer func() {
		if rerr := os.RemoveAll(dir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("removing %s: %w", dir, rerr))
		}
	}()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		select {
		case s := <-sigs:
			signal.Stop(sigs)
			fmt.Fprintf(os.Stderr, "\n%v: stopping after the current sample and removing %s (again to quit at once)\n", s, dir)
			cancel()
		case <-ctx.Done():
		}
	}()

	at := place{dir: dir}
	var fstype string
	fstype, at.disk = diskOf(dir)
	if fstype == "tmpfs" || fstype == "ramfs" {
		// Debian 13 and others mount /tmp in memory: fsync costs nothing
		// there, and every figure would flatter the journal.
		at.warning = fmt.Sprintf("%s is in memory (%s): fsync costs nothing there; measure with --dir on the disk the journal will live on", dir, fstype)
	}
	return body(ctx, at)
}

// runDisk is `bench disk`, the default.
func runDisk(args []string, w io.Writer) error {
	fs, dir, asJSON := newFlags("disk", "What durability costs on this disk: the fsync floor, then the journal's append and group\n"+
		"commit, the engine's step (every-step and first-touch), the gate's refusal and recovery of a\n"+
		"10k-record journal, as p50 and p99 and as ratios to the floor's p50.")
	n := fs.Int("n", 2000, "samples per measurement")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *n < 1 {
		return cli.Exit(2, "--n must be at least 1")
	}
	return measureIn(*dir, func(ctx context.Context, at place) error {
		prog := newProgress()
		defer prog("")
		start := time.Now()
		res := &diskResult{Dir: at.dir, Disk: at.disk, Warning: at.warning, N: *n, RecordBytes: recordSize}
		return report(ctx, w, *asJSON, start, nil, func() error { return measureAll(ctx, res, prog) },
			&res.TookNs, res, func() { printBench(w, res) })
	})
}

// runJournal is `bench journal`.
func runJournal(args []string, w io.Writer) error {
	fs, dir, asJSON := newFlags("journal", "The journal over a robot's lifetime: restart-to-ready at --records records with and without\n"+
		"checkpoints, journal bytes per hour under junk floods at the default rate limit, and the\n"+
		"durable step with the checkpointer off and on.")
	n := fs.Int("n", 2000, "samples of the durable step, with the checkpointer off and on")
	recordsFlag := fs.String("records", "10000,100000,1000000", "the journal sizes restart-to-ready is measured at")
	junkTime := fs.Duration("junk-time", 3*time.Second, "the length of each junk flood")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *n < 1 {
		return cli.Exit(2, "--n must be at least 1")
	}
	sizes, err := parseSizes(*recordsFlag)
	if err != nil {
		return cli.Exit(2, "%v", err)
	}
	if *junkTime <= 0 {
		return cli.Exit(2, "--junk-time must be positive")
	}
	return measureIn(*dir, func(ctx context.Context, at place) error {
		prog := newProgress()
		defer prog("")
		start := time.Now()
		res := &JournalResult{Dir: at.dir, Disk: at.disk, Warning: at.warning}
		opt := journalOptions{sizes: sizes, junkTime: *junkTime, n: *n}
		return report(ctx, w, *asJSON, start, prog, func() error { return measureJournal(ctx, res, opt, prog) },
			&res.TookNs, res, func() { printJournal(w, res) })
	})
}

// runMQTT is `bench mqtt`.
func runMQTT(args []string, w io.Writer) error {
	fs, dir, asJSON := newFlags("mqtt", "The MQTT front door: round trips beside the bare broker's echo and the local step, halt\n"+
		"latency under a flood, durable steps/s of many agents, lease expiries; the supervisor runs in\n"+
		"this process, started by daemon.Start as `run` starts it.")
	n := fs.Int("n", 2000, "round-trip samples of each kind")
	broker := fs.String("broker", "", "an external broker's URL, e.g. tcp://127.0.0.1:1883 (default: the embedded broker)")
	halts := fs.Int("halts", 200, "halt samples quiet, and as many under the flood")
	agents := fs.Int("agents", 64, "agents stepping at once for durable steps/s")
	expiries := fs.Int("expiries", 20, "lease expiries measured quiet, as many while 8 agents step durably, and as many again with every journal fsync slowed by --slow-fsync")
	slowFsync := fs.Duration("slow-fsync", 5*time.Millisecond, "the delay added to every journal fsync in the last expiry condition, a slow SD card's (0: leave that condition out)")
	agentsTime := fs.Duration("agents-time", 2*time.Second, "length of each of the four rounds of durable steps/s (two through MQTT, two in-process)")
	floodRate := fs.Float64("flood-rate", 4000, "requests/s the flooding agent offers (0: as fast as its client takes them)")
	haltTopic := fs.String("halt-topic", "estop", "where the halts are published: estop (the agent's e-stop topic, read on the supervisor's own connection for it, as client.Halt does) or cmd (its command topic)")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case *n < 1:
		return cli.Exit(2, "--n must be at least 1")
	case *halts < 1:
		return cli.Exit(2, "--halts must be at least 1")
	case *agents < 1 || *agents > 1000:
		return cli.Exit(2, "--agents must be 1..1000")
	case *agentsTime <= 0:
		return cli.Exit(2, "--agents-time must be positive")
	case !(*floodRate >= 0):
		return cli.Exit(2, "--flood-rate must be 0 or more")
	case *haltTopic != "estop" && *haltTopic != "cmd":
		return cli.Exit(2, "--halt-topic must be estop or cmd")
	}
	return measureIn(*dir, func(ctx context.Context, at place) error {
		prog := newProgress()
		defer prog("")
		start := time.Now()
		res := &FrontDoorResult{Dir: at.dir, Disk: at.disk, Warning: at.warning, N: *n, Halts: *halts}
		opt := frontDoorOptions{broker: *broker, n: *n, halts: *halts, expiries: *expiries, slowFsync: *slowFsync, agents: *agents, agentsTime: *agentsTime, floodRate: *floodRate, haltTopic: *haltTopic}
		return report(ctx, w, *asJSON, start, prog, func() error { return measureFrontDoor(ctx, res, opt, prog) },
			&res.TookNs, res, func() { printFrontDoor(w, res) })
	})
}

// runRSS is `bench rss`.
func runRSS(args []string, w io.Writer) error {
	fs, dir, asJSON := newFlags("rss", "The daemon's resident memory: idle, at the peak of a flood through its embedded broker, and\n"+
		"after the flood; the daemon runs as a process of its own (Linux).")
	var daemons stringsFlag
	fs.Var(&daemons, "daemon", "a saga-supervisor binary to measure (repeat to compare builds side by side; default: this one)")
	settle := fs.Duration("settle", rssDefaultSettle, "the wait after the daemon is ready before idle is read")
	floodTime := fs.Duration("flood-time", rssDefaultFlood, "the flood's length")
	after := fs.Duration("after", rssDefaultAfter, "how long the daemon is watched after the flood")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *settle < 0 || *floodTime <= 0 || *after < time.Second {
		return cli.Exit(2, "--settle must be 0 or more, --flood-time positive and --after at least 1s")
	}
	if len(daemons) == 0 {
		self, err := os.Executable()
		if err != nil {
			return cli.Exit(2, "this binary's path: %v (name one with --daemon)", err)
		}
		daemons = append(daemons, self)
	}
	for i, d := range daemons {
		abs, err := filepath.Abs(d)
		if err != nil {
			return cli.Exit(2, "--daemon %s: %v", d, err)
		}
		if st, err := os.Stat(abs); err != nil || st.IsDir() {
			return cli.Exit(2, "--daemon %s: %s", d, cli.ErrOr(err, "a directory"))
		}
		daemons[i] = abs
	}
	return measureIn(*dir, func(ctx context.Context, at place) error {
		prog := newProgress()
		defer prog("")
		start := time.Now()
		res := &RSSResult{Dir: at.dir, SettleNs: int64(*settle), FloodNs: int64(*floodTime), AfterNs: int64(*after),
			FloodClients: rssFloodClients, FloodWindow: rssFloodWindow, FloodBigBytes: rssBigBytes, FloodBigEvery: rssBigEvery, IdleClients: rssIdleClients}
		opt := rssOptions{daemons: daemons, settle: *settle, flood: *floodTime, after: *after}
		return report(ctx, w, *asJSON, start, prog, func() error { return measureRSS(ctx, res, opt, prog) },
			&res.TookNs, res, func() { printRSS(w, res) })
	})
}

// runPi is `bench pi`.
func runPi(args []string, w io.Writer) error {
	fs, dir, asJSON := newFlags("pi", "A Raspberry Pi-class profile: the daemon (`run`, its embedded broker in it) as a process of its own,\n"+
		"held to a fraction of a CPU by a cgroup's CFS quota over a short period, every fsync it makes slowed to an\n"+
		"SD card's, beside the same daemon on the whole machine in the same run: the durable step, halts on the\n"+
		"command and e-stop topics under one agent's flood with another's lease held, lease expiries, restart on a\n"+
		"big journal, idle and peak memory. The agents run in this process, outside the quota. Needs Linux and root\n"+
		"(or --cgroup-parent, a delegated cgroup); without a cgroup it fails rather than measure unconfined.")
	var daemons stringsFlag
	fs.Var(&daemons, "daemon", "a saga-supervisor binary to measure (repeat to compare builds side by side, alternating; default: this one)")
	cpus := fs.String("cpu", "0.25,0.5", "CPU quotas to measure beside the whole machine, in CPUs (none: the whole machine only)")
	period := fs.Duration("period", piDefaultPeriod, "the CFS period the quota is spent over")
	delay := fs.String("fsync-delay", "2ms..10ms", "added to every fsync and fdatasync of the daemon, a duration or a uniform range (0: none)")
	rounds := fs.Int("rounds", 2, "rounds: every condition and daemon once each, in rotating order")
	steps := fs.Int("steps", piDefaultSteps, "durable steps timed per run")
	halts := fs.Int("halts", piDefaultHalts, "halts per topic per run, each under a flood")
	floodSteps := fs.Int("flood-steps", piDefaultFlood, "steps in each flood (the halt is sent when half are out)")
	expiries := fs.Int("expiries", piDefaultExpiries, "lease expiries per run, quiet and as many under a flood")
	records := fs.Uint64("records", piDefaultRecords, "records in the journal restarts are timed on (0: no restarts)")
	weight := fs.Int("weight", 10000, "the CPU weight of the daemon's cgroup and of the agents' (this process moves into one of its own), on cgroup v2's\n"+
		"scale, 1..10000: every other cgroup's default is 100, so the default keeps a shared machine's other work from deciding the figures")
	parent := fs.String("cgroup-parent", "", "make the cgroups under this cgroup directory (default: the cpu hierarchy's root, or this process's v1 cpu cgroup)")
	settle := fs.Duration("settle", piDefaultSettle, "the wait after ready before idle memory is read")
	profile := fs.String("profile", "", "write each daemon's CPU profile and execution trace of the halts under this directory (a daemon built with -tags saga_profile)")
	if err := parse(fs, args); err != nil {
		return err
	}
	opt := piOptions{period: *period, rounds: *rounds, steps: *steps, halts: *halts, floodSteps: *floodSteps,
		expiries: *expiries, records: *records, weight: *weight, cgroupParent: *parent, settle: *settle, profile: *profile}
	var err error
	if opt.cpus, err = parseCPUs(*cpus); err != nil {
		return cli.Exit(2, "%v", err)
	}
	if opt.delay, err = parseDelay(*delay); err != nil {
		return cli.Exit(2, "%v", err)
	}
	switch {
	case *period < time.Millisecond || *period > time.Second:
		return cli.Exit(2, "--period must be 1ms..1s")
	case *rounds < 1 || *steps < 1 || *halts < 1 || *expiries < 1:
		return cli.Exit(2, "--rounds, --steps, --halts and --expiries must be at least 1")
	case *floodSteps < 2:
		return cli.Exit(2, "--flood-steps must be at least 2")
	case *weight < 1 || *weight > 10000:
		return cli.Exit(2, "--weight must be 1..10000")
	case *settle < 0:
		return cli.Exit(2, "--settle must be 0 or more")
	}
	self, err := os.Executable()
	if err != nil {
		return cli.Exit(2, "this binary's path: %v", err)
	}
	opt.launcher = self
	if len(daemons) == 0 {
		daemons = append(daemons, self)
	}
	for i, d := range daemons {
		abs, err := filepath.Abs(d)
		if err != nil {
			return cli.Exit(2, "--daemon %s: %v", d, err)
		}
		if st, err := os.Stat(abs); err != nil || st.IsDir() {
			return cli.Exit(2, "--daemon %s: %s", d, cli.ErrOr(err, "a directory"))
		}
		if slices.Contains(daemons[:i], abs) {
			return cli.Exit(2, "--daemon %s: named twice", d)
		}
		daemons[i] = abs
	}
	opt.daemons = daemons
	return measureIn(*dir, func(ctx context.Context, at place) error {
		prog := newProgress()
		defer prog("")
		start := time.Now()
		res := &PiResult{Dir: at.dir, Disk: at.disk, Warning: at.warning, PeriodNs: int64(opt.period), Weight: opt.weight,
			FsyncDelay: opt.delay.String(), CPUs: opt.cpus, Daemons: opt.daemons, Rounds: opt.rounds, Steps: opt.steps,
			Halts: opt.halts, FloodSteps: opt.floodSteps, Expiries: opt.expiries, Records: opt.records}
		return report(ctx, w, *asJSON, start, prog, func() error { return measurePi(ctx, res, opt, prog) },
			&res.TookNs, res, func() { printPi(w, res) })
	})
}
