package journaltool

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// The tests in this file hold docs/JOURNAL.md to the code: its worked
// example is decoded by the real decoder and must be what the real encoder
// writes, and its tables of record types and mask bits must match what the
// encoder does. A change to either side without the other fails here.

const journalDocPath = "../../../../docs/JOURNAL.md"

// The fenced blocks of the worked example, by their info strings.
const (
	docSegmentBlock = "journal-example"
	docAnchorBlock  = "journal-example-anchor"
	docRecordsBlock = "journal-example-jsonl"
	// docSegmentName is the file the example is, as the doc says.
	docSegmentName = "0000000000000001.wal"
)

func readJournalDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(journalDocPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fencedBlock returns the lines of the one block fenced as ```marker.
func fencedBlock(t *testing.T, doc, marker string) []string {
	t.Helper()
	var block []string
	found, in := 0, false
	for line := range strings.Lines(doc) {
		line = strings.TrimRight(line, "\r\n")
		switch {
		case !in && line == "```"+marker:
			in, found = true, found+1
		case in && line == "```":
			in = false
		case in && found == 1:
			block = append(block, line)
		}
	}
	if found != 1 || in {
		t.Fatalf("docs/JOURNAL.md: want exactly one closed block fenced ```%s, found %d (unclosed: %v)", marker, found, in)
	}
	return block
}

// hexBlock decodes an annotated hex block: each line is a decimal offset
// and bytes as pairs of hex digits, then an optional # comment; lines that
// are only a comment are skipped. Every offset must be where the bytes
// before it end, so the offsets the doc prints are checked too.
func hexBlock(t *testing.T, lines []string) []byte {
	t.Helper()
	var out []byte
	for i, line := range lines {
		if c := strings.IndexByte(line, '#'); c >= 0 {
			line = line[:c]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		off, err := strconv.Atoi(f[0])
		if err != nil || off != len(out) {
			t.Fatalf("example line %d: offset %q, want %d (the bytes before it)", i+1, f[0], len(out))
		}
		if len(f) == 1 {
			t.Fatalf("example line %d: an offset without bytes", i+1)
		}
		for _, h := range f[1:] {
			b, err := hex.DecodeString(h)
			if err != nil || len(b) != 1 {
				t.Fatalf("example line %d: %q is not one byte in two hex digits", i+1, h)
			}
			out = append(out, b[0])
		}
	}
	return out
}

// docExample is the worked example: the segment's bytes, the anchor's, and
// the records the doc says they hold.
type docExample struct {
	segment, anchor []byte
	lines           []string
	records         []exportedRecord
}

func readDocExample(t *testing.T) docExample {
	t.Helper()
	doc := readJournalDoc(t)
	ex := docExample{
		segment: hexBlock(t, fencedBlock(t, doc, docSegmentBlock)),
		anchor:  hexBlock(t, fencedBlock(t, doc, docAnchorBlock)),
		lines:   fencedBlock(t, doc, docRecordsBlock),
	}
	for _, l := range ex.lines {
		ex.records = append(ex.records, parseExportLine(t, l))
	}
	if len(ex.records) == 0 {
		t.Fatal("the example states no records")
	}
	return ex
}

// The example's bytes, put in a journal directory, verify with the real
// code and decode to exactly the records the doc states.
func TestJournalDocExampleDecodes(t *testing.T) {
	ex := readDocExample(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, docSegmentName), ex.segment, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ANCHOR"), ex.anchor, 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := wal.Verify(dir, wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	n := uint64(len(ex.records))
	if !rep.OK() || rep.Records != n || rep.LastSeq != n {
		t.Fatalf("the example does not verify as %d clean records: %+v (broken %v, torn %v, lost %v)", n, rep, rep.Broken, rep.TornTail, rep.Lost)
	}
	i := 0
	err = wal.Scan(dir, wal.Options{}, 1, func(r wal.Record) error {
		rec, err := rollback.DecodeRecord(r.Type, r.Payload)
		if err != nil {
			t.Fatalf("seq %d does not decode: %v", r.Seq, err)
		}
		if i >= len(ex.records) {
			t.Fatalf("seq %d: the example holds more records than the doc states", r.Seq)
		}
		want := ex.records[i]
		got := exportedRecord{Seq: r.Seq, TypeName: rollback.RecordType(r.Type).String(), Hash: hex.EncodeToString(r.Hash[:]), Record: rec}
		if !sameExported(got, want) {
			t.Errorf("record %d:\n decoded  %+v\n doc says %+v", i+1, got, want)
		}
		i++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if i != len(ex.records) {
		t.Fatalf("decoded %d records, the doc states %d", i, len(ex.records))
	}
}

// The real writer, given the records the doc states, writes exactly the
// example's bytes (then zeros) and the example's anchor.
func TestJournalDocExampleIsWhatTheCodeWrites(t *testing.T) {
	ex := readDocExample(t)
	dir := t.TempDir()
	l, err := wal.Open(dir, wal.Options{SegmentSize: 4096, AnchorEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ex.records {
		seq, err := l.Append(uint8(r.Record.Type), r.Record.AppendEncode(nil))
		if err != nil || seq != r.Seq {
			t.Fatalf("append seq %d: got seq %d, %v", r.Seq, seq, err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	seg, err := os.ReadFile(filepath.Join(dir, docSegmentName))
	if err != nil {
		t.Fatal(err)
	}
	if len(seg) < len(ex.segment) || !bytes.Equal(seg[:len(ex.segment)], ex.segment) {
		t.Errorf("the writer wrote\n%x\nthe doc shows\n%x", seg[:min(len(seg), len(ex.segment))], ex.segment)
	} else if rest := seg[len(ex.segment):]; !bytes.Equal(rest, make([]byte, len(rest))) {
		t.Errorf("the writer wrote more than the doc shows: the segment is not zero after offset %d", len(ex.segment))
	}
	anc, err := os.ReadFile(filepath.Join(dir, "ANCHOR"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(anc, ex.anchor) {
		t.Errorf("the writer's anchor is\n%x\nthe doc shows\n%x", anc, ex.anchor)
	}
}

// journal export prints the example exactly as the doc shows it.
func TestJournalDocExampleExport(t *testing.T) {
	ex := readDocExample(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, docSegmentName), ex.segment, 0o600); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := Export([]string{"--wal", dir, "--format", "jsonl"}, &out); err != nil {
		t.Fatal(err)
	}
	if want := strings.Join(ex.lines, "\n") + "\n"; out.String() != want {
		t.Errorf("journal export prints\n%s\nthe doc shows\n%s", out.String(), want)
	}
}

// The record-type table names every type the decoder knows, with its
// number, and no other; the genesis hash is the SHA-256 of the text the doc
// gives.
func TestJournalDocTypesAndGenesis(t *testing.T) {
	doc := readJournalDoc(t)
	rows := regexp.MustCompile("(?m)^\\| (\\d+) \\| `([A-Z_]+)` \\| [^|]+ \\|$").FindAllStringSubmatch(doc, -1)
	seen := map[int]bool{}
	for _, row := range rows {
		n, _ := strconv.Atoi(row[1])
		if got := rollback.RecordType(n).String(); got != row[2] {
			t.Errorf("the doc says type %d is %s; the code calls it %s", n, row[2], got)
		}
		if _, err := rollback.DecodeRecord(uint8(n), []byte{0}); err != nil {
			t.Errorf("type %d (%s) in the doc: the decoder refuses it: %v", n, row[2], err)
		}
		seen[n] = true
	}
	for n := 0; n <= math.MaxUint8; n++ {
		_, err := rollback.DecodeRecord(uint8(n), []byte{0})
		if known := err == nil; known != seen[n] {
			t.Errorf("type %d: in the doc's table %v, known to the decoder %v", n, seen[n], known)
		}
	}
	g := wal.GenesisHash()
	m := regexp.MustCompile("the SHA-256 of the \\d+ ASCII bytes\n?`([^`]+)`").FindStringSubmatch(doc)
	if m == nil {
		t.Fatal("the doc does not give the genesis text")
	}
	if sha256.Sum256([]byte(m[1])) != g {
		t.Errorf("the genesis text %q does not hash to the genesis hash", m[1])
	}
	if !strings.Contains(doc, hex.EncodeToString(g[:])) {
		t.Errorf("the doc does not show the genesis hash %x", g)
	}
}

// Each row of the mask table is what the encoder does: a record with only
// that field set encodes as the row's mask value followed by the field in
// the row's encoding, and the JSON name is the one export uses.
func TestJournalDocMaskTable(t *testing.T) {
	doc := readJournalDoc(t)
	rows := regexp.MustCompile("(?m)^\\| (\\d+) \\| 0x([0-9a-f]{4}) \\| [a-z ]+ \\| `([a-z_]+)` \\| ([a-z0-9 ]+) \\|$").FindAllStringSubmatch(doc, -1)
	// A sample value per encoding, and its bytes as that encoding.
	samples := map[string]struct {
		value any
		bytes []byte
	}{
		"uvarint":       {uint64(300), binary.AppendUvarint(nil, 300)},
		"string":        {"ab", []byte{2, 'a', 'b'}},
		"float64":       {1.5, binary.LittleEndian.AppendUint64(nil, math.Float64bits(1.5))},
		"byte":          {uint64(2), []byte{2}},
		"zigzag varint": {int64(-3), []byte{5}},
	}
	bits := map[int]bool{}
	for _, row := range rows {
		bit, _ := strconv.Atoi(row[1])
		mask, _ := strconv.ParseUint(row[2], 16, 64)
		name, enc := row[3], row[4]
		if mask != 1<<bit {
			t.Errorf("row %q: bit %d has the value %#x, not %#x", row[0], bit, 1<<bit, mask)
		}
		s, ok := samples[enc]
		if !ok {
			t.Errorf("row %q: unknown encoding %q", row[0], enc)
			continue
		}
		var r exportedRecord
		r.Record.Type = rollback.RecBegin
		if err := r.set(name, s.value); err != nil {
			t.Errorf("row %q: %v", row[0], err)
			continue
		}
		want := append(binary.AppendUvarint(nil, mask), s.bytes...)
		if got := r.Record.AppendEncode(nil); !bytes.Equal(got, want) {
			t.Errorf("row %q: a record with only %s set encodes as % x, the doc says % x", row[0], name, got, want)
		}
		line := appendJSONRecord(nil, 1, [32]byte{}, r.Record)
		if !bytes.Contains(line, []byte(`"`+name+`":`)) {
			t.Errorf("row %q: export does not call the field %q: %s", row[0], name, line)
		}
		bits[bit] = true
	}
	for bit := range 64 {
		// A field's bit without the field is short: the decoder must say
		// so, not "unknown fields".
		_, err := rollback.DecodeRecord(uint8(rollback.RecBegin), binary.AppendUvarint(nil, 1<<bit))
		known := err == nil || !strings.Contains(err.Error(), "unknown fields")
		if known != bits[bit] {
			t.Errorf("mask bit %d: in the doc's table %v, known to the decoder %v", bit, bits[bit], known)
		}
	}
}
