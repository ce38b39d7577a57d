// Package latency measures the device's fsync floor and summarises latency
// samples. The floor — one pwrite into a preallocated file followed by
// fdatasync — is what every durable journal append is judged against: the
// supervisor's benchmarks report their figures as ratios to a floor measured
// in the same run, because absolute times on shared machines (and SD cards)
// drift, and an SD card and an NVMe disk differ a hundredfold.
package latency

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
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

// floorFileSize is how much the floor preallocates: as much as a journal
// segment, so the file system treats both alike.
const floorFileSize = 16 << 20

// Floor measures n appends of size bytes into a preallocated file in dir,
// each followed by fdatasync, and removes the file. The file is prepared the
// way journal segments are — fallocate, zeros written, fsync — which is the
// cheapest case for fdatasync, so the floor is the best this disk can do and
// ratios to it are not flattered. A warm-up lets the device finish writing
// the zeros before timing starts.
func Floor(dir string, n, size int) (Samples, error) { return FloorGap(dir, n, size, 0) }

// FloorGap is Floor with the disk left idle for gap before each sample. A
// command arriving now and then finds the device (and, in a VM, the vCPU)
// idle, and its fdatasync costs more than back-to-back ones — about twice
// on the CI machine at a 1 ms gap — so a latency measured one command at a
// time is fairly compared with FloorGap at the same spacing, not Floor.
func FloorGap(dir string, n, size int, gap time.Duration) (Samples, error) {
	path := filepath.Join(dir, "fsync-floor.tmp")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer os.Remove(path)
	defer f.Close()
	total := max(int64(floorFileSize), int64(n+1)*int64(size))
	if err := preallocate(f, total); err != nil {
		return nil, fmt.Errorf("preallocate: %w", err)
	}
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < total; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros[:min(int64(len(zeros)), total-off)], off); err != nil {
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
	write := func(off int64) error {
		if _, err := f.WriteAt(rec, off); err != nil {
			return err
		}
		if err := datasync(f); err != nil {
			return fmt.Errorf("fdatasync: %w", err)
		}
		return nil
	}
	for i := range 200 { // warm-up, at the far end of the file
		if err := write(total - int64(i+1)*int64(size)); err != nil {
			return nil, err
		}
	}
	out := make(Samples, 0, n)
	for i := range n {
		if gap > 0 {
			time.Sleep(gap)
		}
		t0 := time.Now()
		if err := write(int64(i) * int64(size)); err != nil {
			return nil, err
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}
