package retrylog

import (
	"errors"
	"testing"
	"time"
)

// A failure retried every 500 ms for ten minutes is logged at 0 s, then
// after pauses of 5, 10, 20, 40, 80 and 160 s (the next, 300 s, ends past ten minutes); a new error is logged at
// once; Up clears the state and reports the outage.
func TestGate(t *testing.T) {
	var g Gate
	t0 := time.Unix(1000, 0)
	refused := errors.New("connection refused")
	var at []time.Duration
	total := 0
	for d := time.Duration(0); d <= 10*time.Minute; d += 500 * time.Millisecond {
		if log, n := g.Failed(refused, t0.Add(d)); log {
			at = append(at, d)
			total += n
		}
	}
	want := []time.Duration{0, 5 * time.Second, 15 * time.Second, 35 * time.Second, 75 * time.Second, 155 * time.Second, 315 * time.Second}
	if len(at) != len(want) {
		t.Fatalf("logged at %v, want %v", at, want)
	}
	for i := range want {
		if at[i] != want[i] {
			t.Fatalf("logged at %v, want %v", at, want)
		}
	}
	if total != 631 { // every attempt up to the last line, 0 s to 315 s, counted once
		t.Errorf("attempts reported %d, want 631", total)
	}
	if log, n := g.Failed(errors.New("not authorized"), t0.Add(600*time.Second+time.Millisecond)); !log || n != 571 { // the 570 unlogged since 315 s, and this one
		t.Errorf("a changed error: log %v attempts %d, want true 571", log, n)
	}
	if g.Err() == nil {
		t.Error("Err nil while failing")
	}
	if was, d, logged := g.Up(t0.Add(601 * time.Second)); !was || d != 601*time.Second || !logged {
		t.Errorf("Up: %v %v %v, want true 601s true", was, d, logged)
	}
	if was, _, logged := g.Up(t0.Add(602 * time.Second)); was || logged || g.Err() != nil {
		t.Error("Up twice reports a second outage, or Err survives Up")
	}
	if log, _ := g.Failed(refused, t0.Add(603*time.Second)); !log {
		t.Error("the first failure after Up not logged")
	}
	g.Up(t0)
	g.Record(refused, t0)
	if was, _, logged := g.Up(t0.Add(time.Second)); !was || logged {
		t.Errorf("after Record: Up says was %v logged %v, want true false", was, logged)
	}
}
