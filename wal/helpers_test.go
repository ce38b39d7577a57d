package wal_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/wal"
	"github.com/saga-supervisor/saga-supervisor/wal/crashfs"
)

// model is what a test wrote: every record by seq, and the watermark of
// acknowledged (durable) records. Records are acknowledged in seq order
// (the writer syncs batches in order), so a watermark is enough.
type model struct {
	mu    sync.Mutex
	recs  map[uint64]modelRec
	acked uint64
	last  uint64 // last seq handed out
}

type modelRec struct {
	typ     uint8
	payload []byte
}

func newModel() *model { return &model{recs: map[uint64]modelRec{}} }

func (m *model) wrote(seq uint64, typ uint8, p []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs[seq] = modelRec{typ, bytes.Clone(p)}
	m.last = max(m.last, seq)
}

func (m *model) ack(seq uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.acked = max(m.acked, seq)
}

// randomPayload returns up to maxLen random bytes (often short, as the
// journal's records are).
func randomPayload(rng *rand.Rand, maxLen int) []byte {
	n := rng.IntN(min(maxLen, 200) + 1)
	if rng.IntN(10) == 0 {
		n = rng.IntN(maxLen + 1)
	}
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
	return p
}

// workload runs ops random operations — Append, Enqueue, Sync — against l,
// recording them in m, until one fails; it returns that error.
func workload(l *wal.Log, m *model, rng *rand.Rand, ops, maxPayload int) error {
	for range ops {
		typ := uint8(1 + rng.IntN(255))
		p := randomPayload(rng, maxPayload)
		switch r := rng.IntN(10); {
		case r < 5:
			seq, err := l.Append(typ, p)
			if seq != 0 {
				m.wrote(seq, typ, p) // even on error: it may have reached the disk
			}
			if err != nil {
				return err
			}
			m.ack(seq)
		case r < 9:
			seq, err := l.Enqueue(typ, p)
			if err != nil {
				return err
			}
			m.wrote(seq, typ, p)
			clear(p) // the journal must have copied it
		default:
			last := l.LastSeq()
			if err := l.Sync(); err != nil {
				return err
			}
			m.ack(last)
		}
	}
	return nil
}

// recovered is what checkRecovery found.
type recovered struct {
	log    *wal.Log
	report wal.OpenReport
	count  uint64
}

// checkRecovery opens the journal in fsys/dir and checks the durability
// contract against m: every acknowledged record is present and equal to
// what was written, every present record is one that was written, the log
// verifies, and a tail cut (if any) is kept in its .broken file.
func checkRecovery(t *testing.T, fsys *crashfs.FS, dir string, opt wal.Options, m *model) recovered {
	t.Helper()
	opt.FS = fsys
	l, err := wal.Open(dir, opt)
	if err != nil {
		t.Fatalf("Open after crash: %v\n%s", err, fsys)
	}
	rep := l.OpenReport()
	var count uint64
	err = wal.Scan(dir, opt, 1, func(r wal.Record) error {
		count++
		if r.Seq != count {
			t.Fatalf("Scan returned seq %d at position %d", r.Seq, count)
		}
		w, ok := m.recs[r.Seq]
		if !ok {
			t.Fatalf("seq %d present but never written", r.Seq)
		}
		if w.typ != r.Type || !bytes.Equal(w.payload, r.Payload) {
			t.Fatalf("seq %d differs from what was written", r.Seq)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	if count < m.acked {
		t.Fatalf("acknowledged records lost: %d present, %d acknowledged (tail cut %v)", count, m.acked, rep.TailCut)
	}
	if rep.LastSeq != count || l.LastSeq() != count {
		t.Fatalf("OpenReport.LastSeq %d, LastSeq %d, scanned %d", rep.LastSeq, l.LastSeq(), count)
	}
	vr, err := wal.Verify(dir, opt)
	if err != nil || !vr.OK() || vr.LastSeq != count {
		t.Fatalf("Verify after Open: %+v %v", vr, err)
	}
	if tc := rep.TailCut; tc != nil {
		b, err := fsys.ReadFile(filepath.Join(dir, tc.BrokenFile))
		if err != nil || int64(len(b)) != tc.Bytes || tc.Bytes == 0 {
			t.Fatalf("tail cut %v: .broken file has %d bytes (%v)", tc, len(b), err)
		}
	}
	return recovered{log: l, report: rep, count: count}
}

// frameLoc is where a record lives on disk.
type frameLoc struct {
	seg string // path
	off int64
	n   int64 // frame length
}

// locate parses the segment files directly (independently of the package)
// to find every record's frame.
func locate(t *testing.T, fsys *crashfs.FS, dir string) map[uint64]frameLoc {
	t.Helper()
	names, err := fsys.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	locs := map[uint64]frameLoc{}
	for _, n := range names {
		if filepath.Ext(n) != ".wal" {
			continue
		}
		p := filepath.Join(dir, n)
		b, err := fsys.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for off := int64(64); off+17 <= int64(len(b)) && b[off+16] != 0; {
			l := 49 + int64(binary.LittleEndian.Uint32(b[off+4:]))
			locs[binary.LittleEndian.Uint64(b[off+8:])] = frameLoc{seg: p, off: off, n: l}
			off += l
		}
	}
	return locs
}

// mustOpen opens a journal or fails the test.
func mustOpen(t testing.TB, dir string, opt wal.Options) *wal.Log {
	t.Helper()
	l, err := wal.Open(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// appendN appends n records with payloads derived from their seq.
func appendN(t testing.TB, l *wal.Log, m *model, n int, size int) {
	t.Helper()
	for range n {
		seq := l.LastSeq() + 1
		p := bytes.Repeat([]byte{byte(seq), byte(seq >> 8)}, size/2)
		got, err := l.Append(uint8(seq%250+1), p)
		if err != nil {
			t.Fatal(err)
		}
		if got != seq {
			t.Fatalf("Append returned seq %d, want %d", got, seq)
		}
		if m != nil {
			m.wrote(got, uint8(seq%250+1), p)
			m.ack(got)
		}
	}
}

func asCorruption(t *testing.T, err error) *wal.CorruptionError {
	t.Helper()
	var ce *wal.CorruptionError
	if !errors.As(err, &ce) || !errors.Is(err, wal.ErrCorrupt) {
		t.Fatalf("want *CorruptionError, got %v", err)
	}
	return ce
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }
