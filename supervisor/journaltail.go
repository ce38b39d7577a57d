package supervisor

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// The dashboard's journal tail: the last records and the last refusals,
// read back from the durable journal by the dashboard's goroutine, never
// on the step path (which only appends). It follows the journal with
// wal.Log.Follow from where recovery rebuilt the state, so each record is
// read once, after it is durable, with its chain hash checked.
const (
	tailRecords  = 24
	tailRefusals = 12
	// tailMessage bounds a record's message on the page.
	tailMessage = 160
)

// TailRecord is one journal record as the dashboard shows it.
type TailRecord struct {
	Seq      uint64    `json:"seq"`
	Type     string    `json:"type"`
	Saga     uint64    `json:"saga,omitempty"`
	Step     uint32    `json:"step,omitempty"`
	Actuator string    `json:"actuator,omitempty"`
	Agent    string    `json:"agent,omitempty"`
	Value    *float64  `json:"value,omitempty"` // INTENT, COMP_INTENT: the value commanded
	Code     string    `json:"code,omitempty"`
	Message  string    `json:"message,omitempty"`
	Hash     string    `json:"hash"` // the chain hash's first 6 bytes, in hex
	At       time.Time `json:"at,omitzero"`
}

type journalTail struct {
	log *wal.Log
	dir string
	opt wal.Options

	mu      sync.Mutex // guards what follows; never held across the disk reads
	pos     wal.Position
	seeded  bool
	recent  []TailRecord
	refused []TailRecord
	err     string
}

func newJournalTail(l *wal.Log, dir string, opt wal.Options, from wal.Position) *journalTail {
	return &journalTail{log: l, dir: dir, opt: opt, pos: from}
}

// errTailSeeded stops the seeding scan at the position following starts from.
var errTailSeeded = errors.New("seeded")

// catchUp reads what became durable since the last call: the first call
// also reads back the last records written before the start (wal.Scan of
// the segment that holds them). Only the dashboard's goroutine calls it.
func (t *journalTail) catchUp() {
	t.mu.Lock()
	pos, seeded := t.pos, t.seeded
	t.mu.Unlock()
	var got []TailRecord
	keep := func(r wal.Record) error {
		got = append(got, tailRecord(r))
		if len(got) > 4*tailRecords { // a long catch-up keeps only what shows
			got = append(got[:0], got[len(got)-tailRecords:]...)
		}
		return nil
	}
	var err error
	if !seeded && pos.Seq > 0 {
		from := uint64(1)
		if pos.Seq > tailRecords {
			from = pos.Seq - tailRecords + 1
		}
		err = wal.Scan(t.dir, t.opt, from, func(r wal.Record) error {
			if r.Seq > pos.Seq {
				return errTailSeeded
			}
			return keep(r)
		})
		if errors.Is(err, errTailSeeded) {
			err = nil
		}
	}
	var next wal.Position
	if err == nil {
		next, err = t.log.Follow(pos, keep)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seeded = true
	if err != nil {
		// Shown on the page; the supervisor's own verification pass
		// (journalcheck.go) judges the journal.
		t.err = fmt.Sprintf("reading the journal's tail: %v", err)
		return
	}
	t.pos, t.err = next, ""
	for _, r := range got {
		t.recent = appendBounded(t.recent, r, tailRecords)
		if r.Type == rollback.RecRefused.String() {
			t.refused = appendBounded(t.refused, r, tailRefusals)
		}
	}
}

// behind reports whether the journal holds durable records not read yet.
func (t *journalTail) behind() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.seeded || t.log.DurableSeq() > t.pos.Seq
}

// snapshot returns copies of the last records and refusals, newest last,
// and the last read error.
func (t *journalTail) snapshot() (recent, refused []TailRecord, err string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]TailRecord{}, t.recent...), append([]TailRecord{}, t.refused...), t.err
}

func appendBounded(s []TailRecord, r TailRecord, n int) []TailRecord {
	if len(s) >= n {
		s = append(s[:0], s[len(s)-n+1:]...)
	}
	return append(s, r)
}

// tailRecord decodes r for the page. A record the engine cannot decode
// is shown by its type number and hash.
func tailRecord(r wal.Record) TailRecord {
	tr := TailRecord{Seq: r.Seq, Hash: hex.EncodeToString(r.Hash[:6]), Type: rollback.RecordType(r.Type).String()}
	rec, err := rollback.DecodeRecord(r.Type, r.Payload)
	if err != nil {
		tr.Message = "undecodable: " + err.Error()
		return tr
	}
	tr.Saga, tr.Step, tr.Actuator, tr.Agent, tr.Code = rec.Saga, rec.Step, rec.Actuator, rec.Agent, rec.Code
	if rec.Type == rollback.RecIntent || rec.Type == rollback.RecCompIntent || rec.Type == rollback.RecSafe {
		v := rec.Target
		tr.Value = &v
	}
	if len(rec.Message) > tailMessage {
		rec.Message = strings.ToValidUTF8(rec.Message[:tailMessage], "") + "…"
	}
	tr.Message = rec.Message
	if rec.UnixNano != 0 {
		tr.At = time.Unix(0, rec.UnixNano).UTC()
	}
	return tr
}
