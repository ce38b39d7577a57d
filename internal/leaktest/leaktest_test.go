package leaktest

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestFindsALeakAndForgetsItOnceItEnds(t *testing.T) {
	before := Take()
	release := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-release
	}()
	extra := Leaked(before, 50*time.Millisecond)
	if len(extra) != 1 || !strings.Contains(extra[0], "TestFindsALeakAndForgetsItOnceItEnds") {
		t.Fatalf("want the one blocked goroutine reported, got %d:\n%s", len(extra), strings.Join(extra, "\n\n"))
	}
	close(release)
	<-done
	if extra := Leaked(before, Timeout); len(extra) != 0 {
		t.Fatalf("the goroutine ended, yet reported:\n%s", strings.Join(extra, "\n\n"))
	}
}

func TestWaitsForAGoroutineOnItsWayOut(t *testing.T) {
	check := Check(t)
	go time.Sleep(100 * time.Millisecond) // ends well within Timeout
	check()
}

func TestReportsThroughTB(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	ft := &fakeTB{TB: t}
	check := Check(ft)
	go func() { <-release }()
	before := time.Now()
	check()
	if !ft.failed || !strings.Contains(ft.msg, "1 goroutine(s) leaked") {
		t.Fatalf("Check did not fail the test: failed=%v msg=%q", ft.failed, ft.msg)
	}
	if took := time.Since(before); took < Timeout {
		t.Fatalf("Check gave up after %v, before its %v", took, Timeout)
	}
}

type fakeTB struct {
	testing.TB
	failed bool
	msg    string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.failed = true
	f.msg = fmt.Sprintf(format, args...)
}
