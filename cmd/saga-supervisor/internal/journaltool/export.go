package journaltool

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// journalUsage lists the subcommands of `journal`.
const journalUsage = `usage: saga-supervisor journal <subcommand> [flags]

  export --wal DIR --format jsonl [--from SEQ] [--to SEQ] [--since RFC3339] [--until RFC3339]
         print every record as one JSON object per line, in seq order`

// Journal is `journal SUBCOMMAND ...`: the commands that read a journal's
// records as data. Its only subcommand for now is export.
func Journal(args []string, w io.Writer) error {
	if len(args) == 0 {
		return cli.Exit(2, "a subcommand is required\n%s", journalUsage)
	}
	switch args[0] {
	case "export":
		return Export(args[1:], w)
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(w, journalUsage)
		return nil
	}
	return cli.Exit(2, "unknown subcommand %q\n%s", args[0], journalUsage)
}

// errStopScan ends a wal.Scan early without being an error of its own.
var errStopScan = errors.New("stop")

// exportRange is which records an export selects: seqs from..to and wall
// times since..until, all inclusive; a zero bound is no bound.
type exportRange struct {
	from, to     uint64
	since, until time.Time
}

func (r exportRange) selects(seq uint64, unixNano int64) bool {
	if seq < r.from || (r.to != 0 && seq > r.to) {
		return false
	}
	if r.since.IsZero() && r.until.IsZero() {
		return true
	}
	if unixNano == 0 {
		return false // no wall time: outside every time window
	}
	t := time.Unix(0, unixNano)
	return !t.Before(r.since) && (r.until.IsZero() || !t.After(r.until))
}

// Export is `journal export --wal DIR --format jsonl [--from SEQ] [--to SEQ]
// [--since T] [--until T]`: every selected record as one JSON object per
// line on w, in seq order, written as it is read. Exit 0 when the whole
// journal verifies; 1 when it is broken or lost records (the records before
// the break are printed first, the reason goes to stderr); 2 when it
// cannot be read, is not there, or a flag is wrong.
func Export(args []string, w io.Writer) error {
	fs := cli.NewFlags("journal export")
	dir := fs.String("wal", "", "journal directory")
	format := fs.String("format", "jsonl", "output format (only jsonl)")
	from := fs.Uint64("from", 0, "first seq to export (default: the first record)")
	to := fs.Uint64("to", 0, "last seq to export (default: the last record)")
	since := fs.String("since", "", "export records with a wall time at or after this RFC 3339 time")
	until := fs.String("until", "", "export records with a wall time at or before this RFC 3339 time")
	if err := fs.Parse(args); err != nil {
		return cli.Exit(2, "%v", err)
	}
	rng, err := exportFlags(fs, *dir, *format, *from, *to, *since, *until)
	if err != nil {
		return err
	}
	switch ok, err := wal.Present(nil, *dir); {
	case err != nil:
		return cli.Exit(2, "no journal to export: %v", err)
	case !ok:
		return cli.Exit(2, "no journal to export: %s holds no journal segment (*.wal)", *dir)
	}
	// The whole journal is judged, whatever the range: Verify checks the
	// chain and the anchor, and the scan decodes every record from the
	// first (so it stops at a break even if --from is past it), printing
	// only those selected. Both read as they go, one window at a time.
	rep, err := wal.Verify(*dir, wal.Options{})
	if err != nil {
		return cli.Exit(2, "cannot read journal %s: %v", *dir, err)
	}
	out := bufio.NewWriter(w)
	var (
		line     []byte
		undecode error
		writeErr error
	)
	scanErr := wal.Scan(*dir, wal.Options{}, 1, func(r wal.Record) error {
		rec, err := rollback.DecodeRecord(r.Type, r.Payload)
		if err != nil {
			undecode = fmt.Errorf("journal broken at seq %d: the chain is intact but the payload is not an engine record: %w", r.Seq, err)
			return errStopScan
		}
		if !rng.selects(r.Seq, rec.UnixNano) {
			return nil
		}
		line = appendJSONRecord(line[:0], r.Seq, r.Hash, rec)
		if _, err := out.Write(line); err != nil {
			writeErr = err
			return errStopScan
		}
		return nil
	})
	if err := out.Flush(); err != nil && writeErr == nil {
		writeErr = err
	}
	var ce *wal.CorruptionError
	switch {
	case writeErr != nil:
		return cli.Exit(2, "writing the export: %v", writeErr)
	case undecode != nil:
		return &cli.ExitError{Code: 1, Err: undecode}
	case errors.As(scanErr, &ce):
		return cli.Exit(1, "journal broken at seq %d (segment %s offset %d): %s; the records before it were exported", ce.Seq, ce.Segment, ce.Offset, ce.Reason)
	case scanErr != nil && !errors.Is(scanErr, errStopScan):
		return cli.Exit(2, "cannot read journal %s: %v", *dir, scanErr)
	case rep.Broken != nil:
		b := rep.Broken
		return cli.Exit(1, "journal broken at seq %d (segment %s offset %d): %s; the records before it were exported", b.Seq, b.Segment, b.Offset, b.Reason)
	case rep.Lost != nil:
		return cli.Exit(1, "%s; the records the journal holds were exported", rep.Lost.Reason)
	}
	return nil
}

// exportFlags checks export's flags and returns the range they select.
func exportFlags(fs *flag.FlagSet, dir, format string, from, to uint64, since, until string) (exportRange, error) {
	rng := exportRange{from: from, to: to}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case fs.NArg() > 0:
		return rng, cli.Exit(2, "unexpected argument %q", fs.Arg(0))
	case dir == "":
		return rng, cli.Exit(2, "--wal DIR is required")
	case format != "jsonl":
		return rng, cli.Exit(2, "--format %q is not supported: the only format is jsonl", format)
	case set["from"] && from == 0, set["to"] && to == 0:
		return rng, cli.Exit(2, "seqs start at 1: --from and --to must be at least 1")
	case set["to"] && from > to:
		return rng, cli.Exit(2, "--from %d is after --to %d", from, to)
	}
	var err error
	if since != "" {
		if rng.since, err = time.Parse(time.RFC3339, since); err != nil {
			return rng, cli.Exit(2, "--since %q is not an RFC 3339 time: %v", since, err)
		}
	}
	if until != "" {
		if rng.until, err = time.Parse(time.RFC3339, until); err != nil {
			return rng, cli.Exit(2, "--until %q is not an RFC 3339 time: %v", until, err)
		}
	}
	if !rng.since.IsZero() && !rng.until.IsZero() && rng.since.After(rng.until) {
		return rng, cli.Exit(2, "--since %s is after --until %s", since, until)
	}
	return rng, nil
}

// wallTimeLayout is RFC 3339 in UTC with all nine digits of nanoseconds, so
// that the text sorts as the time does.
const wallTimeLayout = "2006-01-02T15:04:05.000000000Z07:00"

// appendJSONRecord appends one record as a line of JSON: seq, type, hash,
// time, then the record's fields in payload order. A field is written when
// it is non-zero (a float also when it is -0), the rule the encoder uses to
// set its presence bit; so absent fields are omitted.
func appendJSONRecord(b []byte, seq uint64, hash [32]byte, r rollback.Record) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, r.Type.String())
	b = append(b, `,"hash":"`...)
	b = hex.AppendEncode(b, hash[:])
	b = append(b, '"')
	if r.UnixNano != 0 {
		b = append(b, `,"time":"`...)
		b = time.Unix(0, r.UnixNano).UTC().AppendFormat(b, wallTimeLayout)
		b = append(b, '"')
	}
	uintField := func(name string, v uint64) {
		if v != 0 {
			b = append(b, `,"`+name+`":`...)
			b = strconv.AppendUint(b, v, 10)
		}
	}
	strField := func(name, v string) {
		if v != "" {
			b = append(b, `,"`+name+`":`...)
			b = appendJSONString(b, v)
		}
	}
	floatField := func(name string, v float64) {
		if v != 0 || math.Signbit(v) {
			b = append(b, `,"`+name+`":`...)
			b = appendJSONFloat(b, v)
		}
	}
	uintField("saga", r.Saga)
	uintField("step", uint64(r.Step))
	strField("actuator", r.Actuator)
	floatField("target", r.Target)
	floatField("prior", r.Prior)
	floatField("requested", r.Requested)
	strField("agent", r.Agent)
	strField("lease", r.Lease)
	uintField("epoch", r.Epoch)
	strField("cmd_id", r.CmdID)
	strField("code", r.Code)
	strField("message", r.Message)
	uintField("attempt", uint64(r.Attempt))
	uintField("flags", uint64(r.Flags))
	return append(b, "}\n"...)
}

// appendJSONString appends s as a JSON string. Bytes that are not UTF-8
// become U+FFFD, as encoding/json does.
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

// appendJSONFloat appends v as a JSON number: the shortest decimal that
// reads back as the same float64. JSON has no NaN or infinities; the
// journal's decoder accepts them, so they are written as the strings
// "NaN", "+Inf" and "-Inf".
func appendJSONFloat(b []byte, v float64) []byte {
	switch {
	case math.IsNaN(v):
		return append(b, `"NaN"`...)
	case math.IsInf(v, 1):
		return append(b, `"+Inf"`...)
	case math.IsInf(v, -1):
		return append(b, `"-Inf"`...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}
