package wal_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/wal"
	"github.com/saga-supervisor/saga-supervisor/wal/crashfs"
)

// Any write, fsync or rollover failure is fatal and sticky: the failing
// Append reports it, Err keeps it, every later call fails with it, the
// segment is never fsynced again, and everything acknowledged before the
// failure survives a crash.
func TestIOFailureIsFatalAndSticky(t *testing.T) {
	failOn := func(kind crashfs.OpKind) func(*crashfs.FS) {
		return func(f *crashfs.FS) {
			f.SetFault(func(op crashfs.Op) error {
				if op.Kind == kind {
					return fmt.Errorf("%w: %s", crashfs.ErrInjected, kind)
				}
				return nil
			})
		}
	}
	cases := []struct {
		name string
		arm  func(*crashfs.FS)
	}{
		{"sync", func(f *crashfs.FS) { f.FailSyncAfter(1) }},
		{"write", func(f *crashfs.FS) { f.FailWriteAfter(1) }},
		{"later sync", func(f *crashfs.FS) { f.FailSyncAfter(5) }},
		{"rename at rollover", failOn(crashfs.OpRename)},
		{"directory sync at rollover", failOn(crashfs.OpSyncDir)},
		{"preallocation", failOn(crashfs.OpAllocate)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fsys := crashfs.New()
			opt := wal.Options{SegmentSize: 1024, FS: fsys}
			m := newModel()
			l := mustOpen(t, "/j", opt)
			appendN(t, l, m, 3, 100)
			c.arm(fsys)
			var err error
			for i := 0; i < 100 && err == nil; i++ {
				var seq uint64
				p := []byte(strings.Repeat("x", 100))
				seq, err = l.Append(9, p)
				if seq != 0 {
					m.wrote(seq, 9, p)
				}
				if err == nil {
					m.ack(seq)
				}
			}
			if !errors.Is(err, wal.ErrFatal) || !errors.Is(err, crashfs.ErrInjected) {
				t.Fatalf("Append error %v", err)
			}
			var fe *wal.FatalError
			if !errors.As(err, &fe) || fe.Op == "" {
				t.Fatalf("not a *FatalError: %#v", err)
			}
			if l.Err() != err {
				t.Fatalf("Err() = %v, want %v", l.Err(), err)
			}
			// Sticky, and no fsync is retried on the segments.
			fsys.SetFault(func(op crashfs.Op) error {
				if op.Kind == crashfs.OpSync && strings.HasSuffix(op.Path, ".wal") {
					t.Errorf("segment fsynced after the failure: %v", op)
				}
				return nil
			})
			if _, err2 := l.Append(1, nil); err2 != err {
				t.Fatalf("later Append: %v", err2)
			}
			if _, err2 := l.Enqueue(1, nil); err2 != err {
				t.Fatalf("later Enqueue: %v", err2)
			}
			if err2 := l.Sync(); err2 != err {
				t.Fatalf("later Sync: %v", err2)
			}
			if err2 := l.Close(); err2 != err {
				t.Fatalf("Close: %v", err2)
			}
			checkRecovery(t, fsys.Crash(crashfs.DropUnsynced()), "/j", opt, m).log.Close()
		})
	}
}

// Every waiter of the failed batch gets the error; nobody hangs.
func TestFatalReleasesAllWaiters(t *testing.T) {
	fsys := crashfs.New()
	opt := wal.Options{SegmentSize: 4096, FS: fsys}
	l := mustOpen(t, "/j", opt)
	defer l.Close()
	// Slow syncs so that batches fill up, then one fails.
	var syncs int
	fsys.SetFault(func(op crashfs.Op) error {
		if op.Kind != crashfs.OpSync {
			return nil
		}
		time.Sleep(time.Millisecond)
		if syncs++; syncs == 4 {
			return crashfs.ErrInjected
		}
		return nil
	})
	const goroutines = 16
	var wg sync.WaitGroup
	errs := make([]error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			for {
				if _, err := l.Append(1, []byte("waiting")); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("appenders still blocked after a fatal error")
	}
	for g, err := range errs {
		if !errors.Is(err, wal.ErrFatal) || err != l.Err() {
			t.Fatalf("goroutine %d: %v", g, err)
		}
	}
}
