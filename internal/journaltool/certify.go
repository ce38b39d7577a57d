package journaltool

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/saga-supervisor/saga-supervisor/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// Certify passes a journal only if every saga in it committed or was
// unwound clean: an open saga (a crash nobody recovered), an unfinished
// unwind, a step still in doubt or a partial unwind fails it. Exit 0 pass,
// 1 fail (each reason printed), 2 unreadable.
func Certify(args []string, w io.Writer) error {
	dir, err := journalArg("certify", args)
	if err != nil {
		return err
	}
	rep, broken, err := checkJournal(dir)
	if err != nil {
		return cli.Exit(2, "cannot read journal %s: %v", dir, err)
	}
	var fails []string
	if broken != nil {
		fails = append(fails, fmt.Sprintf("journal broken at record seq %d (%s)", broken.Seq, broken.Reason))
	}
	if rep.Lost != nil {
		fails = append(fails, "durable records lost: "+rep.Lost.Reason)
	}
	notes, err := tailNotes(dir, rep)
	if err != nil {
		return cli.Exit(2, "cannot read journal %s: %v", dir, err)
	}
	h, herr := ReadHistory(dir)
	var ce *wal.CorruptionError
	if herr != nil && !errors.As(herr, &ce) {
		return cli.Exit(2, "cannot read journal %s: %v", dir, herr)
	}
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
	fmt.Fprintln(w, "PASS: every saga committed or was unwound clean")
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
// would cut now, and every cut already made, kept in a .broken file. A cut
// holds no acknowledged record (a record the anchor vouches for is never
// cut: that is a loss), but an auditor must hear of it.
func tailNotes(dir string, rep wal.VerifyReport) ([]string, error) {
	var notes []string
	if t := rep.TornTail; t != nil {
		notes = append(notes, fmt.Sprintf("a torn tail of %d bytes at %s offset %d, after record seq %d (%s): never acknowledged; the next start cuts it and keeps the bytes",
			t.Bytes, t.Segment, t.Offset, rep.LastSeq, t.Reason))
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if !strings.Contains(e.Name(), ".broken") || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return nil, err
		}
		seg, _, _ := strings.Cut(e.Name(), ".broken")
		notes = append(notes, fmt.Sprintf("%d bytes were cut from %s earlier and are kept in %s", info.Size(), seg, e.Name()))
	}
	return notes, nil
}
