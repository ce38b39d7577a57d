// Package leaktest finds goroutines a component leaves behind: snapshot the
// goroutines before starting it, close it, and Check waits (up to
// Timeout) until only those of the snapshot remain, failing the test with
// the stacks of the ones that do not. It uses only runtime.Stack: no
// dependency, no global state.
//
//	check := leaktest.Check(t)
//	e := start()
//	... use e ...
//	e.Close()
//	check() // fails t if a goroutine e started is still running
package leaktest

import (
	"bytes"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// Timeout is how long Check and Leaked wait for goroutines to end: a
// goroutine a Close has released may still be on its way out.
const Timeout = 2 * time.Second

// Snapshot is the set of goroutines running at one moment, by id.
type Snapshot map[string]bool

// Take snapshots the goroutines running now.
func Take() Snapshot {
	s := Snapshot{}
	for _, g := range goroutines() {
		s[id(g)] = true
	}
	return s
}

// Leaked waits up to timeout for every goroutine not in before to end, and
// returns the stacks of those still running then (nil if none).
func Leaked(before Snapshot, timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for {
		var extra []string
		for _, g := range goroutines() {
			if !before[id(g)] && !ignored(g) {
				extra = append(extra, g)
			}
		}
		if len(extra) == 0 || time.Now().After(deadline) {
			return extra
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Check snapshots the goroutines now; the func it returns, called once
// everything the test started is closed, fails tb with the stacks of the
// goroutines started since that are still running after Timeout.
func Check(tb testing.TB) func() {
	tb.Helper()
	before := Take()
	return func() {
		tb.Helper()
		if extra := Leaked(before, Timeout); len(extra) > 0 {
			tb.Errorf("%d goroutine(s) leaked:\n\n%s", len(extra), strings.Join(extra, "\n\n"))
		}
	}
}

// goroutines returns the stack of every goroutine but the caller's.
func goroutines() []string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	all := strings.Split(string(bytes.TrimSpace(buf)), "\n\n")
	return slices.Delete(all, 0, 1) // the first is the calling goroutine
}

// id is a goroutine's header line's number: "goroutine 17 [chan receive]:".
func id(g string) string {
	f := strings.Fields(g)
	if len(f) < 2 {
		return g
	}
	return f[1]
}

// ignored are goroutines of the runtime and the testing package that
// start lazily, whatever the code under test does.
func ignored(g string) bool {
	for _, s := range []string{
		"testing.(*T).Run(",     // a subtest's parent waiting
		"testing.tRunner(",      // another test (parallel, or a subtest)
		"testing.runFuzzing(",   // the fuzzing engine
		"os/signal.signal_recv", // signal.Notify's loop, started once
		"runtime.ensureSigM",    // idem
		"runtime/trace.Start",   // tracing, when -trace is given
	} {
		if strings.Contains(g, s) {
			return true
		}
	}
	return false
}
