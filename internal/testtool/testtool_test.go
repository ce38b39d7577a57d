package testtool

import (
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"
)

// recorder stands in for a test, to see whether Need failed or skipped.
type recorder struct {
	testing.TB
	failed, skipped bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Fatalf(string, ...any) { r.failed = true; runtime.Goexit() }
func (r *recorder) Skipf(string, ...any)  { r.skipped = true; runtime.Goexit() }
func (r *recorder) run(f func(testing.TB)) *recorder {
	done := make(chan struct{})
	go func() { defer close(done); f(r) }()
	<-done
	return r
}

// TestNeed: a program on PATH is found; a missing one fails the test under
// CI and skips it elsewhere.
func TestNeed(t *testing.T) {
	if p := Need(t, "coreutils", "no-such-program-here", "sh"); p == "" {
		t.Fatal("sh not found")
	}
	t.Setenv("CI", "")
	if r := new(recorder).run(func(tb testing.TB) { Need(tb, "x", "no-such-program-here") }); !r.skipped || r.failed {
		t.Errorf("outside CI: skipped %v, failed %v; want a skip", r.skipped, r.failed)
	}
	t.Setenv("CI", "true")
	if r := new(recorder).run(func(tb testing.TB) { Need(tb, "x", "no-such-program-here") }); !r.failed || r.skipped {
		t.Errorf("under CI: failed %v, skipped %v; want a failure", r.failed, r.skipped)
	}
}

// TestSlow: SAGA_TEST_SLOW stretches a time; unset, it is left alone.
func TestSlow(t *testing.T) {
	t.Setenv(SlowEnv, "")
	if d := Slow(200 * time.Millisecond); d != 200*time.Millisecond {
		t.Errorf("unset: %v, want 200ms", d)
	}
	t.Setenv(SlowEnv, "2.5")
	if d := Slow(200 * time.Millisecond); d != 500*time.Millisecond {
		t.Errorf("2.5: %v, want 500ms", d)
	}
	for _, bad := range []string{"0.5", "x", "1000"} {
		t.Setenv(SlowEnv, bad)
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s=%s accepted", SlowEnv, bad)
				}
			}()
			Slow(time.Second)
		}()
	}
}

// FreePort's ports are below the ephemeral range, and free.
func TestFreePortBelowTheEphemeralRange(t *testing.T) {
	lo := ephemeralLow()
	for range 50 {
		p := FreePort(t)
		if p >= lo || p < 10000 {
			t.Fatalf("FreePort = %d, want in [10000, %d)", p, lo)
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("FreePort's %d: %v", p, err)
		}
		ln.Close()
	}
}
