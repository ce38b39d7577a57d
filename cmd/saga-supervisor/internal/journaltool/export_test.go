package journaltool

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// exportedRecord is one line of `journal export`, read back by the tests
// on their own (not through the code that wrote it).
type exportedRecord struct {
	Seq      uint64
	TypeName string
	Hash     string
	Record   rollback.Record
}

// parseExportLine reads one line of export output: valid JSON, every key
// known, no key holding a zero value (absent fields are left out).
func parseExportLine(t *testing.T, line string) exportedRecord {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(line))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, line)
	}
	if d.More() {
		t.Fatalf("more than one JSON value on a line:\n%s", line)
	}
	var r exportedRecord
	for k, v := range m {
		if err := r.set(k, v); err != nil {
			t.Fatalf("%s: %v\n%s", k, err, line)
		}
	}
	for _, k := range []string{"seq", "type", "hash"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("no %q:\n%s", k, line)
		}
	}
	return r
}

// set gives the field export calls name the value v (a json.Number or a
// string from a line; a Go value from a test). A zero value is an error:
// export leaves such fields out.
func (r *exportedRecord) set(name string, v any) error {
	u := func(bits int) (uint64, error) {
		var n uint64
		var err error
		switch x := v.(type) {
		case json.Number:
			n, err = strconv.ParseUint(x.String(), 10, bits)
		case uint64:
			n = x
		default:
			err = fmt.Errorf("%T is not an unsigned integer", v)
		}
		if err == nil && n == 0 {
			err = fmt.Errorf("zero: an absent field must be left out")
		}
		return n, err
	}
	f := func() (float64, error) {
		var x float64
		var err error
		switch y := v.(type) {
		case json.Number:
			x, err = strconv.ParseFloat(y.String(), 64)
		case string:
			switch y {
			case "NaN":
				x = math.NaN()
			case "+Inf":
				x = math.Inf(1)
			case "-Inf":
				x = math.Inf(-1)
			default:
				err = fmt.Errorf("%q is not a float", y)
			}
		case float64:
			x = y
		default:
			err = fmt.Errorf("%T is not a float", v)
		}
		if err == nil && x == 0 && !math.Signbit(x) {
			err = fmt.Errorf("zero: an absent field must be left out")
		}
		return x, err
	}
	s := func() (string, error) {
		x, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("%T is not a string", v)
		}
		if x == "" {
			return "", fmt.Errorf("empty: an absent field must be left out")
		}
		return x, nil
	}
	var err error
	var n uint64
	rec := &r.Record
	switch name {
	case "seq":
		r.Seq, err = u(64)
	case "type":
		r.TypeName, err = s()
		rec.Type = 0
		for t := 1; t <= math.MaxUint8; t++ {
			if rollback.RecordType(t).String() == r.TypeName {
				rec.Type = rollback.RecordType(t)
			}
		}
		if err == nil && rec.Type == 0 {
			err = fmt.Errorf("no record type is called %q", r.TypeName)
		}
	case "hash":
		r.Hash, err = s()
		if b, herr := hex.DecodeString(r.Hash); err == nil && (herr != nil || len(b) != 32) {
			err = fmt.Errorf("%q is not 32 bytes in hex", r.Hash)
		}
	case "time":
		switch x := v.(type) {
		case int64:
			rec.UnixNano = x
		case string:
			var tm time.Time
			if tm, err = time.Parse(time.RFC3339Nano, x); err == nil {
				rec.UnixNano = tm.UnixNano()
				if back := time.Unix(0, rec.UnixNano).UTC().Format(wallTimeLayout); back != x {
					err = fmt.Errorf("%q is not UTC with nine digits of nanoseconds (%s)", x, back)
				}
			}
		default:
			err = fmt.Errorf("%T is not a time", v)
		}
		if err == nil && rec.UnixNano == 0 {
			err = fmt.Errorf("zero: an absent wall time must be left out")
		}
	case "saga":
		rec.Saga, err = u(64)
	case "step":
		n, err = u(32)
		rec.Step = uint32(n)
	case "actuator":
		rec.Actuator, err = s()
	case "target":
		rec.Target, err = f()
	case "prior":
		rec.Prior, err = f()
	case "requested":
		rec.Requested, err = f()
	case "agent":
		rec.Agent, err = s()
	case "lease":
		rec.Lease, err = s()
	case "epoch":
		rec.Epoch, err = u(64)
	case "cmd_id":
		rec.CmdID, err = s()
	case "code":
		rec.Code, err = s()
	case "message":
		rec.Message, err = s()
	case "attempt":
		n, err = u(32)
		rec.Attempt = uint32(n)
	case "flags":
		n, err = u(8)
		rec.Flags = uint8(n)
	default:
		err = fmt.Errorf("unknown field")
	}
	return err
}

// sameFloat is float equality by bits, except that any NaN equals any NaN
// (export writes every NaN as "NaN").
func sameFloat(a, b float64) bool {
	return math.Float64bits(a) == math.Float64bits(b) || (math.IsNaN(a) && math.IsNaN(b))
}

func sameExported(a, b exportedRecord) bool {
	if !sameFloat(a.Record.Target, b.Record.Target) || !sameFloat(a.Record.Prior, b.Record.Prior) ||
		!sameFloat(a.Record.Requested, b.Record.Requested) {
		return false
	}
	a.Record.Target, a.Record.Prior, a.Record.Requested = 0, 0, 0
	b.Record.Target, b.Record.Prior, b.Record.Requested = 0, 0, 0
	return a == b
}

// decodedJournal reads every record of dir with the real reader and
// decoder, as export should show them.
func decodedJournal(t *testing.T, dir string) []exportedRecord {
	t.Helper()
	var out []exportedRecord
	err := wal.Scan(dir, wal.Options{}, 1, func(r wal.Record) error {
		rec, err := rollback.DecodeRecord(r.Type, r.Payload)
		if err != nil {
			return err
		}
		out = append(out, exportedRecord{Seq: r.Seq, TypeName: rec.Type.String(), Hash: hex.EncodeToString(r.Hash[:]), Record: rec})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// export runs `journal export` and returns its lines and error.
func export(t *testing.T, args ...string) ([]string, error) {
	t.Helper()
	var out bytes.Buffer
	err := Journal(append([]string{"export"}, args...), &out)
	if out.Len() > 0 && !bytes.HasSuffix(out.Bytes(), []byte("\n")) {
		t.Errorf("the output does not end with a newline: %q", out.String())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if out.Len() == 0 {
		lines = nil
	}
	return lines, err
}

// engineJournal makes a journal in dir with the real engine: sagas
// committed and unwound, a refusal, a lease, a halt (with its SAFE
// records) and a reset. Its clock moves on a millisecond at every reading,
// so every record has its own wall time.
func engineJournal(t *testing.T, dir string) {
	t.Helper()
	journal, err := wal.Open(dir, wal.Options{SegmentSize: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	world := sim.NewMemoryWorld()
	defer world.Close()
	gripper := world.Servo("gripper", 0, 0)
	servo := limits.Spec{Min: 0, Max: 180}
	reg, err := actuators.NewRegistry(
		&actuators.Actuator{Name: "shoulder", Kind: actuators.Servo, Limits: servo, Initial: 10, Driver: world.Servo("shoulder", 10, 0),
			Safe: actuators.SafePolicy{Mode: actuators.SafeValue, Value: 45.5}},
		&actuators.Actuator{Name: "elbow", Kind: actuators.Servo, Limits: servo, Initial: 20, Driver: world.Servo("elbow", 20, 0)},
		&actuators.Actuator{Name: "gripper", Kind: actuators.Servo, Limits: servo, Driver: gripper},
	)
	if err != nil {
		t.Fatal(err)
	}
	var tick atomic.Int64
	start := time.Date(2026, 3, 14, 9, 0, 0, 123456789, time.UTC)
	now := func() time.Time { return start.Add(time.Duration(tick.Add(1)) * time.Millisecond) }
	eng, err := rollback.New(rollback.Config{Journal: journal, Actuators: reg, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(eng.RecordLease("planner", "L1", 1))
	owner := rollback.Owner{Agent: "planner", Lease: "L1", Epoch: 1}
	s1, err := eng.Begin(owner)
	must(err)
	_, err = eng.Step(s1, owner, rollback.Command{ID: "1", Actuator: "shoulder", Value: 60.25})
	must(err)
	_, err = eng.Step(s1, owner, rollback.Command{ID: "2", Actuator: "elbow", Value: 90})
	must(err)
	must(eng.Commit(s1, owner))
	s2, err := eng.Begin(owner)
	must(err)
	_, err = eng.Step(s2, owner, rollback.Command{ID: "3", Actuator: "shoulder", Value: 30})
	must(err)
	if _, err := eng.Step(s2, owner, rollback.Command{ID: "4", Actuator: "elbow", Value: 400}); rollback.CodeOf(err) == "" {
		t.Fatalf("an over-limit step was not refused: %v", err)
	}
	gripper.FailOnNth(1)
	if _, err := eng.Step(s2, owner, rollback.Command{ID: "5", Actuator: "gripper", Value: 30}); err == nil {
		t.Fatal("the faulted step did not fail")
	}
	_, err = eng.Halt("test halt: \"quoted\" \\ and a tab\t")
	must(err)
	must(eng.Reset("operator", eng.HaltGen()))
	must(eng.Close())
	must(journal.Close())
}

// A journal the real engine wrote exports as one valid JSON object per
// record, in seq order, each equal to what the real decoder reads.
func TestExportRoundTripsAnEngineJournal(t *testing.T) {
	dir := t.TempDir()
	engineJournal(t, dir)
	want := decodedJournal(t, dir)
	lines, err := export(t, "--wal", dir, "--format", "jsonl")
	if err != nil {
		t.Fatalf("export: %v", err)
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines for %d records", len(lines), len(want))
	}
	types := map[string]bool{}
	for i, line := range lines {
		got := parseExportLine(t, line)
		if got.Seq != uint64(i+1) {
			t.Fatalf("line %d has seq %d: seqs must run from 1 without a gap", i+1, got.Seq)
		}
		if !sameExported(got, want[i]) {
			t.Errorf("line %d:\n exported %+v\n decoded  %+v", i+1, got, want[i])
		}
		types[got.TypeName] = true
	}
	// The journal holds what the test means it to, so the round trip
	// covered these kinds of record.
	for _, typ := range []string{"LEASE", "BEGIN", "INTENT", "APPLIED", "COMMIT", "REFUSED", "FAILED", "ABORT", "COMP_INTENT", "COMP_DONE", "END", "HALT", "SAFE", "RESET"} {
		if !types[typ] {
			t.Errorf("no %s record in the engine's journal", typ)
		}
	}
}

// Values at the edges of what the payload can hold survive the export:
// the largest integers, -0, NaN and infinities (as strings), a time before
// 1970, strings that JSON must escape; and bytes that are not UTF-8 become
// U+FFFD.
func TestExportEdgeValues(t *testing.T) {
	dir := t.TempDir()
	l, err := wal.Open(dir, wal.Options{SegmentSize: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	recs := []rollback.Record{
		{Type: rollback.RecIntent, Saga: math.MaxUint64, Step: math.MaxUint32, Actuator: "a\"b\\c\n\t\x01<&>é",
			Target: math.Copysign(0, -1), Prior: math.NaN(), Requested: math.Inf(1), Lease: "L", Epoch: 1 << 63,
			CmdID: "☃", Flags: 0xff, UnixNano: -1},
		{Type: rollback.RecCompIntent, Target: math.Inf(-1), Prior: 5e-324, Requested: math.MaxFloat64, Attempt: math.MaxUint32, UnixNano: math.MaxInt64},
		{Type: rollback.RecRecovery, UnixNano: math.MinInt64},
		{Type: rollback.RecHalt}, // no wall time at all
	}
	for _, r := range recs {
		if _, err := l.Append(uint8(r.Type), r.AppendEncode(nil)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Append(uint8(rollback.RecAbort), (&rollback.Record{Message: "bad \xff byte"}).AppendEncode(nil)); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	want := decodedJournal(t, dir)
	lines, err := export(t, "--wal", dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines for %d records", len(lines), len(want))
	}
	for i, line := range lines[:len(recs)] {
		if got := parseExportLine(t, line); !sameExported(got, want[i]) {
			t.Errorf("line %d:\n exported %+v\n decoded  %+v\n %s", i+1, got, want[i], line)
		}
	}
	if strings.Contains(lines[3], `"time"`) {
		t.Errorf("a record without a wall time was given one: %s", lines[3])
	}
	if got := parseExportLine(t, lines[len(recs)]); got.Record.Message != "bad \ufffd byte" {
		t.Errorf("a message with a byte that is not UTF-8 exported as %q", got.Record.Message)
	}
}

// segmentFrames returns the single segment of dir and the offset of each
// frame in it, read by the layout docs/JOURNAL.md gives.
func segmentFrames(t *testing.T, dir string) (string, []int64) {
	t.Helper()
	path := filepath.Join(dir, "0000000000000001.wal")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for off := int64(64); off+17 <= int64(len(b)) && b[off+16] != 0; {
		offs = append(offs, off)
		off += 49 + int64(binary.LittleEndian.Uint32(b[off+4:]))
	}
	return path, offs
}

// A journal with a damaged record in the middle: export prints every
// record before it, then fails with exit 1 naming the break.
func TestExportBrokenJournalPrintsUpToTheBreak(t *testing.T) {
	dir := t.TempDir()
	engineJournal(t, dir)
	all := decodedJournal(t, dir)
	path, offs := segmentFrames(t, dir)
	if len(offs) != len(all) || len(all) < 6 {
		t.Fatalf("%d frames found for %d records", len(offs), len(all))
	}
	k := len(offs) / 2 // the record damaged, 0-based: valid frames follow it
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	f.ReadAt(b, offs[k]+17)
	b[0] ^= 0x40
	f.WriteAt(b, offs[k]+17)
	f.Close()

	lines, err := export(t, "--wal", dir)
	if cli.Status(err) != 1 {
		t.Fatalf("export of a broken journal: exit %d (%v), want 1", cli.Status(err), err)
	}
	if want := fmt.Sprintf("broken at seq %d", k+1); !strings.Contains(err.Error(), want) {
		t.Errorf("the error does not say %q: %v", want, err)
	}
	if len(lines) != k {
		t.Fatalf("%d records printed before the break at seq %d, want %d", len(lines), k+1, k)
	}
	for i, line := range lines {
		if got := parseExportLine(t, line); !sameExported(got, all[i]) {
			t.Errorf("line %d:\n exported %+v\n decoded  %+v", i+1, got, all[i])
		}
	}
	// The range asked for ends before the break: the records are printed,
	// and the journal is still judged broken.
	lines, err = export(t, "--wal", dir, "--to", "2")
	if cli.Status(err) != 1 || len(lines) != 2 {
		t.Errorf("--to before the break: %d lines, exit %d (%v); want 2 lines, exit 1", len(lines), cli.Status(err), err)
	}
}

// A break in an early segment bounds the export even when --from starts in
// a later segment, whose records would read well on their own: nothing
// after a break is printed.
func TestExportPrintsNothingAfterABreak(t *testing.T) {
	dir := t.TempDir()
	l, err := wal.Open(dir, wal.Options{SegmentSize: wal.MinSegmentSize})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		r := rollback.Record{Type: rollback.RecHalt, Message: fmt.Sprintf("halt %d", i), UnixNano: int64(i + 1)}
		if _, err := l.Append(uint8(r.Type), r.AppendEncode(nil)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	segs, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	if err != nil || len(segs) < 3 {
		t.Fatalf("want at least 3 segments, have %v (%v)", segs, err)
	}
	path, offs := segmentFrames(t, dir)
	if len(offs) < 3 {
		t.Fatalf("the first segment holds %d records, want 3 or more", len(offs))
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[offs[1]+17] ^= 0x40 // record 2's payload
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	last, ok := strings.CutSuffix(filepath.Base(segs[len(segs)-1]), ".wal")
	first, perr := strconv.ParseUint(last, 16, 64)
	if !ok || perr != nil {
		t.Fatalf("segment name %s", segs[len(segs)-1])
	}
	for _, tt := range []struct {
		args  []string
		lines int
	}{
		{nil, 1},
		{[]string{"--from", strconv.FormatUint(first, 10)}, 0},
	} {
		lines, err := export(t, append([]string{"--wal", dir}, tt.args...)...)
		if cli.Status(err) != 1 || !strings.Contains(fmt.Sprint(err), "broken at seq 2") || len(lines) != tt.lines {
			t.Errorf("export %v: %d lines, exit %d (%v); want %d lines, exit 1 naming seq 2", tt.args, len(lines), cli.Status(err), err, tt.lines)
		}
	}
}

// A record whose chain is intact but whose payload is not an engine record
// breaks the export there: exit 1 after the records before it.
func TestExportStopsAtAPayloadThatIsNotARecord(t *testing.T) {
	dir := t.TempDir()
	l, err := wal.Open(dir, wal.Options{SegmentSize: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	good := rollback.Record{Type: rollback.RecBegin, Saga: 1, Agent: "a", UnixNano: 1}
	for _, p := range []struct {
		typ     uint8
		payload []byte
	}{
		{uint8(good.Type), good.AppendEncode(nil)},
		{uint8(good.Type), good.AppendEncode(nil)},
		{uint8(rollback.RecBegin), append(good.AppendEncode(nil), 0)}, // a trailing byte
		{uint8(good.Type), good.AppendEncode(nil)},
	} {
		if _, err := l.Append(p.typ, p.payload); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	lines, err := export(t, "--wal", dir)
	if cli.Status(err) != 1 || !strings.Contains(fmt.Sprint(err), "seq 3") || !strings.Contains(fmt.Sprint(err), "not an engine record") {
		t.Fatalf("exit %d (%v), want 1 naming seq 3 as not an engine record", cli.Status(err), err)
	}
	if len(lines) != 2 {
		t.Fatalf("%d lines before the bad record, want 2", len(lines))
	}
	// The journal is judged whole, whatever the range: before the bad
	// record, and past it (where nothing is printed).
	for _, tt := range []struct {
		args  []string
		lines int
	}{
		{[]string{"--to", "1"}, 1},
		{[]string{"--from", "4"}, 0},
	} {
		lines, err := export(t, append([]string{"--wal", dir}, tt.args...)...)
		if cli.Status(err) != 1 || !strings.Contains(fmt.Sprint(err), "seq 3") || len(lines) != tt.lines {
			t.Errorf("export %v: %d lines, exit %d (%v); want %d lines, exit 1 naming seq 3", tt.args, len(lines), cli.Status(err), err, tt.lines)
		}
	}
}

// A journal whose anchor vouches for records that are gone (an older copy
// of its segment put back) exports what it holds, then exits 1.
func TestExportLostRecords(t *testing.T) {
	dir := t.TempDir()
	opt := wal.Options{SegmentSize: 1 << 16}
	appendN := func(n int) {
		l, err := wal.Open(dir, opt)
		if err != nil {
			t.Fatal(err)
		}
		for range n {
			r := rollback.Record{Type: rollback.RecHalt, Message: "x", UnixNano: 1}
			if _, err := l.Append(uint8(r.Type), r.AppendEncode(nil)); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	seg := filepath.Join(dir, "0000000000000001.wal")
	appendN(3)
	older, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	appendN(3)
	if err := os.WriteFile(seg, older, 0o600); err != nil {
		t.Fatal(err)
	}
	lines, err := export(t, "--wal", dir)
	if cli.Status(err) != 1 || !strings.Contains(fmt.Sprint(err), "gone") {
		t.Fatalf("exit %d (%v), want 1 saying records are gone", cli.Status(err), err)
	}
	if len(lines) != 3 {
		t.Fatalf("%d lines, want the 3 records the journal holds", len(lines))
	}
}

// Where there is no journal, export fails with exit 2 and creates nothing.
func TestExportRefusesWhereNoJournalIs(t *testing.T) {
	base := t.TempDir()
	empty := filepath.Join(base, "empty")
	os.Mkdir(empty, 0o700)
	notes := filepath.Join(base, "notes")
	os.Mkdir(notes, 0o700)
	os.WriteFile(filepath.Join(notes, "README"), []byte("not a journal"), 0o600)
	file := filepath.Join(base, "file")
	os.WriteFile(file, nil, 0o600)
	for _, tt := range []struct{ name, dir string }{
		{"no such directory", filepath.Join(base, "typo")},
		{"an empty directory", empty},
		{"a directory without segments", notes},
		{"a file", file},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := tree(t, base)
			lines, err := export(t, "--wal", tt.dir)
			if cli.Status(err) != 2 || len(lines) != 0 {
				t.Fatalf("export --wal %s: exit %d (%v), %d lines; want exit 2, nothing printed", tt.dir, cli.Status(err), err, len(lines))
			}
			if after := tree(t, base); !maps.Equal(after, before) {
				t.Errorf("export changed the tree:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// Bad flags are exit 2 with a message saying what is wrong, before
// anything is read or printed.
func TestExportBadFlags(t *testing.T) {
	dir := t.TempDir()
	engineJournal(t, dir)
	for _, tt := range []struct {
		args []string
		says string
	}{
		{[]string{"--format", "json"}, "jsonl"},
		{[]string{"--format", "csv"}, "jsonl"},
		{[]string{"--format", ""}, "jsonl"},
		{[]string{"--from", "0"}, "at least 1"},
		{[]string{"--to", "0"}, "at least 1"},
		{[]string{"--from", "5", "--to", "3"}, "after --to"},
		{[]string{"--from", "x"}, "invalid value"},
		{[]string{"--since", "yesterday"}, "RFC 3339"},
		{[]string{"--until", "2026-13-01T00:00:00Z"}, "RFC 3339"},
		{[]string{"--since", "2026-03-15T00:00:00Z", "--until", "2026-03-14T00:00:00Z"}, "after --until"},
		{[]string{"extra"}, "unexpected argument"},
		{[]string{"--bogus"}, "not defined"},
	} {
		lines, err := export(t, append([]string{"--wal", dir}, tt.args...)...)
		if cli.Status(err) != 2 || len(lines) != 0 || !strings.Contains(fmt.Sprint(err), tt.says) {
			t.Errorf("export %v: exit %d (%v), %d lines; want exit 2 saying %q, nothing printed", tt.args, cli.Status(err), err, len(lines), tt.says)
		}
	}
	if _, err := export(t); cli.Status(err) != 2 || !strings.Contains(err.Error(), "--wal") {
		t.Errorf("export without --wal: exit %d (%v), want 2 naming --wal", cli.Status(err), err)
	}
}

// The filters select exactly the records they say, alone and together.
func TestExportFilters(t *testing.T) {
	dir := t.TempDir()
	engineJournal(t, dir)
	all := decodedJournal(t, dir)
	n := uint64(len(all))
	if n < 10 {
		t.Fatalf("the engine wrote only %d records", n)
	}
	at := func(seq uint64) time.Time { return time.Unix(0, all[seq-1].Record.UnixNano) }
	rfc := func(seq uint64) string { return at(seq).Format(time.RFC3339Nano) }
	for _, tt := range []struct {
		name string
		args []string
		want func(r exportedRecord) bool
	}{
		{"from", []string{"--from", "4"}, func(r exportedRecord) bool { return r.Seq >= 4 }},
		{"to", []string{"--to", "5"}, func(r exportedRecord) bool { return r.Seq <= 5 }},
		{"from and to", []string{"--from", "3", "--to", "7"}, func(r exportedRecord) bool { return r.Seq >= 3 && r.Seq <= 7 }},
		{"one record", []string{"--from", "6", "--to", "6"}, func(r exportedRecord) bool { return r.Seq == 6 }},
		{"past the end", []string{"--from", strconv.FormatUint(n+1, 10)}, func(exportedRecord) bool { return false }},
		{"since", []string{"--since", rfc(5)}, func(r exportedRecord) bool { return !time.Unix(0, r.Record.UnixNano).Before(at(5)) }},
		{"until", []string{"--until", rfc(4)}, func(r exportedRecord) bool { return !time.Unix(0, r.Record.UnixNano).After(at(4)) }},
		{"since and until, another zone", []string{"--since", at(3).In(time.FixedZone("", 5*3600+1800)).Format(time.RFC3339Nano), "--until", rfc(8)},
			func(r exportedRecord) bool {
				tm := time.Unix(0, r.Record.UnixNano)
				return !tm.Before(at(3)) && !tm.After(at(8))
			}},
		{"seq and time together", []string{"--from", "5", "--until", rfc(9)}, func(r exportedRecord) bool {
			return r.Seq >= 5 && !time.Unix(0, r.Record.UnixNano).After(at(9))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var want []exportedRecord
			for _, r := range all {
				if tt.want(r) {
					want = append(want, r)
				}
			}
			if tt.name != "past the end" && (len(want) == 0 || len(want) == len(all)) {
				t.Fatalf("the test's filter selects %d of %d records: it would not tell a filter from none", len(want), len(all))
			}
			lines, err := export(t, append([]string{"--wal", dir}, tt.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if len(lines) != len(want) {
				t.Fatalf("%d records exported, want %d", len(lines), len(want))
			}
			for i, line := range lines {
				if got := parseExportLine(t, line); !sameExported(got, want[i]) {
					t.Errorf("line %d:\n exported %+v\n want     %+v", i+1, got, want[i])
				}
			}
		})
	}
}

// `journal` dispatches on its subcommand: none or an unknown one is exit 2
// with the usage; help prints it.
func TestJournalSubcommands(t *testing.T) {
	for _, args := range [][]string{nil, {"bogus"}, {"--wal"}} {
		err := Journal(args, io.Discard)
		if cli.Status(err) != 2 || !strings.Contains(fmt.Sprint(err), "usage: saga-supervisor journal") {
			t.Errorf("journal %v: exit %d (%v), want 2 with the usage", args, cli.Status(err), err)
		}
	}
	var out strings.Builder
	if err := Journal([]string{"help"}, &out); err != nil || !strings.Contains(out.String(), "export --wal DIR") {
		t.Errorf("journal help: %v, printed %q", err, out.String())
	}
}
