package embedded

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// quietHandler passes each distinct message of mochi's log at most once
// per interval, and counts what it held back on the next one it passes
// (suppressed=N). mochi logs a warning per message it drops: a flood at a
// congested subscriber wrote thousands of identical lines a second into
// the daemon's log (and the journal behind it), burying what mattered.
type quietHandler struct {
	next     slog.Handler
	interval time.Duration
	state    *quietState // shared by the handlers WithAttrs and WithGroup make
}

type quietState struct {
	mu   sync.Mutex
	last map[string]quietEntry
}

type quietEntry struct {
	at         time.Time
	suppressed int
}

// maxQuietKeys bounds the messages remembered: mochi's are a fixed set of
// constant strings, but a bound costs nothing.
const maxQuietKeys = 256

// noMessage stands in for the message mochi did not give.
const noMessage = "broker: an error without a message"

func newQuietHandler(next slog.Handler, interval time.Duration) *quietHandler {
	return &quietHandler{next: next, interval: interval, state: &quietState{last: map[string]quietEntry{}}}
}

func (h *quietHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *quietHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "" {
		// mochi logs some errors with no message at all (a listener's
		// read error as it closes): a record without one says nothing
		// in a text log and breaks a JSON log's promise of a msg.
		r.Message = noMessage
	}
	s := h.state
	s.mu.Lock()
	e, seen := s.last[r.Message]
	if seen && r.Time.Sub(e.at) < h.interval {
		e.suppressed++
		s.last[r.Message] = e
		s.mu.Unlock()
		return nil
	}
	if !seen && len(s.last) >= maxQuietKeys {
		clear(s.last)
	}
	s.last[r.Message] = quietEntry{at: r.Time}
	s.mu.Unlock()
	if e.suppressed > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int("suppressed", e.suppressed))
	}
	return h.next.Handle(ctx, r)
}

func (h *quietHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &quietHandler{next: h.next.WithAttrs(as), interval: h.interval, state: h.state}
}

func (h *quietHandler) WithGroup(name string) slog.Handler {
	return &quietHandler{next: h.next.WithGroup(name), interval: h.interval, state: h.state}
}
