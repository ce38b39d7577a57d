package wal_test

import (
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/wal"
	"github.com/saga-supervisor/saga-supervisor/wal/crashfs"
)

// concurrentRun has goroutines append (mixing Append, Enqueue and Sync) and
// checks that seqs are unique and contiguous, that each goroutine's records
// are in its own order, and that the chain verifies.
func concurrentRun(t *testing.T, dir string, opt wal.Options, goroutines, perG int) {
	l := mustOpen(t, dir, opt)
	var mu sync.Mutex
	var seqs []uint64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			var mine []uint64
			for i := range perG {
				p := make([]byte, 8+i%64)
				binary.LittleEndian.PutUint32(p, uint32(g))
				binary.LittleEndian.PutUint32(p[4:], uint32(i))
				var seq uint64
				var err error
				switch i % 3 {
				case 0:
					seq, err = l.Append(1, p)
				case 1:
					seq, err = l.Enqueue(2, p)
				default:
					seq, err = l.Enqueue(3, p)
					if err == nil {
						err = l.Sync()
						if err == nil && l.DurableSeq() < seq {
							t.Errorf("Sync returned before seq %d was durable", seq)
						}
					}
				}
				if err != nil {
					t.Error(err)
					return
				}
				mine = append(mine, seq)
			}
			if !slices.IsSorted(mine) {
				t.Errorf("goroutine %d got seqs out of order", g)
			}
			mu.Lock()
			seqs = append(seqs, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(seqs)
	for i, s := range seqs {
		if s != uint64(i+1) {
			t.Fatalf("seqs not unique and contiguous: position %d holds %d", i, s)
		}
	}
	vr, err := wal.Verify(dir, opt)
	if err != nil || !vr.OK() || vr.LastSeq != uint64(goroutines*perG) {
		t.Fatalf("Verify: %+v %v", vr, err)
	}
	next := make([]uint32, goroutines)
	err = wal.Scan(dir, opt, 1, func(r wal.Record) error {
		g, i := binary.LittleEndian.Uint32(r.Payload), binary.LittleEndian.Uint32(r.Payload[4:])
		if i != next[g] || len(r.Payload) != int(8+i%64) {
			t.Fatalf("seq %d: goroutine %d record %d, want %d", r.Seq, g, i, next[g])
		}
		next[g]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentAppendersCrashFS(t *testing.T) {
	concurrentRun(t, "/j", wal.Options{SegmentSize: 4096, FS: crashfs.New()}, 16, 200)
}

func TestConcurrentAppendersOS(t *testing.T) {
	concurrentRun(t, t.TempDir(), wal.Options{SegmentSize: 16 << 10}, 8, 60)
}

// Appenders racing Close either succeed (and their record survives) or get
// ErrClosed.
func TestCloseWhileAppending(t *testing.T) {
	fsys := crashfs.New()
	opt := wal.Options{SegmentSize: 2048, FS: fsys}
	l := mustOpen(t, "/j", opt)
	var acked atomic.Uint64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				seq, err := l.Append(1, []byte("racing close"))
				if err != nil {
					if !errors.Is(err, wal.ErrClosed) {
						t.Errorf("Append: %v", err)
					}
					return
				}
				for {
					cur := acked.Load()
					if seq <= cur || acked.CompareAndSwap(cur, seq) {
						break
					}
				}
			}
		})
	}
	time.Sleep(5 * time.Millisecond)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	vr, err := wal.Verify("/j", wal.Options{FS: fsys.Crash(crashfs.DropUnsynced())})
	if err != nil || !vr.OK() || vr.LastSeq < acked.Load() {
		t.Fatalf("Verify %+v %v, acked %d", vr, err, acked.Load())
	}
}

// Concurrent appenders share fsyncs: with slow syncs, far fewer syncs than
// records.
func TestGroupCommitSharesSyncs(t *testing.T) {
	fsys := crashfs.New()
	var segSyncs atomic.Int64
	fsys.SetFault(func(op crashfs.Op) error {
		if op.Kind == crashfs.OpSync {
			segSyncs.Add(1)
			time.Sleep(200 * time.Microsecond) // a slow disk
		}
		return nil
	})
	l := mustOpen(t, "/j", wal.Options{SegmentSize: 1 << 20, FS: fsys})
	const goroutines, per = 32, 20
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range per {
				if _, err := l.Append(1, make([]byte, 100)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	st := l.Stats()
	l.Close()
	if n := segSyncs.Load(); n > goroutines*per/4 {
		t.Fatalf("%d syncs for %d records: no group commit", n, goroutines*per)
	} else {
		t.Logf("%d records, %d fsyncs, %+v", goroutines*per, n, st)
	}
	if st.Records != goroutines*per || st.Batches == 0 || st.Batches > uint64(segSyncs.Load()) {
		t.Fatalf("Stats %+v", st)
	}
}

// A producer much faster than the disk is held back (Enqueue blocks while
// maxPending bytes wait) instead of growing memory without bound, and
// everything still gets written.
func TestEnqueueBackpressure(t *testing.T) {
	fsys := crashfs.New()
	fsys.SetFault(func(op crashfs.Op) error {
		if op.Kind == crashfs.OpSync {
			time.Sleep(2 * time.Millisecond)
		}
		return nil
	})
	l := mustOpen(t, "/j", wal.Options{SegmentSize: 1 << 20, FS: fsys})
	p := make([]byte, 16<<10)
	const n = 700 // ~11 MiB, more than twice maxPending
	for i := range n {
		binary.LittleEndian.PutUint32(p, uint32(i))
		if _, err := l.Enqueue(1, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	st := l.Stats()
	l.Close()
	if st.Records != n || st.Batches < 3 || st.Rollovers < 10 {
		t.Fatalf("Stats %+v", st)
	}
	var i uint32
	err := wal.Scan("/j", wal.Options{FS: fsys}, 1, func(r wal.Record) error {
		if binary.LittleEndian.Uint32(r.Payload) != i {
			t.Fatalf("record %d out of order", r.Seq)
		}
		i++
		return nil
	})
	if err != nil || i != n {
		t.Fatalf("%d records, %v", i, err)
	}
}
