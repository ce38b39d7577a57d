package recovery

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// CheckpointOptions configures the Checkpointer.
type CheckpointOptions struct {
	// Every is how often the checkpointer catches up with the durable
	// journal (0: no checkpointer, unless Manual).
	Every time.Duration
	// Manual keeps checkpoints without a goroutine: the caller calls
	// CheckpointNow at moments of its choosing (the model check, so that
	// power cuts land inside checkpoint writes at fixed points of a run).
	Manual bool
	// Records: a checkpoint is written once this many records have become
	// durable since the last one (default DefaultCheckpointRecords) ...
	Records uint64
	// Interval: ... or once this long has passed with any new record
	// (default DefaultCheckpointInterval). Close writes a last one.
	Interval time.Duration
	// Logger receives failures (nil: discard).
	Logger *slog.Logger
	// OnCheckpoint, if set, is told of each checkpoint written and the
	// retention pass after it (for metrics and the log).
	OnCheckpoint func(at wal.Position, ret wal.RetentionReport)
}

// Checkpoint defaults: a restart rebuilds from at most about this many
// records after a crash (well under 100 ms on a Pi-class CPU), and a quiet
// daemon still checkpoints now and then so retention can move.
const (
	DefaultCheckpointRecords  = 16384
	DefaultCheckpointInterval = 5 * time.Minute
)

// Checkpointer keeps the journal's checkpoints while the daemon serves. It
// owns a rebuild-only engine (the one recovery rebuilt the state in) and,
// every Every, feeds it the records that became durable since (reading the
// segment files, off the append path: the step path never waits for it),
// and writes its snapshot as a checkpoint when enough has happened. So a
// checkpoint is by construction what rebuilding from the journal up to its
// record gives: the serving engine's state, with its effects in flight, is
// never snapshotted.
type Checkpointer struct {
	log    *wal.Log
	shadow *rollback.Engine
	opt    CheckpointOptions

	mu     sync.Mutex // serialises catch-ups (the goroutine, Close)
	pos    wal.Position
	ckSeq  uint64
	ckTime time.Time
	err    error // sticky: a record the rebuild-only engine refused, a failed read

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

func startCheckpointer(l *wal.Log, shadow *rollback.Engine, pos wal.Position, opt CheckpointOptions) *Checkpointer {
	if opt.Records == 0 {
		opt.Records = DefaultCheckpointRecords
	}
	if opt.Interval <= 0 {
		opt.Interval = DefaultCheckpointInterval
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Checkpointer{log: l, shadow: shadow, opt: opt, pos: pos, ckTime: time.Now(),
		stop: make(chan struct{}), done: make(chan struct{})}
	if ck := l.OpenReport().Checkpoint; ck != nil {
		c.ckSeq = ck.At.Seq
	}
	if opt.Manual {
		close(c.done)
	} else {
		go c.run()
	}
	return c
}

func (c *Checkpointer) run() {
	defer close(c.done)
	t := time.NewTicker(c.opt.Every)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			if err := c.catchUp(false); err != nil {
				// Not sticky: the journal is untouched, and the next
				// attempt may find space again. Start-up rebuilds from
				// more records meanwhile.
				c.opt.Logger.Warn("journal checkpoint failed", "err", err)
			}
		}
	}
}

// catchUp feeds the rebuild-only engine what became durable and writes a
// checkpoint when due (always, if force and anything is new). It returns
// a failed checkpoint write; a failure to follow the journal stops
// checkpoints for good (Err).
func (c *Checkpointer) catchUp(force bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	pos, err := c.log.Follow(c.pos, func(r wal.Record) error {
		return c.shadow.Apply(r.Seq, r.Type, r.Payload)
	})
	c.pos = pos
	if err != nil {
		c.fail(err)
		return err
	}
	n := pos.Seq - c.ckSeq
	if n == 0 || !force && n < c.opt.Records && time.Since(c.ckTime) < c.opt.Interval {
		return nil
	}
	snap, err := c.shadow.Snapshot()
	if err != nil {
		c.fail(err)
		return err
	}
	ret, err := c.log.WriteCheckpoint(pos, snap)
	if err != nil {
		return err
	}
	c.ckSeq, c.ckTime = pos.Seq, time.Now()
	if c.opt.OnCheckpoint != nil {
		c.opt.OnCheckpoint(pos, ret)
	}
	return nil
}

// CheckpointNow catches up with the durable journal and writes a
// checkpoint if anything is new since the last one.
func (c *Checkpointer) CheckpointNow() error { return c.catchUp(true) }

func (c *Checkpointer) fail(err error) {
	c.err = err
	c.opt.Logger.Error("journal checkpoints stopped: the replay engine could not follow the journal", "seq", c.pos.Seq, "err", err)
}

// Err returns why checkpoints stopped, nil while they are kept.
func (c *Checkpointer) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close stops the goroutine, waits for the journal to be durable, writes a
// last checkpoint of everything, and closes the rebuild-only engine. Call it
// after the serving engine is closed and before the journal is.
func (c *Checkpointer) Close() error {
	var err error
	c.once.Do(func() {
		close(c.stop)
		<-c.done
		if serr := c.log.Sync(); serr == nil {
			if cerr := c.catchUp(true); cerr != nil && c.Err() == nil {
				c.opt.Logger.Warn("journal checkpoint at close failed", "err", cerr)
			}
		}
		err = c.Err()
		c.shadow.Close()
	})
	if errors.Is(err, rollback.ErrClosed) {
		return nil
	}
	return err
}
