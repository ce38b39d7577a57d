package journaltool

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// smallSegments makes a journal of a few records span several segments.
var smallSegments = wal.Options{SegmentSize: 1024}

// writeJournal appends recs to the journal in dir (created if need be) and
// closes it: the anchor then names the last record.
func writeJournal(t *testing.T, dir string, recs ...rollback.Record) {
	t.Helper()
	l, err := wal.Open(dir, smallSegments)
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		if _, err := l.Append(uint8(recs[i].Type), recs[i].AppendEncode(nil)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// committed is n sagas, from id first on, of one step each, committed.
func committed(first uint64, n int) []rollback.Record {
	var out []rollback.Record
	for id := first; id < first+uint64(n); id++ {
		out = append(out,
			rollback.Record{Type: rollback.RecBegin, Saga: id, Agent: "planner", Lease: "L1", Epoch: 1, UnixNano: 1700000000e9},
			rollback.Record{Type: rollback.RecIntent, Saga: id, Step: 1, Actuator: "base", Target: float64(id), Prior: float64(id - 1), UnixNano: 1700000000e9},
			rollback.Record{Type: rollback.RecApplied, Saga: id, Step: 1, UnixNano: 1700000000e9},
			rollback.Record{Type: rollback.RecCommit, Saga: id, UnixNano: 1700000000e9})
	}
	return out
}

// frame is where a record lives on disk.
type frame struct {
	seg string // path
	off int64
	n   int64
}

// frames parses the segment files directly (not through package wal) to
// find every record's frame.
func frames(t *testing.T, dir string) map[uint64]frame {
	t.Helper()
	segs, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	out := map[uint64]frame{}
	for _, seg := range segs {
		b, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		for off := int64(64); off+17 <= int64(len(b)) && b[off+16] != 0; {
			n := 49 + int64(binary.LittleEndian.Uint32(b[off+4:]))
			out[binary.LittleEndian.Uint64(b[off+8:])] = frame{seg: seg, off: off, n: n}
			off += n
		}
	}
	return out
}

// flipBit flips one bit of the file at off.
func flipBit(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// tearAfter writes the first half of the last record's frame again after
// it: a batch torn by a power cut, never acknowledged. It returns the
// torn bytes' offset and length (up to the last non-zero byte).
func tearAfter(t *testing.T, last frame) (off, n int64) {
	t.Helper()
	b, err := os.ReadFile(last.seg)
	if err != nil {
		t.Fatal(err)
	}
	off, n = last.off+last.n, last.n/2
	copy(b[off:], b[last.off:last.off+n])
	for b[off+n-1] == 0 {
		n--
	}
	if err := os.WriteFile(last.seg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return off, n
}

// tree is every file under root with its content.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if d.IsDir() {
			out[p+"/"] = ""
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[p] = string(b)
		return nil
	})
	return out
}

// sameTree reports the first difference between two trees.
func sameTree(before, after map[string]string) string {
	for p, b := range before {
		a, ok := after[p]
		switch {
		case !ok:
			return p + " is gone"
		case a != b:
			return p + " changed"
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			return p + " was created"
		}
	}
	return ""
}

// run runs a command and returns its output (its error last) and exit
// status.
func run(cmd cli.Command, args ...string) (string, int) {
	var out bytes.Buffer
	err := cmd(args, &out)
	if err != nil {
		out.WriteString("error: " + err.Error() + "\n")
	}
	return out.String(), cli.Status(err)
}

func contains(t *testing.T, what, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("%s does not say %q:\n%s", what, w, out)
		}
	}
}
