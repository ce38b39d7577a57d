// Package bench is `saga-supervisor bench`, measurements on the robot's own
// computer: disk (the default), what durability costs on this disk
// (journal, group commit, engine step, gate and recovery against the fsync
// floor); journal, the journal over a robot's lifetime (restart-to-ready,
// junk's bytes per hour, checkpoints); mqtt, what the MQTT front door adds
// (round trips beside the bare broker's echo, halt latency under a flood,
// durable steps/s of many agents, lease expiries); rss, the daemon's
// resident memory idle, under a flood and after it.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim"
	"github.com/saga-supervisor/saga-supervisor/internal/latency"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/recovery"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// bench answers "what will durability cost me on this disk?" on the robot's
// own computer. It measures, in one process and on the disk of one
// directory, the same things as the wal and rollback benchmarks: the fsync
// floor first, then the journal and the engine, each as p50 and p99 of
// individually timed operations and as ratios to the floor's p50. Absolute
// times drift between runs on a shared machine and differ a hundredfold
// between an SD card and an NVMe disk; the ratios much less.
//
// Warm-ups match the benchmarks (20 appends, 5 per group-commit goroutine,
// one step that takes the actuator), so the figures compare with `make bench`.

const (
	recordSize        = 200    // bytes of payload per journal record, as in the benchmarks
	appendWarmup      = 20     // untimed appends before journal append is timed
	groupWarmup       = 5      // untimed appends per goroutine before group commit is timed
	recoveryRuns      = 5      // recovery.Open runs; the median is reported
	recoveryTotal     = 10_000 // records in the journal recovery opens
	recoverySagaSteps = 4      // steps per saga in that journal: BEGIN, 4×(INTENT, APPLIED), COMMIT
	refusalValue      = 1000   // over the bench actuator's Max of 90: refused with LIMIT_MAX

	// driverTimeout bounds the sim servo's Set, which answers at once.
	// It is far above actuators.DefaultTimeout because the timeout is wall
	// time: on a loaded machine a thread descheduled for half a second
	// (seen on a 2-core VM running a build) would turn a sample into an
	// in-doubt step and an unwind, and end the bench. Such a stall shows in
	// p99 instead.
	driverTimeout = 10 * time.Second
)

// diskRow is one measurement. Ratios are nil where they mean nothing (no
// fsync is waited for). For the recovery row P50 is the median and P99 the
// slowest of its runs (nearest-rank p99 of 5 samples is the maximum).
type diskRow struct {
	Name      string   `json:"name"`
	Samples   int      `json:"samples"`
	P50       int64    `json:"p50_ns"`
	P99       int64    `json:"p99_ns"`
	P50xFloor *float64 `json:"p50_x_floor"`
	P99xFloor *float64 `json:"p99_x_floor"`

	// Extra fields, per row.
	FsyncsPerOp      *float64 `json:"fsyncs_per_op,omitempty"`      // journal batches (pwrite + fdatasync) per timed operation
	RecordsPerSec    float64  `json:"records_per_s,omitempty"`      // group commit: timed records / wall time
	RecordsPerFsync  float64  `json:"records_per_fsync,omitempty"`  // group commit: records per batch
	Records          uint64   `json:"records,omitempty"`            // recovery: records replayed in the first run
	JournalBytes     uint64   `json:"journal_bytes,omitempty"`      // recovery: bytes of record frames in the journal
	JournalFileBytes int64    `json:"journal_file_bytes,omitempty"` // recovery: size of its (preallocated) segment files
	Note             string   `json:"note,omitempty"`
}

type diskResult struct {
	Dir         string    `json:"dir"`
	Disk        string    `json:"disk,omitempty"`
	Warning     string    `json:"warning,omitempty"`
	N           int       `json:"n"`
	RecordBytes int       `json:"record_bytes"`
	Rows        []diskRow `json:"rows"`
	TookNs      int64     `json:"took_ns"`
}

// report runs a measurement and prints its result, as one JSON object or
// as text: an interruption is exit 130, and the time taken goes into took.
// prog, if set, clears the progress line before the result is printed.
func report(ctx context.Context, w io.Writer, asJSON bool, start time.Time, prog func(string),
	measure func() error, took *int64, res any, print func()) error {
	if err := measure(); err != nil {
		if ctx.Err() != nil {
			return cli.Exit(130, "interrupted")
		}
		return err
	}
	*took = int64(time.Since(start))
	if prog != nil {
		prog("")
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	print()
	return nil
}

// measureAll runs every measurement in order, each journal in its own
// subdirectory of res.Dir, removed when it is done.
func measureAll(ctx context.Context, res *diskResult, prog func(string)) error {
	n := res.N
	payload := make([]byte, recordSize)
	for i := range payload {
		payload[i] = byte(i) | 1
	}
	sub := func(name string) string { return filepath.Join(res.Dir, name) }

	prog("fsync floor")
	floor, err := latency.Floor(res.Dir, n, recordSize)
	if err != nil {
		return fmt.Errorf("fsync floor: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	floorP50 := floor.Percentile(0.5)
	row := func(name string, s latency.Samples, ratios bool) diskRow {
		r := diskRow{Name: name, Samples: len(s), P50: int64(s.Percentile(0.5)), P99: int64(s.Percentile(0.99))}
		if ratios && floorP50 > 0 {
			p50 := float64(r.P50) / float64(floorP50)
			p99 := float64(r.P99) / float64(floorP50)
			r.P50xFloor, r.P99xFloor = &p50, &p99
		}
		return r
	}
	res.Rows = append(res.Rows, row("fsync floor", floor, true))

	prog("journal append")
	lat, fsyncs, err := measureAppend(ctx, sub("append"), n, payload)
	if err != nil {
		return fmt.Errorf("journal append: %w", err)
	}
	r := row("journal append", lat, true)
	r.FsyncsPerOp = &fsyncs
	res.Rows = append(res.Rows, r)

	for _, g := range []int{16, 64} {
		name := fmt.Sprintf("group commit %d", g)
		prog(name)
		lat, perSec, perFsync, err := measureGroup(ctx, sub(fmt.Sprintf("group%d", g)), g, n, payload)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		r := row(name, lat, true)
		r.RecordsPerSec, r.RecordsPerFsync = perSec, perFsync
		res.Rows = append(res.Rows, r)
	}

	prog("engine step every-step")
	lat, fsyncs, _, err = measureSteps(ctx, sub("every-step"), rollback.EveryStep, n, false)
	if err != nil {
		return fmt.Errorf("engine step every-step: %w", err)
	}
	r = row("engine step every-step", lat, true)
	r.FsyncsPerOp = &fsyncs
	res.Rows = append(res.Rows, r)

	prog("engine step first-touch, gate (refusal)")
	lat, fsyncsFT, gate, err := measureSteps(ctx, sub("first-touch"), rollback.FirstTouch, n, true)
	if err != nil {
		return fmt.Errorf("engine step first-touch: %w", err)
	}
	r = row("engine step first-touch", lat, false)
	r.FsyncsPerOp = &fsyncsFT
	r.Note = "waits for no fsync"
	res.Rows = append(res.Rows, r)
	r = row("gate (refusal)", gate, false)
	r.Note = "LIMIT_MAX, nothing moved, REFUSED record not waited for"
	res.Rows = append(res.Rows, r)

	prog("recovery 10k records")
	rec, err := measureRecovery(ctx, sub("recovery"))
	if err != nil {
		return fmt.Errorf("recovery: %w", err)
	}
	res.Rows = append(res.Rows, rec)
	return nil
}

// measureAppend times n durable Appends on a fresh journal.
func measureAppend(ctx context.Context, dir string, n int, payload []byte) (latency.Samples, float64, error) {
	log, err := wal.Open(dir, wal.Options{})
	if err != nil {
		return nil, 0, err
	}
	defer os.RemoveAll(dir)
	defer log.Close()
	for range appendWarmup {
		if _, err := log.Append(1, payload); err != nil {
			return nil, 0, err
		}
	}
	st0 := log.Stats()
	lat := make(latency.Samples, 0, n)
	for range n {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		t0 := time.Now()
		_, err := log.Append(1, payload)
		d := time.Since(t0)
		if err != nil {
			return nil, 0, err
		}
		lat = append(lat, d)
	}
	st := log.Stats()
	return lat, float64(st.Batches-st0.Batches) / float64(n), log.Close()
}

// measureGroup times n durable Appends shared among g goroutines appending at
// once, and returns the records per second over the wall time and the
// records per batch (fsync).
func measureGroup(ctx context.Context, dir string, g, n int, payload []byte) (latency.Samples, float64, float64, error) {
	log, err := wal.Open(dir, wal.Options{})
	if err != nil {
		return nil, 0, 0, err
	}
	defer os.RemoveAll(dir)
	defer log.Close()
	var ready, done sync.WaitGroup
	begin := make(chan struct{})
	lats := make([]latency.Samples, g)
	errs := make([]error, g)
	for i := range g {
		share := n / g
		if i < n%g {
			share++
		}
		lats[i] = make(latency.Samples, 0, share)
		ready.Add(1)
		done.Go(func() {
			// Warm up untimed, so that what is timed is the steady state
			// of g appenders, not goroutine start-up.
			var err error
			for range groupWarmup {
				if _, err = log.Append(1, payload); err != nil {
					break
				}
			}
			ready.Done()
			if err != nil {
				errs[i] = err
				return
			}
			<-begin
			for range share {
				if err := ctx.Err(); err != nil {
					errs[i] = err
					return
				}
				t0 := time.Now()
				_, err := log.Append(1, payload)
				d := time.Since(t0)
				if err != nil {
					errs[i] = err
					return
				}
				lats[i] = append(lats[i], d)
			}
		})
	}
	ready.Wait()
	st0 := log.Stats()
	t0 := time.Now()
	close(begin)
	done.Wait()
	wall := time.Since(t0)
	st := log.Stats()
	if err := errors.Join(errs...); err != nil {
		return nil, 0, 0, err
	}
	all := slices.Concat(lats...)
	perSec := float64(len(all)) / wall.Seconds()
	perFsync := float64(st.Records-st0.Records) / float64(max(1, st.Batches-st0.Batches))
	return all, perSec, perFsync, log.Close()
}

// owner owns every saga of the bench.
var owner = rollback.Owner{Agent: "bench", Lease: "bench", Epoch: 1}

// registry is one in-memory sim servo, "base", that reaches any angle
// at once, limited to [-90, 90].
func registry() (*actuators.Registry, *sim.World, error) { return servos("base") }

// servos is registry with one such servo per name.
func servos(names ...string) (*actuators.Registry, *sim.World, error) {
	world := sim.NewMemoryWorld()
	list := make([]*actuators.Actuator, 0, len(names))
	for _, name := range names {
		list = append(list, &actuators.Actuator{
			Name:    name,
			Kind:    actuators.Servo,
			Limits:  limits.Spec{Min: -90, Max: 90},
			Safe:    actuators.SafePolicy{Mode: actuators.SafeHold},
			Timeout: driverTimeout,
			Driver:  world.Servo(name, 0, 0),
		})
	}
	reg, err := actuators.NewRegistry(list...)
	if err != nil {
		world.Close()
		return nil, nil, err
	}
	return reg, world, nil
}

// commandIDs returns n distinct command ids, made before timing starts.
func commandIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = prefix + strconv.Itoa(i)
	}
	return ids
}

// stepper is an engine with durability d on a fresh journal over the
// sim servo "base", with one saga open whose untimed first step has taken
// the actuator: what a timed engine step is measured on. The saga may carry
// maxCmds commands.
type stepper struct {
	e     *rollback.Engine
	log   *wal.Log
	world *sim.World
	dir   string
	saga  uint64
}

func newStepper(dir string, d rollback.Durability, maxCmds int) (_ *stepper, err error) {
	reg, world, err := registry()
	if err != nil {
		return nil, err
	}
	log, err := wal.Open(dir, wal.Options{})
	if err != nil {
		world.Close()
		return nil, err
	}
	st := &stepper{log: log, world: world, dir: dir}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	if st.e, err = rollback.New(rollback.Config{Journal: log, Actuators: reg, Durability: d, MaxSagaCommands: maxCmds}); err != nil {
		return nil, err
	}
	if st.saga, err = st.e.Begin(owner); err != nil {
		return nil, err
	}
	if _, err := st.e.Step(st.saga, owner, rollback.Command{ID: "take", Actuator: "base", Value: 1}); err != nil {
		return nil, err
	}
	return st, nil
}

// step is one engine step on the stepper's saga.
func (st *stepper) step(id string, value float64) error {
	_, err := st.e.Step(st.saga, owner, rollback.Command{ID: id, Actuator: "base", Value: value})
	return err
}

// commitAndClose commits the saga and closes the journal.
func (st *stepper) commitAndClose() error {
	if err := st.e.Commit(st.saga, owner); err != nil {
		st.close()
		return err
	}
	return st.close()
}

// close closes the journal and the world and removes the directory.
func (st *stepper) close() error {
	err := st.log.Close()
	st.world.Close()
	return errors.Join(err, os.RemoveAll(st.dir))
}

// measureSteps opens an engine with durability d on a fresh journal, begins
// one saga, takes the actuator with an untimed first step and times n
// steps (values cycling 0..4). With refusals it then times n steps the gate
// refuses (LIMIT_MAX) in the same saga. It returns the journal batches
// (fsyncs) per timed step.
func measureSteps(ctx context.Context, dir string, d rollback.Durability, n int, refusals bool) (steps latency.Samples, fsyncs float64, refused latency.Samples, err error) {
	// One saga carries every timed step and refusal: allow it that many.
	st, err := newStepper(dir, d, 2*n+1)
	if err != nil {
		return nil, 0, nil, err
	}
	e, log, saga := st.e, st.log, st.saga
	ids := commandIDs("s", n)
	st0 := log.Stats()
	steps = make(latency.Samples, 0, n)
	for i := range n {
		if err := ctx.Err(); err != nil {
			st.close()
			return nil, 0, nil, err
		}
		cmd := rollback.Command{ID: ids[i], Actuator: "base", Value: float64(i % 5)}
		t0 := time.Now()
		_, err := e.Step(saga, owner, cmd)
		dt := time.Since(t0)
		if err != nil {
			st.close()
			return nil, 0, nil, err
		}
		steps = append(steps, dt)
	}
	stats := log.Stats()
	fsyncs = float64(stats.Batches-st0.Batches) / float64(n)
	if refusals {
		// Start with nothing pending, so the steps' records are not
		// written while refusals are timed.
		if err := log.Sync(); err != nil {
			st.close()
			return nil, 0, nil, err
		}
		ids := commandIDs("r", n)
		want := rollback.LimitCode(limits.LimitMax)
		refused = make(latency.Samples, 0, n)
		for i := range n {
			if err := ctx.Err(); err != nil {
				st.close()
				return nil, 0, nil, err
			}
			cmd := rollback.Command{ID: ids[i], Actuator: "base", Value: refusalValue}
			t0 := time.Now()
			_, err := e.Step(saga, owner, cmd)
			dt := time.Since(t0)
			if rollback.CodeOf(err) != want {
				st.close()
				return nil, 0, nil, fmt.Errorf("a step to %v was not refused with %s: %v", cmd.Value, want, err)
			}
			refused = append(refused, dt)
		}
	}
	return steps, fsyncs, refused, st.commitAndClose()
}

// measureRecovery writes a journal of recoveryTotal engine records —
// committed sagas of recoverySagaSteps steps, through the engine — closes it,
// and times recovery.Open on it recoveryRuns times. Each run locks the
// directory, verifies the whole chain, replays every record into a new
// engine and journals (and syncs) its RECOVERY records, so the journal grows
// by a few records a run. The journal is in the page cache, as after a
// restart of the process; after a power cut it is read from the disk too.
func measureRecovery(ctx context.Context, dir string) (diskRow, error) {
	row := diskRow{Name: "recovery 10k records", Samples: recoveryRuns}
	defer os.RemoveAll(dir)
	reg, world, err := registry()
	if err != nil {
		return row, err
	}
	defer world.Close()

	// Write it. First-touch durability only makes the writing quicker (two
	// fsyncs a saga instead of five): the records are the same.
	log, err := wal.Open(dir, wal.Options{})
	if err != nil {
		return row, err
	}
	defer log.Close()
	e, err := rollback.New(rollback.Config{Journal: log, Actuators: reg, Durability: rollback.FirstTouch})
	if err != nil {
		return row, err
	}
	for i := 0; log.LastSeq() < recoveryTotal; i++ {
		if err := ctx.Err(); err != nil {
			return row, err
		}
		saga, err := e.Begin(owner)
		if err != nil {
			return row, err
		}
		for s := range recoverySagaSteps {
			cmd := rollback.Command{ID: strconv.Itoa(s), Actuator: "base", Value: float64((i*recoverySagaSteps + s) % 5)}
			if _, err := e.Step(saga, owner, cmd); err != nil {
				return row, err
			}
		}
		if err := e.Commit(saga, owner); err != nil {
			return row, err
		}
	}
	row.JournalBytes = log.Stats().Bytes
	if err := log.Close(); err != nil {
		return row, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return row, err
	}
	for _, de := range entries {
		if strings.HasSuffix(de.Name(), ".wal") {
			fi, err := de.Info()
			if err != nil {
				return row, err
			}
			row.JournalFileBytes += fi.Size()
		}
	}

	// Time it.
	var took latency.Samples
	for run := range recoveryRuns {
		if err := ctx.Err(); err != nil {
			return row, err
		}
		t0 := time.Now()
		res, err := recovery.Open(recovery.Options{Dir: dir, Engine: rollback.Config{Actuators: reg}})
		dt := time.Since(t0)
		if err != nil {
			return row, err
		}
		replayed, left := res.RebuiltRecords, len(res.Reports)
		if err := res.Close(); err != nil {
			return row, err
		}
		if left != 0 {
			return row, fmt.Errorf("recovery found %d open sagas in a journal of committed sagas", left)
		}
		if run == 0 {
			row.Records = replayed
		}
		took = append(took, dt)
	}
	row.P50 = int64(took.Percentile(0.5))
	row.P99 = int64(took.Percentile(0.99))
	row.Note = fmt.Sprintf("median of %d runs", recoveryRuns)
	return row, nil
}

// printBench writes the results as an aligned table.
func printBench(w io.Writer, res *diskResult) {
	writeWhere(w, res.Dir, res.Disk, res.Warning)
	fmt.Fprintf(w, "n=%d samples a row, %d-byte records; ratios are p50 and p99 over the fsync floor's p50\n\n", res.N, res.RecordBytes)
	writeTable(w, func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "\tp50\tp99\tp50/floor\tp99/floor\tother")
		for _, r := range res.Rows {
			p50, p99 := fmtDur(time.Duration(r.P50)), fmtDur(time.Duration(r.P99))
			var other []string
			switch {
			case r.RecordsPerSec > 0:
				other = append(other, fmt.Sprintf("%s records/s, %.1f records/fsync", fmtCount(r.RecordsPerSec), r.RecordsPerFsync))
			case r.Records > 0:
				p99 = "max " + p99
				other = append(other, fmt.Sprintf("%s; %d records, %s journal (%s preallocated)",
					r.Note, r.Records, fmtBytes(float64(r.JournalBytes)), fmtBytes(float64(r.JournalFileBytes))))
			default:
				if r.FsyncsPerOp != nil {
					other = append(other, fmt.Sprintf("%.2f fsyncs/op", *r.FsyncsPerOp))
				}
				if r.Note != "" {
					other = append(other, r.Note)
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, p50, p99, fmtRatio(r.P50xFloor), fmtRatio(r.P99xFloor), strings.Join(other, "; "))
		}
	})
	fmt.Fprintf(w, "\nfirst-touch and the gate wait for no fsync, so their ratios are \"-\"; recovery locks, verifies the\n")
	fmt.Fprintf(w, "whole chain and replays every record, with the journal in the page cache. Took %s.\n",
		time.Duration(res.TookNs).Round(100*time.Millisecond))
}

// writeWhere says where a bench measured, and warns if that disk flatters.
func writeWhere(w io.Writer, dir, disk, warning string) {
	if disk != "" {
		dir += " (" + disk + ")"
	}
	fmt.Fprintf(w, "measured in %s, removed afterwards\n", dir)
	if warning != "" {
		fmt.Fprintf(w, "WARNING: %s\n", warning)
	}
}

// writeTable writes what fill puts in a tabwriter as aligned columns, two
// spaces apart, without trailing blanks.
func writeTable(w io.Writer, fill func(tw *tabwriter.Writer)) {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fill(tw)
	tw.Flush()
	for line := range strings.Lines(b.String()) {
		fmt.Fprintln(w, strings.TrimRight(line, " \n"))
	}
}

// fmtDur formats a duration readably: ns below 1 µs, µs with one decimal
// below 1 ms, then ms, then s.
func fmtDur(d time.Duration) string {
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond))
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func fmtRatio(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *r)
}

func fmtCount(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func fmtBytes(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1f MB", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1f kB", v/1e3)
	}
	return fmt.Sprintf("%.0f B", v)
}

// newProgress returns a function that shows which measurement is running on
// stderr when stderr is a terminal (a bench on an SD card takes a while),
// and does nothing otherwise, so piped and --json output stay clean. An
// empty name clears the line.
func newProgress() func(string) {
	fi, err := os.Stderr.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return func(string) {}
	}
	return func(name string) {
		if name == "" {
			fmt.Fprint(os.Stderr, "\r\033[K")
			return
		}
		fmt.Fprintf(os.Stderr, "\r\033[Kmeasuring %s…", name)
	}
}

// diskOf names the file system dir is on, from /proc/self/mountinfo: its
// type and a description, "ext4 on /dev/mmcblk0p2, mounted at /". Both are
// empty when that cannot be told.
func diskOf(dir string) (fstype, desc string) {
	path, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", ""
	}
	if path, err = filepath.Abs(path); err != nil {
		return "", ""
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", ""
	}
	// Fields: id parent major:minor root mountpoint options [optional...] - fstype source superoptions.
	unescape := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	best := ""
	for _, line := range strings.Split(string(data), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 2 {
			continue
		}
		mnt := unescape.Replace(f[4])
		if mnt != "/" && path != mnt && !strings.HasPrefix(path, mnt+"/") {
			continue
		}
		if len(mnt) >= len(best) { // a later mount on the same point hides an earlier one
			best, fstype = mnt, g[0]
			desc = fmt.Sprintf("%s on %s, mounted at %s", g[0], unescape.Replace(g[1]), mnt)
		}
	}
	return fstype, desc
}

// stringsFlag is a flag that may be given many times.
type stringsFlag []string

func (s *stringsFlag) String() string { return strings.Join(*s, ",") }

func (s *stringsFlag) Set(v string) error {
	*s = append(*s, v)
	return nil
}
