package embedded

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A message mochi repeats (a warning per dropped message) reaches the log
// once per interval, with the count of those held back; other messages
// pass as they come.
func TestQuietHandler(t *testing.T) {
	var buf bytes.Buffer
	base := slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}})
	h := newQuietHandler(base, time.Second)
	lg := slog.New(h).With("component", "broker")
	t0 := time.Now()
	for i := range 1000 {
		r := slog.NewRecord(t0.Add(time.Duration(i)*time.Millisecond/2), slog.LevelWarn, "client store quota reached", 0)
		r.AddAttrs(slog.String("client", "sup"))
		lg.Handler().Handle(t.Context(), r)
	}
	lg.Info("a different message")
	r := slog.NewRecord(t0.Add(1100*time.Millisecond), slog.LevelWarn, "client store quota reached", 0)
	lg.Handler().Handle(t.Context(), r)

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], "client=sup") || strings.Contains(lines[0], "suppressed") {
		t.Errorf("first line %q: want the message as logged", lines[0])
	}
	if !strings.Contains(lines[1], "a different message") {
		t.Errorf("second line %q: another message is not held back", lines[1])
	}
	if !strings.Contains(lines[2], "suppressed=999") || !strings.Contains(lines[2], "component=broker") {
		t.Errorf("third line %q: want the count held back (999) and the attributes", lines[2])
	}
}

// mochi logs a listener's read error at close with an empty message: the
// record reaches the log with one (`run --log-format json` promises a msg
// on every line, also at a shutdown: TestRunLogFormatJSON).
func TestQuietHandlerGivesAMessage(t *testing.T) {
	var buf bytes.Buffer
	lg := slog.New(newQuietHandler(slog.NewJSONHandler(&buf, nil), time.Second))
	lg.Warn("", "listener", "saga", "error", "use of closed network connection")
	if strings.Contains(buf.String(), `"msg":""`) || !strings.Contains(buf.String(), `"msg":"`+noMessage+`"`) {
		t.Fatalf("logged %s", buf.String())
	}
}
