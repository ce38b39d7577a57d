package journaltool

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// Certify passes a journal only if every saga in it committed or was
// unwound clean: an open saga (a crash nobody recovered), an unfinished
// unwind, a step still in doubt or a partial unwind fails it, and so does
// a journal the daemon would refuse (a broken chain, a record the rebuild
// refuses, records lost) or one cut by a repair that removed records
// written whole. Every torn tail, found now or cut earlier, is stated:
// unacknowledged bytes, which alone do not fail it. Exit 0 pass, 1 fail
// (each reason printed), 2 unreadable.
func Certify(args []string, w io.Writer) error {
	dir, err := journalArg("certify", args)
	if err != nil {
		return err
	}
	h := rollback.NewHistory()
	rep, bad, err := checkJournal(dir, h)
	if err != nil {
		return cli.Exit(2, "cannot read journal %s: %v", dir, err)
	}
	var fails []string
	if bad != nil {
		fails = append(fails, "the daemon refuses this journal: "+bad.String()+"; nothing from there on is certified")
	}
	if rep.Lost != nil {
		fails = append(fails, "durable records lost: "+rep.Lost.Reason)
	}
	notes, unknown, cutFails, err := tailNotes(dir, rep)
	if err != nil {
		return cli.Exit(2, "cannot read journal %s: %v", dir, err)
	}
	fails = append(fails, cutFails...)
	committed, clean := 0, 0
	for _, s := range h.Sagas {
		switch {
		case s.State == rollback.SagaCommitted:
			committed++
		case s.State == rollback.SagaUnwound && s.Clean():
			clean++
		default:
			fails = append(fails, certifyFailure(s))
		}
	}
	fmt.Fprintf(w, "%d records, %d sagas: %d committed, %d unwound clean\n", rep.Records, len(h.Sagas), committed, clean)
	for _, n := range notes {
		fmt.Fprintln(w, "note:", n)
	}
	if len(fails) > 0 {
		for _, f := range fails {
			fmt.Fprintln(w, "FAIL:", f)
		}
		return &cli.ExitError{Code: 1, Err: fmt.Errorf("%d sagas or journal problems fail certification", len(fails))}
	}
	switch {
	case unknown > 0:
		fmt.Fprintf(w, "PASS: every saga committed or was unwound clean; of the %d tails noted above, %d have no readable cut note: whether they held records is unknown\n", len(notes), unknown)
	case len(notes) > 0:
		fmt.Fprintf(w, "PASS: every saga committed or was unwound clean; the %d torn tails noted above held only bytes never acknowledged\n", len(notes))
	default:
		fmt.Fprintln(w, "PASS: every saga committed or was unwound clean")
	}
	return nil
}

func certifyFailure(s *rollback.SagaHistory) string {
	switch s.State {
	case rollback.SagaOpen:
		doubt := 0
		for _, st := range s.Steps {
			if st.Outcome == "" || st.Outcome == rollback.InDoubt {
				doubt++
			}
		}
		return fmt.Sprintf("saga %d of %s is OPEN (not recovered), %d steps, %d in doubt", s.ID, s.Agent, len(s.Steps), doubt)
	case rollback.SagaUnwinding:
		return fmt.Sprintf("saga %d of %s: unwind NOT FINISHED (%s)", s.ID, s.Agent, s.Reason)
	}
	var bad []string
	for _, st := range s.Steps {
		if st.Bucket != rollback.Compensated {
			bad = append(bad, fmt.Sprintf("step %d %s %s", st.Step, st.Actuator, st.Bucket))
		}
	}
	return fmt.Sprintf("saga %d of %s unwound PARTIAL (%s): %v", s.ID, s.Agent, s.Reason, bad)
}

// Guarantees prints what is enforced, guaranteed and not claimed.
func Guarantees(args []string, w io.Writer) error {
	fs := cli.NewFlags("guarantees")
	if err := fs.Parse(args); err != nil {
		return cli.Exit(2, "%v", err)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rollback.Promises())
}

// tailNotes states every tail cut from the journal: the torn tail a start
// would cut now, and every cut already made, kept in a .broken file with
// its note (wal.Cuts) — where it was cut, how many bytes, and the last
// record kept before it. A torn tail holds no acknowledged record (a
// record the anchor vouches for is never cut: that is a loss), but an
// auditor must hear of it: those are notes. A cut that removed records
// written whole (a repair of mid-log damage, an operator's TruncateAt)
// fails certification: what those records held is not certified.
// unknown counts the cuts without a readable note.
func tailNotes(dir string, rep wal.VerifyReport) (notes []string, unknown int, fails []string, err error) {
	if t := rep.TornTail; t != nil {
		notes = append(notes, fmt.Sprintf("a torn tail in %s at offset %d, %d bytes, after record seq %d (hash %x) (%s): never acknowledged; the next start cuts it and keeps the bytes",
			t.Segment, t.Offset, t.Bytes, rep.LastSeq, rep.LastHash[:8], t.Reason))
	}
	cuts, err := wal.Cuts(dir, wal.Options{})
	if err != nil {
		return nil, 0, nil, err
	}
	for _, c := range cuts {
		if !c.Noted {
			why := "no cut note: it was cut before notes were kept"
			if c.NoteError != "" {
				why = "its cut note is unreadable: " + c.NoteError
			}
			notes = append(notes, fmt.Sprintf("%d bytes cut earlier from %s are kept in %s; where they were cut and the record before them are unknown (%s)",
				c.Bytes, c.Segment, c.BrokenFile, why))
			unknown++
			continue
		}
		where := fmt.Sprintf("%d bytes cut from %s at offset %d", c.Bytes, c.Segment, c.Offset)
		if c.Whole {
			where = fmt.Sprintf("the whole segment %s (%d bytes) cut", c.Segment, c.Bytes)
		}
		after := "after an unknown record"
		if c.LastKnown {
			after = fmt.Sprintf("after record seq %d (hash %x)", c.LastSeq, c.LastHash[:8])
		}
		if c.Records > 0 {
			fails = append(fails, fmt.Sprintf("%s %s, kept in %s (%s), held %d records written whole (seq %d to %d): they are gone from the journal and not certified",
				where, after, c.BrokenFile, c.Reason, c.Records, c.FirstRecord, c.LastRecord))
			continue
		}
		notes = append(notes, fmt.Sprintf("%s %s, kept in %s (%s): a torn tail, no record written whole in it", where, after, c.BrokenFile, c.Reason))
	}
	return notes, unknown, fails, nil
}
