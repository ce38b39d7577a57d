package memtrim

import (
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/internal/leaktest"
)

func TestDue(t *testing.T) {
	const min = 4 << 20
	for i, c := range []struct {
		excess, allocated uint64
		want              bool
	}{
		0: {0, 0, false},
		1: {min - 1, 0, false},           // too little to be worth a collection
		2: {min, 0, true},                // a burst ended: nothing allocated since
		3: {min, min/4 - 1, true},        // quiet: the excess would last over four looks
		4: {min, min / 4, false},         // reused within four looks at this rate
		5: {64 << 20, 200 << 20, false},  // mid-flood: allocating far more than is free
		6: {64 << 20, 1 << 20, true},     // after a flood, a trickle of allocation
		7: {1<<64 - 1, 1<<62 - 2, true},  // no overflow
		8: {1<<64 - 1, 1<<62 - 1, false}, // a quarter: not quiet
		9: {3 << 20, 0, false},           // idle garbage between two collections
	} {
		if got := Due(c.excess, c.allocated, min); got != c.want {
			t.Errorf("%d: Due(excess %d, allocated %d) = %v, want %v", i, c.excess, c.allocated, got, c.want)
		}
	}
}

var sink [][]byte

// A burst's memory goes back to the system within a few looks of its end,
// even when the last collection found it all live: the trimmer trims once,
// and the heap's released memory grows by about the burst.
func TestTrimmerReturnsABurst(t *testing.T) {
	check := leaktest.Check(t)
	runtime.GC()
	tr := Start(Options{Every: 20 * time.Millisecond})
	const burst = 64 << 20
	for range burst >> 10 {
		sink = append(sink, make([]byte, 1<<10))
	}
	released := func() uint64 {
		s := []metrics.Sample{{Name: "/memory/classes/heap/released:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	before := released()
	runtime.GC() // all of it live: the runtime would keep twice as much
	// (A look now may trim while it is live, returning little: once it is
	// garbage and collected, its free pages are trimmed in turn: the loop
	// below waits for that.)
	sink = nil
	runtime.GC()
	deadline := time.Now().Add(10 * time.Second)
	for tr.Stats().Returned < burst/2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	tr.Stop()
	tr.Stop() // again: nothing
	check()

	st := tr.Stats()
	if st.Trims == 0 {
		t.Fatal("no trim within 10 s of a 64 MiB burst ending")
	}
	// Half the burst, to leave room for pages the test's own goroutines
	// took back meanwhile.
	if got := int64(released()) - int64(before); got < burst/2 || st.Returned < burst/2 {
		t.Errorf("released %d MiB (the trimmer counted %d MiB) after a %d MiB burst", got>>20, st.Returned>>20, burst>>20)
	}
	runtime.KeepAlive(sink)
}

// A heap that grew by less than MinExcess is left alone.
func TestTrimmerLeavesASmallExcessAlone(t *testing.T) {
	tr := Start(Options{Every: 5 * time.Millisecond, MinExcess: 1 << 30})
	for range 16 << 10 {
		sink = append(sink, make([]byte, 1<<10))
	}
	sink = nil
	time.Sleep(100 * time.Millisecond)
	tr.Stop()
	if n := tr.Stats().Trims; n != 0 {
		t.Errorf("%d trims of a heap that grew by 16 MiB, with 1 GiB the excess worth one", n)
	}
}
