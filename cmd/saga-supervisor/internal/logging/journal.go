package logging

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
)

// Syslog priorities (sd-daemon(3): SD_ERR, SD_WARNING, SD_INFO, SD_DEBUG).
const (
	PriorityErr     = 3
	PriorityWarning = 4
	PriorityInfo    = 6
	PriorityDebug   = 7
)

// Priority maps a slog level to the syslog priority journald files it
// under. Levels between slog's four go with the one below them (a level
// of Warn+2 is still a warning).
func Priority(l slog.Level) int {
	switch {
	case l >= slog.LevelError:
		return PriorityErr
	case l >= slog.LevelWarn:
		return PriorityWarning
	case l >= slog.LevelInfo:
		return PriorityInfo
	}
	return PriorityDebug
}

// journalHandler formats a record as slog's text handler does, without the
// time, and writes each line of it led by "<N>", the record's priority.
// slog quotes a value or key holding a newline, so a record is one line;
// should one ever span more, every line still carries the prefix, since
// journald reads each line as an entry of its own.
type journalHandler struct {
	mu    *sync.Mutex   // shared by the handlers derived by WithAttrs and WithGroup
	buf   *bytes.Buffer // the record being formatted, under mu
	inner slog.Handler  // a text handler writing to buf
	out   io.Writer
}

// NewJournalHandler returns the handler of the journal format.
func NewJournalHandler(w io.Writer, opts *slog.HandlerOptions) slog.Handler {
	o := slog.HandlerOptions{}
	if opts != nil {
		o = *opts
	}
	replace := o.ReplaceAttr
	o.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{} // journald stamps every line
		}
		if replace != nil {
			return replace(groups, a)
		}
		return a
	}
	buf := new(bytes.Buffer)
	return &journalHandler{mu: new(sync.Mutex), buf: buf, inner: slog.NewTextHandler(buf, &o), out: w}
}

func (h *journalHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *journalHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.buf.Reset()
	if err := h.inner.Handle(ctx, r); err != nil {
		return err
	}
	prefix := "<" + strconv.Itoa(Priority(r.Level)) + ">"
	text := bytes.TrimSuffix(h.buf.Bytes(), []byte("\n"))
	out := make([]byte, 0, len(text)+len(prefix)+1)
	for line := range bytes.SplitSeq(text, []byte("\n")) {
		out = append(out, prefix...)
		out = append(out, line...)
		out = append(out, '\n')
	}
	_, err := h.out.Write(out) // one write: lines of concurrent records never interleave
	return err
}

func (h *journalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &journalHandler{mu: h.mu, buf: h.buf, inner: h.inner.WithAttrs(as), out: h.out}
}

func (h *journalHandler) WithGroup(name string) slog.Handler {
	return &journalHandler{mu: h.mu, buf: h.buf, inner: h.inner.WithGroup(name), out: h.out}
}
