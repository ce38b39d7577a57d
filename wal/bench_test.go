//go:build linux

package wal_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	twal "github.com/tidwall/wal"

	"github.com/saga-supervisor/saga-supervisor/internal/latency"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// The journal benchmarks run on the real disk (b.TempDir) and time every
// operation, because what matters for a safety journal is the latency of
// one durable append, not throughput averaged over a run. Ratios are to the
// fsync floor — pwrite of one record into a preallocated file plus
// fdatasync — measured first, in the same process, on the same disk:
// absolute numbers differ wildly between an SD card and a laptop NVMe, the
// ratios much less.
//
//	go test -run '^$' -bench Journal -benchtime 2000x ./wal/
//
// Linux only (build tag): the floor calls fallocate and fdatasync directly.

const benchRecord = 200

// latencies collects per-operation durations.
type latencies = latency.Samples

// report emits p50/p99 and their ratios to the floor (when known).
func report(b *testing.B, l latencies, floorP50 time.Duration) (p50, p99 time.Duration) {
	p50, p99 = l.Percentile(0.50), l.Percentile(0.99)
	b.ReportMetric(float64(p50.Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(p99.Nanoseconds()), "p99-ns")
	if floorP50 > 0 {
		b.ReportMetric(float64(p50)/float64(floorP50), "p50-x-floor")
		b.ReportMetric(float64(p99)/float64(floorP50), "p99-x-floor")
	}
	return p50, p99
}

// measureFloor is the shared fsync floor (internal/latency), the same one
// the engine benchmarks and the bench command use.
func measureFloor(tb testing.TB, dir string, n int) latencies {
	lat, err := latency.Floor(dir, n, benchRecord)
	if err != nil {
		tb.Fatal(err)
	}
	return lat
}

func BenchmarkJournal(b *testing.B) {
	var floorP50 time.Duration
	floor := func(b *testing.B) time.Duration {
		if floorP50 == 0 { // the floor sub-benchmark was filtered out
			floorP50 = measureFloor(b, b.TempDir(), 500).Percentile(0.5)
		}
		return floorP50
	}

	b.Run("floor", func(b *testing.B) {
		lat := measureFloor(b, b.TempDir(), b.N)
		floorP50, _ = report(b, lat, 0)
	})

	b.Run("append", func(b *testing.B) {
		fp := floor(b)
		l, err := wal.Open(b.TempDir(), wal.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		payload := make([]byte, benchRecord)
		for range 20 { // warm up: the background segment preparation runs now
			if _, err := l.Append(1, payload); err != nil {
				b.Fatal(err)
			}
		}
		lat := make(latencies, b.N)
		b.ResetTimer()
		for i := range b.N {
			t0 := time.Now()
			if _, err := l.Append(1, payload); err != nil {
				b.Fatal(err)
			}
			lat[i] = time.Since(t0)
		}
		b.StopTimer()
		report(b, lat, fp)
	})

	b.Run("tidwall", func(b *testing.B) {
		fp := floor(b)
		l, err := twal.Open(b.TempDir(), nil) // nil: defaults, NoSync false (fsync each Write)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		payload := make([]byte, benchRecord)
		lat := make(latencies, b.N)
		b.ResetTimer()
		for i := range b.N {
			t0 := time.Now()
			if err := l.Write(uint64(i+1), payload); err != nil {
				b.Fatal(err)
			}
			lat[i] = time.Since(t0)
		}
		b.StopTimer()
		report(b, lat, fp)
	})

	for _, n := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("group/%d", n), func(b *testing.B) {
			fp := floor(b)
			l, err := wal.Open(b.TempDir(), wal.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			per := (b.N + n - 1) / n
			lats := make([]latencies, n)
			var wg, warm sync.WaitGroup
			errs := make(chan error, 2*n)
			go1 := make(chan struct{})
			// Start the goroutines and let each append a few records
			// untimed, so that what is measured is the steady state of N
			// appenders, not goroutine start-up.
			warm.Add(n)
			for g := range n {
				lats[g] = make(latencies, per)
				wg.Go(func() {
					payload := make([]byte, benchRecord)
					for range 5 {
						if _, err := l.Append(1, payload); err != nil {
							errs <- err
						}
					}
					warm.Done()
					<-go1
					for i := range per {
						t0 := time.Now()
						if _, err := l.Append(1, payload); err != nil {
							errs <- err
							return
						}
						lats[g][i] = time.Since(t0)
					}
				})
			}
			warm.Wait()
			st0 := l.Stats()
			b.ResetTimer()
			start := time.Now()
			close(go1)
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			close(errs)
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
			var all latencies
			for _, l := range lats {
				all = append(all, l...)
			}
			report(b, all, fp)
			b.ReportMetric(float64(len(all))/elapsed.Seconds(), "records/s")
			st := l.Stats()
			b.ReportMetric(float64(st.Records-st0.Records)/float64(st.Batches-st0.Batches), "records/batch")
		})
	}
}

// BenchmarkEnqueue measures the caller's cost of Enqueue (frame, SHA-256,
// CRC under the mutex) for a 150-byte payload; the writer drains in the
// background.
func BenchmarkEnqueue(b *testing.B) {
	l, err := wal.Open(b.TempDir(), wal.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	payload := make([]byte, 150)
	// Warm up to the steady state: the two batch buffers grow (once per
	// process) to the size the writer's pace needs.
	for range 50000 {
		if _, err := l.Enqueue(1, payload); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.Sync(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := l.Enqueue(1, payload); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := l.Sync(); err != nil {
		b.Fatal(err)
	}
}
