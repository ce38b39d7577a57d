// Package retrylog decides when a part that keeps failing to come up (a
// broker that refuses, a serial port that is absent) is logged again: at
// the first failure, whenever the error changes, and otherwise after a
// pause that doubles from First up to Max. A retry loop that runs twice a
// second then writes a few lines an hour, each with the part, its address,
// the error and how many attempts failed since the last line.
package retrylog

import (
	"sync"
	"time"
)

// Defaults for a zero Gate.
const (
	DefaultFirst = 5 * time.Second
	DefaultMax   = 5 * time.Minute
)

// Gate remembers one part's failures. The zero value is ready to use; it
// is safe for concurrent use.
type Gate struct {
	First, Max time.Duration // zero: DefaultFirst, DefaultMax

	mu      sync.Mutex
	last    string    // the error last logged
	next    time.Time // when the same error is logged again
	pause   time.Duration
	failed  int // failures since the last line
	down    bool
	logged  bool // a failure was logged since the part was last up
	downAt  time.Time
	lastErr error
}

// Failed records a failure at now. It returns log=true when this one is to
// be logged, with the failures since the previous line (this one
// included).
func (g *Gate) Failed(err error, now time.Time) (log bool, attempts int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failed++
	g.lastErr = err
	if !g.down {
		g.down, g.downAt = true, now
	}
	msg := err.Error()
	if msg != g.last || !now.Before(g.next) {
		if msg != g.last || g.pause == 0 {
			g.pause = g.first()
		} else {
			g.pause = min(2*g.pause, g.max())
		}
		g.last, g.next, g.logged = msg, now.Add(g.pause), true
		n := g.failed
		g.failed = 0
		return true, n
	}
	return false, 0
}

// Record records a failure at now that another line speaks for: Err
// returns it, and no line is due for it.
func (g *Gate) Record(err error, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lastErr = err
	if !g.down {
		g.down, g.downAt = true, now
	}
}

// Up records that the part came up at now. It returns whether it had been
// failing and for how long (since its first failure), and whether Failed
// had a line logged meanwhile: the caller logs the recovery once, where it
// logged the failure.
func (g *Gate) Up(now time.Time) (wasDown bool, downFor time.Duration, logged bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	wasDown, logged = g.down, g.logged
	if wasDown {
		downFor = now.Sub(g.downAt)
	}
	g.down, g.logged, g.last, g.pause, g.failed, g.lastErr = false, false, "", 0, 0, nil
	return wasDown, downFor, logged
}

// Err is the last failure since the part was last up, or nil.
func (g *Gate) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lastErr
}

func (g *Gate) first() time.Duration {
	if g.First > 0 {
		return g.First
	}
	return DefaultFirst
}

func (g *Gate) max() time.Duration {
	if g.Max > 0 {
		return g.Max
	}
	return DefaultMax
}
