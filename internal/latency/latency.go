// Package latency measures the device's fsync floor and summarises latency
// samples. The floor — one pwrite into a preallocated file followed by
// fdatasync — is what every durable journal append is judged against: the
// supervisor's benchmarks report their figures as ratios to a floor measured
// in the same run, because absolute times on shared machines (and SD cards)
// drift.
package latency

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// Samples are latencies of individual operations.
type Samples []time.Duration

// Percentile returns the p-th percentile (0 < p ≤ 1) by nearest rank.
func (s Samples) Percentile(p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	c := slices.Clone(s)
	slices.Sort(c)
	i := int(p*float64(len(c))+0.5) - 1
	return c[max(0, min(i, len(c)-1))]
}

// Floor measures n appends of size bytes into a preallocated file in dir,
// each followed by fdatasync, and removes the file.
func Floor(dir string, n, size int) (Samples, error) {
	path := filepath.Join(dir, "fsync-floor.tmp")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer os.Remove(path)
	defer f.Close()
	total := int64(n+1) * int64(size)
	if err := unix.Fallocate(int(f.Fd()), 0, 0, total); err != nil {
		// Not every file system preallocates: write the zeros instead.
		if _, err := f.WriteAt(make([]byte, total), 0); err != nil {
			return nil, err
		}
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	rec := make([]byte, size)
	for i := range rec {
		rec[i] = byte(i) | 1
	}
	out := make(Samples, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if _, err := f.WriteAt(rec, int64(i*size)); err != nil {
			return nil, err
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return nil, fmt.Errorf("fdatasync: %w", err)
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}
