package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/internal/latency"
	"github.com/saga-supervisor/saga-supervisor/recovery"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// The journal over a robot's lifetime (`bench journal`): how long a
// restart takes to get ready as the journal grows, with and without
// checkpoints; how many bytes an hour junk traffic costs the journal at the
// default rate limit; and what keeping checkpoints costs a step.

// JournalResult is what `bench journal` measured.
type JournalResult struct {
	Dir     string       `json:"dir"`
	Disk    string       `json:"disk,omitempty"`
	Warning string       `json:"warning,omitempty"`
	Restart []RestartRow `json:"restart"`
	Junk    []JunkRow    `json:"junk"`
	Step    []StepRow    `json:"step"`
	TookNs  int64        `json:"took_ns"`
}

// RestartRow is recovery.Open on a journal of Records records: the part of
// a restart that grows with the journal (lock, verify, rebuild the state,
// finish open sagas). Median and slowest of Runs.
type RestartRow struct {
	Records  uint64 `json:"records"`
	Start    string `json:"start"` // what the restart starts from
	Replayed uint64 `json:"replayed"`
	Walked   uint64 `json:"walked"` // records Open read and verified
	Runs     int    `json:"runs"`
	P50      int64  `json:"p50_ns"`
	Max      int64  `json:"max_ns"`
}

// JunkRow is one agent flooding the supervisor with one kind of junk for
// Seconds: what reached the journal, scaled to an hour.
type JunkRow struct {
	Kind        string  `json:"kind"`
	Sent        int     `json:"sent"`
	Seconds     float64 `json:"seconds"`
	Records     uint64  `json:"records"`
	Bytes       uint64  `json:"bytes"`
	BytesPerHr  float64 `json:"bytes_per_hour"`
	RecordsPerS float64 `json:"records_per_s"`
}

// StepRow is the durable step's latency with the checkpointer off or on.
type StepRow struct {
	Checkpoints string `json:"checkpoints"`
	Samples     int    `json:"samples"`
	P50         int64  `json:"p50_ns"`
	P99         int64  `json:"p99_ns"`
	Written     uint64 `json:"checkpoints_written"`
}

type journalOptions struct {
	sizes    []uint64
	junkTime time.Duration
	n        int
}

func measureJournal(ctx context.Context, res *JournalResult, opt journalOptions, prog func(string)) error {
	for _, size := range opt.sizes {
		prog(fmt.Sprintf("restart, %d records", size))
		rows, err := measureRestart(ctx, filepath.Join(res.Dir, "restart-"+strconv.FormatUint(size, 10)), size)
		if err != nil {
			return fmt.Errorf("restart at %d records: %w", size, err)
		}
		res.Restart = append(res.Restart, rows...)
	}
	for _, kind := range junkKinds {
		prog("junk flood: " + kind.name)
		row, err := measureJunk(ctx, filepath.Join(res.Dir, "junk"), kind, opt.junkTime)
		if err != nil {
			return fmt.Errorf("junk flood %s: %w", kind.name, err)
		}
		res.Junk = append(res.Junk, row)
	}
	prog("step with and without checkpoints")
	rows, err := measureStepCheckpoints(ctx, filepath.Join(res.Dir, "step"), opt.n)
	if err != nil {
		return fmt.Errorf("step with checkpoints: %w", err)
	}
	res.Step = rows
	return nil
}

// restartTail is how many records a crash leaves after the newest
// checkpoint at worst (about): the default checkpoint_records.
const restartTail = recovery.DefaultCheckpointRecords

// measureRestart writes a journal of size records (committed sagas of two
// steps, encoded as the engine encodes them, written in large batches so
// that a million take seconds) and times recovery.Open on it: with no
// checkpoint, with the checkpoint a clean stop leaves, and with that
// checkpoint restartTail records back, as after a crash.
func measureRestart(ctx context.Context, dir string, size uint64) ([]RestartRow, error) {
	defer os.RemoveAll(dir)
	reg, world, err := registry()
	if err != nil {
		return nil, err
	}
	defer world.Close()
	var nextSaga uint64 = 1
	write := func(n uint64) error { return writeCommitted(ctx, dir, n, &nextSaga) }
	open := func(ck recovery.CheckpointOptions) (*recovery.Result, time.Duration, error) {
		t0 := time.Now()
		r, err := recovery.Open(recovery.Options{Dir: dir, Engine: rollback.Config{Actuators: reg}, Checkpoint: ck})
		dt := time.Since(t0)
		if err == nil && len(r.Reports) != 0 {
			r.Close()
			err = fmt.Errorf("recovery found %d open sagas in a journal of committed sagas", len(r.Reports))
		}
		return r, dt, err
	}
	runs := 5
	if size >= 1_000_000 {
		runs = 3
	}
	timed := func(start string) (RestartRow, error) {
		row := RestartRow{Records: size, Start: start, Runs: runs}
		var took latency.Samples
		for range runs {
			if err := ctx.Err(); err != nil {
				return row, err
			}
			r, dt, err := open(recovery.CheckpointOptions{})
			if err != nil {
				return row, err
			}
			row.Replayed, row.Walked = r.RebuiltRecords, r.Opened.Records
			if err := r.Close(); err != nil {
				return row, err
			}
			took = append(took, dt)
		}
		row.P50, row.Max = int64(took.Percentile(0.5)), int64(took.Percentile(1))
		return row, nil
	}

	if err := write(size); err != nil {
		return nil, err
	}
	var rows []RestartRow
	row, err := timed("no checkpoint: every record replayed")
	if err != nil {
		return nil, err
	}
	rows = append(rows, row)
	// A daemon that keeps checkpoints writes one at its clean stop.
	r, _, err := open(recovery.CheckpointOptions{Every: time.Hour})
	if err != nil {
		return nil, err
	}
	if err := r.Close(); err != nil {
		return nil, err
	}
	if row, err = timed("the checkpoint a clean stop writes"); err != nil {
		return nil, err
	}
	rows = append(rows, row)
	if err := write(restartTail); err != nil {
		return nil, err
	}
	if row, err = timed(fmt.Sprintf("a checkpoint %d records back (a crash)", restartTail)); err != nil {
		return nil, err
	}
	rows = append(rows, row)
	return rows, nil
}

// writeCommitted appends about n records to the journal in dir: committed
// sagas of two steps of the servo "base" by owner, encoded as the engine
// encodes them, written in large batches so that a million take seconds.
// *nextSaga is the id of the next saga (1 for a new journal, which must
// then be empty); it is advanced past those written.
func writeCommitted(ctx context.Context, dir string, n uint64, nextSaga *uint64) error {
	l, err := wal.Open(dir, wal.Options{})
	if err != nil {
		return err
	}
	if *nextSaga == 1 && l.LastSeq() > 0 {
		l.Close()
		return errors.New("journal not empty")
	}
	target := l.LastSeq() + n
	var buf []byte
	put := func(r rollback.Record) error {
		r.UnixNano = time.Now().UnixNano()
		buf = r.AppendEncode(buf[:0])
		_, err := l.Enqueue(uint8(r.Type), buf)
		return err
	}
	for l.LastSeq()+6 <= target {
		if err := ctx.Err(); err != nil {
			l.Close()
			return err
		}
		s := *nextSaga
		*nextSaga++
		recs := []rollback.Record{
			{Type: rollback.RecBegin, Saga: s, Agent: owner.Agent, Lease: owner.Lease, Epoch: owner.Epoch},
			{Type: rollback.RecIntent, Saga: s, Step: 1, Actuator: "base", Target: 1, Prior: 0, Requested: 1, Lease: owner.Lease, Epoch: owner.Epoch, CmdID: "a", Flags: rollback.FlagFirstTouch},
			{Type: rollback.RecApplied, Saga: s, Step: 1},
			{Type: rollback.RecIntent, Saga: s, Step: 2, Actuator: "base", Target: 0, Prior: 1, Requested: 0, Lease: owner.Lease, Epoch: owner.Epoch, CmdID: "b"},
			{Type: rollback.RecApplied, Saga: s, Step: 2},
			{Type: rollback.RecCommit, Saga: s},
		}
		for _, r := range recs {
			if err := put(r); err != nil {
				l.Close()
				return err
			}
		}
	}
	return l.Close() // writes and syncs what is enqueued
}

type junkKind struct {
	name string
	// req makes the i-th request of the flood; derr non-nil: the
	// transport could not decode it.
	req func(i int, lease string, epoch uint64, saga uint64) (api.Request, *api.Error)
}

var junkKinds = []junkKind{
	{"undecodable JSON", func(i int, _ string, _ uint64, _ uint64) (api.Request, *api.Error) {
		req, derr := api.DecodeRequest([]byte(`{"id":"j`+strconv.Itoa(i)+`","agent":"junk","op":`), 8192)
		return req, derr
	}},
	{"steps over the limit in an open saga", func(i int, lease string, epoch uint64, saga uint64) (api.Request, *api.Error) {
		return decodeJunk(fmt.Sprintf(`{"id":"j%d","agent":"junk","op":"step","lease":%q,"epoch":%d,"saga":%d,"actuator":"base","value":170}`, i, lease, epoch, saga))
	}},
	{"steps on a stale lease", func(i int, _ string, epoch uint64, saga uint64) (api.Request, *api.Error) {
		return decodeJunk(fmt.Sprintf(`{"id":"j%d","agent":"junk","op":"step","lease":"stale","epoch":%d,"saga":%d,"actuator":"base","value":5}`, i, epoch, saga))
	}},
}

func decodeJunk(s string) (api.Request, *api.Error) { return api.DecodeRequest([]byte(s), 8192) }

// measureJunk runs the supervisor on the embedded default config (anonymous
// agents, its default rate limit: 1000 requests/s per agent, burst 200) in
// this process and has one agent submit junk of one kind as fast as its
// replies come back for d; the journal's frame bytes written meanwhile,
// scaled to an hour, are what such an agent costs the disk.
func measureJunk(ctx context.Context, dir string, kind junkKind, d time.Duration) (JunkRow, error) {
	row := JunkRow{Kind: kind.name}
	defer os.RemoveAll(dir)
	cfg := config.Default()
	cfg.Agents.Allow = nil
	cfg.Journal.Dir = filepath.Join(dir, "journal")
	cfg.Sim.World = filepath.Join(dir, "world")
	lg := slog.New(slog.DiscardHandler)
	b, err := supervisor.FromConfig(cfg, lg)
	if err != nil {
		return row, err
	}
	defer b.Close()
	s, err := supervisor.New(b.Options)
	if err != nil {
		return row, err
	}
	defer s.Close()
	call := func(req api.Request, derr *api.Error) api.Reply {
		got := make(chan api.Reply, 1)
		s.Submit("junk", req, derr, time.Now(), func(r api.Reply) { got <- r })
		return <-got
	}
	hello := call(decodeJunk(`{"id":"h","agent":"junk","op":"hello","ttl_ms":60000}`))
	if !hello.OK {
		return row, fmt.Errorf("hello: %s %s", hello.Code, hello.Message)
	}
	begin := call(decodeJunk(fmt.Sprintf(`{"id":"b","agent":"junk","op":"begin","lease":%q,"epoch":%d}`, hello.Lease, hello.Epoch)))
	if !begin.OK {
		return row, fmt.Errorf("begin: %s %s", begin.Code, begin.Message)
	}
	l := s.Recovered().Log
	if err := l.Sync(); err != nil {
		return row, err
	}
	before := l.Stats()
	t0 := time.Now()
	for i := 0; time.Since(t0) < d; i++ {
		if err := ctx.Err(); err != nil {
			return row, err
		}
		if r := call(kind.req(i, hello.Lease, hello.Epoch, begin.Saga)); r.OK {
			return row, fmt.Errorf("junk request %d was served", i)
		}
		row.Sent++
	}
	row.Seconds = time.Since(t0).Seconds()
	// The refusals counted in aggregate are journaled at the next count
	// (every second): wait for it, then for the journal.
	time.Sleep(1100 * time.Millisecond)
	if err := l.Sync(); err != nil {
		return row, err
	}
	after := l.Stats()
	row.Records, row.Bytes = after.Records-before.Records, after.Bytes-before.Bytes
	// The second waited for the last count holds no junk: the rates are
	// per second of flood.
	row.BytesPerHr = float64(row.Bytes) / row.Seconds * 3600
	row.RecordsPerS = float64(row.Records) / row.Seconds
	return row, nil
}

// measureStepCheckpoints times durable steps on an engine recovery opened,
// with no checkpointer and with one catching up every 10 ms and
// checkpointing every 256 records (far more often than the default, so its
// cost shows), in alternating rounds so that both see the same disk.
func measureStepCheckpoints(ctx context.Context, dir string, n int) ([]StepRow, error) {
	defer os.RemoveAll(dir)
	reg, world, err := registry()
	if err != nil {
		return nil, err
	}
	defer world.Close()
	conds := []struct {
		name string
		ck   recovery.CheckpointOptions
	}{
		{"off", recovery.CheckpointOptions{}},
		{"every 256 records, caught up every 10ms", recovery.CheckpointOptions{Every: 10 * time.Millisecond, Records: 256}},
	}
	samples := make([]latency.Samples, len(conds))
	written := make([]uint64, len(conds))
	const rounds = 3
	for pass := range rounds {
		for c, cond := range conds {
			r, err := recovery.Open(recovery.Options{Dir: dir, Engine: rollback.Config{Actuators: reg}, Checkpoint: cond.ck})
			if err != nil {
				return nil, err
			}
			before := r.Log.Stats().Checkpoints
			ids := commandIDs(fmt.Sprintf("r%dc%d-", pass, c), n/rounds+1)
			saga, err := r.Engine.Begin(owner)
			if err != nil {
				r.Close()
				return nil, err
			}
			for i, id := range ids {
				if err := ctx.Err(); err != nil {
					r.Close()
					return nil, err
				}
				t0 := time.Now()
				_, err := r.Engine.Step(saga, owner, rollback.Command{ID: id, Actuator: "base", Value: float64(i % 5)})
				samples[c] = append(samples[c], time.Since(t0))
				if err != nil {
					r.Close()
					return nil, err
				}
				if i%200 == 199 { // sagas of bounded length
					if err := r.Engine.Commit(saga, owner); err != nil {
						r.Close()
						return nil, err
					}
					if saga, err = r.Engine.Begin(owner); err != nil {
						r.Close()
						return nil, err
					}
				}
			}
			r.Engine.Commit(saga, owner)
			written[c] += r.Log.Stats().Checkpoints - before
			if err := r.Close(); err != nil {
				return nil, err
			}
		}
	}
	var rows []StepRow
	for c, cond := range conds {
		rows = append(rows, StepRow{Checkpoints: cond.name, Samples: len(samples[c]),
			P50: int64(samples[c].Percentile(0.5)), P99: int64(samples[c].Percentile(0.99)), Written: written[c]})
	}
	return rows, nil
}

func printJournal(w io.Writer, res *JournalResult) {
	writeWhere(w, res.Dir, res.Disk, res.Warning)
	table := func(fill func(tw *tabwriter.Writer)) { writeTable(w, fill) }
	fmt.Fprintln(w, "\nrestart-to-ready: recovery.Open (lock, verify, rebuild, finish), journal in the page cache")
	table(func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "records\tstarts from\treplayed\tp50\tmax\tvs no checkpoint")
		var base int64
		for _, r := range res.Restart {
			ratio := "1.00"
			if strings.HasPrefix(r.Start, "no checkpoint") {
				base = r.P50
			} else if base > 0 {
				ratio = fmt.Sprintf("%.3f", float64(r.P50)/float64(base))
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", fmtCount(float64(r.Records)), r.Start, r.Replayed,
				fmtDur(time.Duration(r.P50)), fmtDur(time.Duration(r.Max)), ratio)
		}
	})
	fmt.Fprintln(w, "\njunk from one agent at the default rate limit (1000/s, burst 200), as fast as replies come")
	table(func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "junk\tsent\trecords/s\tjournal bytes/hour")
		for _, r := range res.Junk {
			fmt.Fprintf(tw, "%s\t%d in %.1fs\t%.1f\t%s\n", r.Kind, r.Sent, r.Seconds, r.RecordsPerS, fmtBytes(r.BytesPerHr))
		}
	})
	fmt.Fprintln(w, "\ndurable step (every-step) with the checkpointer off and on, rounds alternated")
	table(func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "checkpoints\tsamples\tp50\tp99\tp50 vs off\tcheckpoints written")
		var base int64
		for i, r := range res.Step {
			ratio := "1.00"
			if i == 0 {
				base = r.P50
			} else if base > 0 {
				ratio = fmt.Sprintf("%.2f", float64(r.P50)/float64(base))
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\n", r.Checkpoints, r.Samples, fmtDur(time.Duration(r.P50)), fmtDur(time.Duration(r.P99)), ratio, r.Written)
		}
	})
	fmt.Fprintf(w, "\nTook %s.\n", time.Duration(res.TookNs).Round(100*time.Millisecond))
}

// parseSizes reads --records: a comma-separated list of record counts, each
// at least 100.
func parseSizes(s string) ([]uint64, error) {
	var out []uint64
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(strings.ReplaceAll(f, "_", "")), 10, 64)
		if err != nil || n < 100 || n > 100_000_000 {
			return nil, fmt.Errorf("--records: %q is not a count of records in 100..100000000", f)
		}
		out = append(out, n)
	}
	return out, nil
}
