package systemd

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a Notify that keeps what was sent.
type recorder struct {
	mu   sync.Mutex
	sent []string
}

func (r *recorder) notify(s string) error {
	r.mu.Lock()
	r.sent = append(r.sent, s)
	r.mu.Unlock()
	return nil
}

func (r *recorder) count(prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.sent {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

// waitCount waits until at least n lines with prefix were sent.
func (r *recorder) waitCount(t *testing.T, prefix string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for r.count(prefix) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d %q sent, want %d", r.count(prefix), prefix, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestFeedOnlyWhileAlive: the watchdog is fed while alive holds, starves
// while it fails, and is fed again when it holds again.
func TestFeedOnlyWhileAlive(t *testing.T) {
	var r recorder
	var stuck atomic.Bool
	alive := func() error {
		if stuck.Load() {
			return errors.New("stuck")
		}
		return nil
	}
	stop := Feed(r.notify, 5*time.Millisecond, alive, slog.New(slog.DiscardHandler))
	defer stop()
	r.waitCount(t, "WATCHDOG=1", 3)
	stuck.Store(true)
	time.Sleep(10 * time.Millisecond) // a tick in flight may still feed
	n := r.count("WATCHDOG=1")
	time.Sleep(100 * time.Millisecond) // twenty ticks
	if got := r.count("WATCHDOG=1"); got != n {
		t.Fatalf("fed %d times while alive failed", got-n)
	}
	stuck.Store(false)
	r.waitCount(t, "WATCHDOG=1", n+2)
}

// TestExtendOnlyOnProgress: EXTEND_TIMEOUT_USEC goes out in the ticks in
// which progress moved, never otherwise.
func TestExtendOnlyOnProgress(t *testing.T) {
	var r recorder
	var progress atomic.Uint64
	stop := Extend(r.notify, 5*time.Millisecond, 10*time.Second, progress.Load)
	time.Sleep(50 * time.Millisecond) // ten ticks, no progress
	if n := r.count("EXTEND_TIMEOUT_USEC="); n != 0 {
		t.Fatalf("extended %d times without progress", n)
	}
	progress.Add(1)
	r.waitCount(t, "EXTEND_TIMEOUT_USEC=10000000", 1)
	time.Sleep(50 * time.Millisecond)
	if n := r.count("EXTEND_TIMEOUT_USEC="); n != 1 {
		t.Fatalf("extended %d times for one step of progress", n)
	}
	progress.Add(5)
	r.waitCount(t, "EXTEND_TIMEOUT_USEC=", 2)
	stop()
	n := r.count("")
	progress.Add(1)
	time.Sleep(30 * time.Millisecond)
	if r.count("") != n {
		t.Fatal("sent after stop")
	}
}
