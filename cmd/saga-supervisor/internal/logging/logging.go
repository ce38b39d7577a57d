// Package logging builds the daemon's logger: one place that turns
// --log-format and --log-level into a *slog.Logger on stderr.
//
// Formats:
//
//	text     slog's key=value lines, with the time
//	json     slog's JSON lines: {"time":...,"level":...,"msg":...,...}
//	journal  key=value lines without the time (journald stamps each line),
//	         each led by its syslog priority (<3> error, <4> warning,
//	         <6> info, <7> debug) as sd-daemon(3) describes, so that
//	         journalctl -p warning filters by level
//	auto     journal when stderr is the journal's stream (systemd's
//	         JOURNAL_STREAM names stderr's device and inode), text otherwise
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/coreos/go-systemd/v22/journal"
)

// The formats New takes.
const (
	Auto    = "auto"
	Text    = "text"
	JSON    = "json"
	Journal = "journal"
)

// Formats lists the formats, for a flag's help and its error.
const Formats = "auto, text, json or journal"

// New returns a logger writing records at level or above to w in format.
// Auto becomes journal only when w is os.Stderr and stderr is the
// journal's stream; any other writer gets text.
func New(w io.Writer, format string, level slog.Leveler) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case Auto:
		if w == io.Writer(os.Stderr) && stderrIsJournal() {
			return slog.New(NewJournalHandler(w, opts)), nil
		}
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case Text:
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case JSON:
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case Journal:
		return slog.New(NewJournalHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("%q is not a log format: give %s", format, Formats)
}

// stderrIsJournal reports whether stderr is connected to journald's stream
// transport. A malformed JOURNAL_STREAM counts as no: plain text is the
// safe guess.
func stderrIsJournal() bool {
	ok, err := journal.StderrIsJournalStream()
	return ok && err == nil
}
