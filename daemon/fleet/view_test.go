package fleet

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestViewRows(t *testing.T) {
	now := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	v := NewView("saga/v1")
	sum := func(dev string, mod func(*Summary)) []byte {
		s := Summary{Device: dev, Ready: true, Version: "v1", At: now.Add(-time.Second)}
		if mod != nil {
			mod(&s)
		}
		return Encode(s)
	}
	online, offline := []byte(`{"state":"online","ready":true,"halted":false}`), []byte(`{"state":"offline","ready":false,"halted":false}`)
	for _, d := range []string{"a", "b", "c", "d", "e", "f"} {
		v.Status("saga/v1/"+d+"/status", online)
	}
	v.Summary("saga/v1/a/summary", sum("a", nil))
	v.Summary("saga/v1/b/summary", sum("b", func(s *Summary) { s.Ready, s.Halted, s.HaltReason = false, true, "e-stop\ntopic" }))
	v.Summary("saga/v1/c/summary", sum("c", nil))
	v.Status("saga/v1/c/status", offline)
	v.Summary("saga/v1/d/summary", sum("d", func(s *Summary) { s.At = now.Add(-time.Hour) }))
	v.Summary("saga/v1/e/summary", []byte(`{"v":1,`))
	v.Summary("saga/v1/f/summary", sum("other", nil)) // names another device
	v.Summary("saga/v1/g/h/summary", sum("a", nil))   // not a device topic: ignored
	v.Status("elsewhere/x/status", online)            // not under the prefix: ignored
	v.Summary("saga/v1/n/summary", sum("n", func(s *Summary) { s.Ready = false }))
	rows := v.Rows(now, 15*time.Second)
	want := map[string]string{"a": RowReady, "b": RowHalted, "c": RowOffline, "d": RowStale, "e": RowBad, "f": RowBad, "n": RowOffline}
	if len(rows) != len(want) {
		t.Fatalf("rows %+v, want %d", rows, len(want))
	}
	for _, r := range rows {
		if want[r.Device] != r.State {
			t.Errorf("%s: %s, want %s (%+v)", r.Device, r.State, want[r.Device], r)
		}
	}
	if !strings.Contains(rows[4].Error, "BAD_REQUEST") && !strings.Contains(rows[4].Error, "not a summary") {
		t.Errorf("bad row's error %q does not say why", rows[4].Error)
	}
	var b bytes.Buffer
	if err := WriteTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(b.String(), "\n"); lines != len(rows)+1 {
		t.Errorf("table of %d lines for %d rows (a reason broke a row?):\n%s", lines, len(rows), b.String())
	}
}
