package wal_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/wal"
)

// verifyWhileWriting verifies a journal over and over while another
// goroutine appends to it, and returns the reports that were not OK.
func verifyWhileWriting(t *testing.T, check func(l *wal.Log, dir string, opt wal.Options) (wal.VerifyReport, error)) []wal.VerifyReport {
	dir := t.TempDir()
	opt := wal.Options{SegmentSize: 1 << 20} // more than one read window: the end is read again
	l := mustOpen(t, dir, opt)
	defer l.Close()
	var stop atomic.Bool
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop.Store(true)
	wg.Add(1)
	go func() {
		defer wg.Done()
		p := make([]byte, 90)
		for !stop.Load() {
			if _, err := l.Append(3, p); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var bad []wal.VerifyReport
	var most uint64
	for pass := 0; pass < 200 || most < 100 && pass < 20000; pass++ {
		rep, err := check(l, dir, opt)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK() {
			bad = append(bad, rep)
		}
		most = max(most, rep.LastSeq)
	}
	if most < 100 {
		t.Fatalf("the passes read %d records at most: too few to tell", most)
	}
	return bad
}

// TestVerifyToWhileWriting: a pass over a journal being written reads only
// what was durable when it began. Reading on into the batch being
// written, Verify would see a frame still zeros followed by a whole one and
// call it damage in the middle of the journal (saga_journal_verified 0 on
// a healthy daemon taking commands during its verification after start).
func TestVerifyToWhileWriting(t *testing.T) {
	bad := verifyWhileWriting(t, func(l *wal.Log, dir string, opt wal.Options) (wal.VerifyReport, error) {
		return wal.VerifyTo(dir, opt, l.DurableSeq())
	})
	for _, rep := range bad[:min(len(bad), 3)] {
		t.Errorf("a pass up to the durable end was not clean: broken %v, torn %v, lost %v", rep.Broken, rep.TornTail, rep.Lost)
	}
}
