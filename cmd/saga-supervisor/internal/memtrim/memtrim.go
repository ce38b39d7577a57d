// Package memtrim gives the memory a burst left behind — a flood of
// commands, a storm of connections — back to the operating system once the
// burst is over.
//
// Go's runtime returns freed heap to the system on its own only down to
// about its heap goal (twice the live heap at the last collection), and it
// learns what is free only by collecting; an idle daemon allocates so
// little that its next collection may be two minutes away (the runtime
// forces one that often). Left alone, a flood keeps the daemon's resident
// memory 15–30 MB above idle for that long, with its live heap back near
// idle.
//
// A Trimmer looks every few seconds at the heap the process holds in
// memory (objects live and dead, free pages not yet returned, stacks),
// against the least it has held since its last trim. When it holds
// MinExcess or more above that floor, and the process allocated less than
// a quarter of the excess since the last look — the burst is over, and at
// this rate the excess would sit unused for several looks — the Trimmer
// calls debug.FreeOSMemory: one forced collection, and every free page
// returned. What the heap holds right after a trim is the new floor, so a
// heap that is large because its live objects are (sagas in progress) is
// not trimmed again and again.
//
// The same rule keeps an idle daemon's heap near its live size: its own
// garbage (status refreshes, supply polls, the broker's housekeeping) is
// collected and returned every half minute or so instead of growing to the
// runtime's minimum heap goal of 4 MiB and staying resident.
//
// A Trimmer runs on a goroutine of its own and holds no lock anything else
// takes: nothing waits for it, a halt least of all. A trim is one more
// collection, with what any collection costs the other goroutines — two
// stop-the-world pauses of microseconds, a quarter of the CPU while it
// marks, help asked of a goroutine that allocates meanwhile — and then the
// free pages returned: 1–5 ms for the call idle, about 10 ms after a
// flood (amd64, a busy 2-core VM). It happens at most once a look and only
// while the process is quiet; during a burst (allocations far above the
// excess) a Trimmer does nothing, and the burst reuses what it freed.
package memtrim

import (
	"log/slog"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Options.
const (
	// DefaultEvery is how often a Trimmer looks: a burst's memory is back
	// with the system within about two looks of its end.
	DefaultEvery = 5 * time.Second
	// DefaultMinExcess is the excess worth a trim. The runtime lets an
	// idle daemon's garbage grow to its minimum heap goal, 4 MiB, before
	// it collects, and keeps the pages after; trimming at 1 MiB keeps the
	// idle heap near its live size (about 2 MB less resident, measured)
	// for a trim every half minute or so.
	DefaultMinExcess = 1 << 20
	// quietLooks: a trim waits until the excess would last this many looks
	// at the rate the process allocated during the last one.
	quietLooks = 4
)

// Options configure a Trimmer. Zero fields take their defaults.
type Options struct {
	Every     time.Duration // between looks
	MinExcess uint64        // bytes held above the floor worth a trim
	Log       *slog.Logger  // one line at debug level per trim; nil: none
}

// Stats counts what a Trimmer did.
type Stats struct {
	Trims    uint64 // calls to debug.FreeOSMemory
	Returned uint64 // bytes of heap the trims returned to the system
}

// Trimmer is a running trimmer.
type Trimmer struct {
	opt      Options
	trims    atomic.Uint64
	returned atomic.Uint64
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
}

// The runtime/metrics a look reads, in this order.
var sampled = []string{
	"/memory/classes/heap/objects:bytes",  // live objects and garbage not yet collected
	"/memory/classes/heap/unused:bytes",   // room in pages holding objects
	"/memory/classes/heap/free:bytes",     // free pages, not returned
	"/memory/classes/heap/stacks:bytes",   // goroutine stacks
	"/memory/classes/heap/released:bytes", // free pages, returned
	"/gc/heap/allocs:bytes",               // allocated since start, cumulative
}

// look is one reading of the samples: held is the heap in memory, the
// sum of the first four.
type look struct{ held, free, released, allocated uint64 }

func read(s []metrics.Sample) look {
	metrics.Read(s)
	v := func(i int) uint64 { return s[i].Value.Uint64() }
	return look{held: v(0) + v(1) + v(2) + v(3), free: v(2), released: v(4), allocated: v(5)}
}

// Start starts a Trimmer; Stop ends it.
func Start(opt Options) *Trimmer {
	if opt.Every <= 0 {
		opt.Every = DefaultEvery
	}
	if opt.MinExcess == 0 {
		opt.MinExcess = DefaultMinExcess
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	t := &Trimmer{opt: opt, stop: make(chan struct{}), done: make(chan struct{})}
	go t.loop()
	return t
}

// Stop ends the Trimmer and waits for a trim in progress. Calling it again
// does nothing.
func (t *Trimmer) Stop() {
	t.once.Do(func() { close(t.stop) })
	<-t.done
}

// Stats returns the counts so far.
func (t *Trimmer) Stats() Stats {
	return Stats{Trims: t.trims.Load(), Returned: t.returned.Load()}
}

func (t *Trimmer) loop() {
	defer close(t.done)
	s := make([]metrics.Sample, len(sampled))
	for i, name := range sampled {
		s[i].Name = name
	}
	last := read(s)
	floor := last.held
	tick := time.NewTicker(t.opt.Every)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
		}
		now := read(s)
		since := now.allocated - last.allocated
		last = now
		floor = min(floor, now.held)
		// Above the floor, or free pages not yet returned: a burst whose
		// memory was still live at the last trim (the floor then rose
		// with it) shows here once it is freed and collected.
		excess := max(now.held-floor, now.free)
		if !Due(excess, since, t.opt.MinExcess) {
			continue
		}
		began := time.Now()
		debug.FreeOSMemory()
		last = read(s)
		floor = last.held
		// What the heap has returned now, less what it had. Pages reused
		// meanwhile may make it smaller than what the trim returned.
		var returned uint64
		if last.released > now.released {
			returned = last.released - now.released
		}
		t.trims.Add(1)
		t.returned.Add(returned)
		t.opt.Log.Debug("memory returned to the system", "held", now.held, "excess", excess,
			"allocated_since_last_look", since, "returned", returned, "held_after", last.held, "took", time.Since(began))
	}
}

// Due reports whether a trim is worth it: the heap holds at least
// minExcess bytes above its floor (excess), and the process allocated
// (allocated, since the last look) less than a quarter of that — so the
// excess is not being reused: whatever left it is over.
func Due(excess, allocated, minExcess uint64) bool {
	return excess >= minExcess && allocated < excess/quietLooks
}
