package sim

import (
	"context"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock tests move by hand, so motion is checked exactly
// rather than with sleeps.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// worldPath returns a fresh world file path in the test's temporary folder.
func worldPath(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "world.sim")
}

func openWorld(t *testing.T, path string, opts ...Option) *World {
	t.Helper()
	w, err := OpenWorld(path, opts...)
	if err != nil {
		t.Fatalf("OpenWorld(%q): %v", path, err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func mustSet(t *testing.T, d interface {
	Set(context.Context, float64) error
}, v float64) {
	t.Helper()
	if err := d.Set(context.Background(), v); err != nil {
		t.Fatalf("Set(%g): %v", v, err)
	}
}

func readBack(t *testing.T, d interface {
	ReadBack(context.Context) (float64, error)
}) float64 {
	t.Helper()
	v, err := d.ReadBack(context.Background())
	if err != nil {
		t.Fatalf("ReadBack: %v", err)
	}
	return v
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
