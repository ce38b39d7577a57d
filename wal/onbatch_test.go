package wal_test

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/wal"
	"github.com/saga-supervisor/saga-supervisor/wal/crashfs"
)

// batchLog records what Options.OnBatch was told.
type batchLog struct {
	inside  atomic.Int32 // hook calls in progress: must never exceed 1
	overlap atomic.Bool
	mu      sync.Mutex
	calls   []batchCall
}

type batchCall struct {
	records, bytes int
	took           time.Duration
}

func (b *batchLog) ObserveBatch(records, n int, took time.Duration) {
	if b.inside.Add(1) > 1 {
		b.overlap.Store(true)
	}
	b.mu.Lock()
	b.calls = append(b.calls, batchCall{records, n, took})
	b.mu.Unlock()
	b.inside.Add(-1)
}

func (b *batchLog) totals() (calls, records, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.calls {
		records += c.records
		n += c.bytes
	}
	return len(b.calls), records, n
}

// OnBatch is told once per durable batch — lone Appends, group commits,
// lazily flushed Enqueues, rollovers — with counts that add up to Stats,
// never concurrently, and never for a batch that failed.
func TestOnBatchReportsEveryDurableBatch(t *testing.T) {
	const payload = 100
	const frame = 49 + payload // every record here has the same frame size
	fsys := crashfs.New()
	var bl batchLog
	l := mustOpen(t, "/j", wal.Options{SegmentSize: 1024, FS: fsys, OnBatch: &bl})
	p := bytes.Repeat([]byte{7}, payload)

	appendN(t, l, nil, 20, payload) // lone appends, across several rollovers
	var wg sync.WaitGroup
	for range 8 { // concurrent appenders share batches
		wg.Go(func() {
			for range 20 {
				if _, err := l.Append(3, p); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for range 5 {
		if _, err := l.Enqueue(4, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}

	st := l.Stats()
	calls, records, n := bl.totals()
	if uint64(calls) != st.Batches || uint64(records) != st.Records || uint64(n) != st.Bytes {
		t.Fatalf("observer saw %d batches, %d records, %d bytes; Stats says %+v", calls, records, n, st)
	}
	if uint64(records) != l.LastSeq() || st.Rollovers == 0 {
		t.Fatalf("observer saw %d records of %d (rollovers %d)", records, l.LastSeq(), st.Rollovers)
	}
	grouped := false
	bl.mu.Lock()
	for i, c := range bl.calls {
		if c.records < 1 || c.bytes != c.records*frame || c.took < 0 {
			t.Errorf("call %d: %+v (frame %d bytes)", i, c, frame)
		}
		grouped = grouped || c.records > 1
	}
	bl.mu.Unlock()
	if !grouped {
		t.Log("no batch carried more than one record (possible, but group commit went unobserved)")
	}
	if bl.overlap.Load() {
		t.Fatal("ObserveBatch calls overlapped")
	}

	// A failed batch is not reported: the Log is failed instead. (The
	// failing fsync may be a segment preparation's, so append until the
	// Log fails.)
	fsys.FailSyncAfter(1)
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = l.Append(5, p)
	}
	if err == nil {
		t.Fatal("appends with a failing fsync kept succeeding")
	}
	st = l.Stats()
	if calls, records, _ := bl.totals(); uint64(calls) != st.Batches || uint64(records) != st.Records {
		t.Fatalf("after the failure the observer saw %d batches, %d records; Stats says %+v", calls, records, st)
	}
	l.Close()
}
