package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

func TestPriority(t *testing.T) {
	for _, tc := range []struct {
		level slog.Level
		want  int
	}{
		{slog.LevelError, 3},
		{slog.LevelError + 4, 3},
		{slog.LevelWarn, 4},
		{slog.LevelWarn + 2, 4},
		{slog.LevelInfo, 6},
		{slog.LevelInfo + 1, 6},
		{slog.LevelDebug, 7},
		{slog.LevelDebug - 4, 7},
		{slog.LevelInfo - 1, 7},
	} {
		if got := Priority(tc.level); got != tc.want {
			t.Errorf("Priority(%v) = %d, want %d", tc.level, got, tc.want)
		}
	}
}

// Every line of the journal format starts with the record's priority, one
// record a line, a message or value with newlines included; no time.
func TestJournalFormat(t *testing.T) {
	var buf bytes.Buffer
	lg, err := New(&buf, Journal, slog.LevelDebug)
	if err != nil {
		t.Fatal(err)
	}
	lg.Error("journal failed", "err", errors.New("disk\nfull"))
	lg.Warn("two\nlines\r\nof warning")
	lg.With("component", "mqtt").WithGroup("g").Info("connected", "broker", "tcp://x")
	lg.Debug("tick")
	want := []string{
		`<3>level=ERROR msg="journal failed" err="disk\nfull"`,
		`<4>level=WARN msg="two\nlines\r\nof warning"`,
		`<6>level=INFO msg=connected component=mqtt g.broker=tcp://x`,
		`<7>level=DEBUG msg=tick`,
	}
	got := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("journal format:\n%s\nwant:\n%s", buf.String(), strings.Join(want, "\n"))
	}
}

// A handler under the journal one that writes several lines for a record
// (none of slog's does: they quote newlines) still gets the prefix on
// every line.
func TestJournalEveryLinePrefixed(t *testing.T) {
	var buf bytes.Buffer
	h := NewJournalHandler(&buf, nil).(*journalHandler)
	h.inner = rawHandler{h.buf}
	slog.New(h).Warn("first\nsecond\n")
	if got := buf.String(); got != "<4>first\n<4>second\n" {
		t.Fatalf("a record over two lines: %q", got)
	}
}

// rawHandler writes the message as it is.
type rawHandler struct{ w *bytes.Buffer }

func (rawHandler) Enabled(context.Context, slog.Level) bool { return true }
func (r rawHandler) Handle(_ context.Context, rec slog.Record) error {
	r.w.WriteString(rec.Message)
	return nil
}
func (r rawHandler) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r rawHandler) WithGroup(string) slog.Handler      { return r }

// The journal format is below the level given.
func TestJournalLevel(t *testing.T) {
	var buf bytes.Buffer
	lg, _ := New(&buf, Journal, slog.LevelWarn)
	lg.Info("quiet")
	lg.Warn("loud")
	if buf.String() != "<4>level=WARN msg=loud\n" {
		t.Fatalf("%q", buf.String())
	}
}

// Concurrent records, through derived handlers too, are whole lines.
func TestJournalConcurrent(t *testing.T) {
	var buf syncWriter
	lg, _ := New(&buf, Journal, slog.LevelInfo)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			l := lg.With("worker", i)
			for range 100 {
				l.Error("e", "k", strings.Repeat("x", 100))
				l.Info("i")
			}
		})
	}
	wg.Wait()
	for _, line := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
		if !(strings.HasPrefix(line, "<3>level=ERROR msg=e worker=") && strings.HasSuffix(line, strings.Repeat("x", 100))) &&
			!strings.HasPrefix(line, "<6>level=INFO msg=i worker=") {
			t.Fatalf("torn line %q", line)
		}
	}
}

type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The json format is one JSON object a line with slog's standard keys.
func TestJSONFormat(t *testing.T) {
	var buf bytes.Buffer
	lg, err := New(&buf, JSON, slog.LevelDebug)
	if err != nil {
		t.Fatal(err)
	}
	lg.Error("journal failed", "err", errors.New("disk full"))
	lg.Warn("two\nlines")
	lg.Info("started", "device", "arm1")
	lg.Debug("tick")
	want := []struct{ level, msg string }{{"ERROR", "journal failed"}, {"WARN", "two\nlines"}, {"INFO", "started"}, {"DEBUG", "tick"}}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %d is not JSON (%v): %s", i+1, err, line)
		}
		if rec["level"] != want[i].level || rec["msg"] != want[i].msg || rec["time"] == nil {
			t.Errorf("line %d: %s; want level %s, msg %q and a time", i+1, line, want[i].level, want[i].msg)
		}
	}
	if !strings.Contains(lines[2], `"device":"arm1"`) {
		t.Errorf("attribute lost: %s", lines[2])
	}
}

func TestFormats(t *testing.T) {
	var buf bytes.Buffer
	for _, f := range []string{Auto, Text} {
		buf.Reset()
		lg, err := New(&buf, f, slog.LevelInfo)
		if err != nil {
			t.Fatal(err)
		}
		lg.Info("hi")
		if !strings.HasPrefix(buf.String(), "time=") || !strings.HasSuffix(buf.String(), "level=INFO msg=hi\n") {
			t.Errorf("%s: %q", f, buf.String())
		}
	}
	for _, bad := range []string{"", "JSON", "syslog", "txt"} {
		if _, err := New(&buf, bad, slog.LevelInfo); err == nil || !strings.Contains(err.Error(), Formats) {
			t.Errorf("format %q: %v", bad, err)
		}
	}
}
