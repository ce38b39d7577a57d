// Package journaltool holds the commands that read a journal after the
// fact: verify (the hash chain, and every record against the rules the
// daemon rebuilds by), graph (sagas and their unwinds as a Mermaid
// flowchart), certify (every saga committed or unwound clean), repair (cut
// a damaged journal at its first bad record), recover (take the journal
// over on the simulated arm), guarantees, and journal export (every record
// as a line of JSON).
package journaltool

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/simarm"
	"github.com/saga-supervisor/saga-supervisor/recovery"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// problem is the first record a journal tool refuses: where the chain
// breaks (wal.Verify), or the first record the rebuild's rules refuse
// (rollback.Validator), whichever comes first.
type problem struct {
	broken   *wal.CorruptionError // the chain breaks here
	refused  *rollback.Refusal    // or the rebuild refuses this record
	accepted uint64               // records verified and accepted before it
}

// seq is the problem record's sequence number.
func (p *problem) seq() uint64 {
	if p.refused != nil {
		return p.refused.Seq
	}
	return p.broken.Seq
}

func (p *problem) String() string {
	if r := p.refused; r != nil {
		return fmt.Sprintf("record seq %d (%s) is refused by replay, the daemon's rules at start: %s", r.Seq, r.Type, r.Reason())
	}
	b := p.broken
	return fmt.Sprintf("record seq %d in segment %s at offset %d: %s", b.Seq, b.Segment, b.Offset, b.Reason)
}

// checkJournal verifies the chain and runs every record through the
// rebuild's rules, exactly as the daemon applies them at start
// (rollback.Validator): a journal the daemon would refuse is refused here.
// Records the rebuild accepts are added to h, if not nil. It returns what
// Verify found and the first record refused, if any.
func checkJournal(dir string, h *rollback.History) (wal.VerifyReport, *problem, error) {
	rep, err := wal.Verify(dir, wal.Options{})
	if err != nil {
		return rep, nil, err
	}
	v, after, err := validatorFor(dir, rep)
	if err != nil {
		return rep, nil, err
	}
	if v == nil {
		// Records missing at the start and no checkpoint standing in for
		// them: Verify reports the loss; the rules cannot be applied to
		// sagas whose beginning is gone.
		return rep, nil, nil
	}
	err = wal.Scan(dir, wal.Options{}, 1, func(r wal.Record) error {
		if r.Seq > after {
			if err := v.Apply(r.Seq, r.Type, r.Payload); err != nil {
				return err
			}
		}
		if h != nil {
			rec, _ := rollback.DecodeRecord(r.Type, r.Payload) // Apply decoded it
			h.Add(rec)
		}
		return nil
	})
	var ce *wal.CorruptionError
	switch {
	case v.Refused() != nil:
		return rep, &problem{refused: v.Refused(), accepted: v.Accepted()}, nil
	case rep.Broken != nil:
		return rep, &problem{broken: rep.Broken, accepted: v.Accepted()}, nil
	case errors.As(err, &ce):
		return rep, &problem{broken: ce, accepted: v.Accepted()}, nil // damaged since Verify read it
	case err != nil:
		return rep, nil, err
	}
	return rep, nil, nil
}

// validatorFor returns the validator for dir's records and the seq after
// which it applies them: from the start for a journal that still holds
// record 1; for one whose first segments retention deleted, from the
// oldest checkpoint the journal still holds the record of (the state before
// it is the checkpoint's; the records up to it are checked by the chain
// only). nil when no checkpoint stands in for the missing records.
func validatorFor(dir string, rep wal.VerifyReport) (*rollback.Validator, uint64, error) {
	if rep.FirstSeq <= 1 {
		return rollback.NewValidator(), 0, nil
	}
	good, _, err := wal.Checkpoints(dir, wal.Options{})
	if err != nil {
		return nil, 0, err
	}
	for i := len(good) - 1; i >= 0; i-- { // oldest first
		c := good[i]
		if c.At.Seq < rep.FirstSeq || c.At.Seq > rep.LastSeq {
			continue
		}
		v, err := rollback.NewValidatorFrom(c.Payload)
		if err != nil {
			return nil, 0, fmt.Errorf("checkpoint %s: %w", c.Name, err)
		}
		return v, c.At.Seq, nil
	}
	return nil, 0, nil
}

// anchorFile is the journal's anchor (wal/anchor.go). A directory holding
// it and no segment is a journal that lost every segment: the tools say
// LOST rather than "no journal here".
const anchorFile = "ANCHOR"

// requireJournal fails with exit 2, creating nothing, when dir holds no
// journal: it does not exist, or holds neither a segment nor an anchor. A
// mistyped path must not read as an empty, intact journal.
func requireJournal(dir string) error {
	ok, err := wal.Present(nil, dir)
	if err != nil {
		return cli.Exit(2, "cannot read journal %s: %v", dir, err)
	}
	if !ok {
		if _, err := os.Stat(filepath.Join(dir, anchorFile)); err != nil {
			return cli.Exit(2, "no journal in %s: it holds no journal segment (*.wal)", dir)
		}
	}
	return nil
}

// journalArg parses the --wal DIR flag of a command that reads a journal;
// a missing or unreadable directory, or one holding no journal, is exit 2.
// Flags of the command's own, besides --wal, are set up by more.
func journalArg(name string, args []string, more ...func(*flag.FlagSet)) (string, error) {
	fs := cli.NewFlags(name)
	dir := fs.String("wal", "", "journal directory")
	for _, m := range more {
		m(fs)
	}
	if err := fs.Parse(args); err != nil {
		return "", cli.Exit(2, "%v", err)
	}
	if *dir == "" {
		return "", cli.Exit(2, "--wal DIR is required")
	}
	if st, err := os.Stat(*dir); err != nil || !st.IsDir() {
		return "", cli.Exit(2, "cannot read journal %s: %v", *dir, cli.ErrOr(err, "not a directory"))
	}
	return *dir, requireJournal(*dir)
}

// Verify is `verify --wal DIR`: it checks the journal's hash chain and
// runs every record through the rules the daemon rebuilds by.
func Verify(args []string, w io.Writer) error {
	dir, err := journalArg("verify", args)
	if err != nil {
		return err
	}
	rep, bad, err := checkJournal(dir, nil)
	if err != nil {
		return cli.Exit(2, "cannot read journal %s: %v", dir, err)
	}
	if bad != nil {
		fmt.Fprintf(w, "BROKEN: %d records verified, then %s\n", bad.accepted, bad)
		if bad.refused != nil {
			fmt.Fprintln(w, "The hash chain holds, but the engine never writes this record where it stands: the journal was written or changed by something else.")
			fmt.Fprintln(w, "The supervisor will refuse to start on this journal. Keep a copy.")
		} else {
			fmt.Fprintln(w, "The supervisor will refuse to start on this journal. Keep a copy; `repair` says what a cut at the damage removes, and cuts with --yes.")
		}
		return &cli.ExitError{Code: 1, Err: errors.New("journal broken")}
	}
	if l := rep.Lost; l != nil {
		fmt.Fprintf(w, "LOST: %d records in %d segments verified, last seq %d, but %s\n", rep.Records, rep.Segments, rep.LastSeq, l.Reason)
		fmt.Fprintln(w, "The supervisor will refuse to start on this journal until an operator accepts the loss (run --accept-journal-loss). Keep a copy.")
		return &cli.ExitError{Code: 1, Err: errors.New("journal records lost")}
	}
	fmt.Fprintf(w, "OK: %d records in %d segments, chain intact, last seq %d, head %x\n",
		rep.Records, rep.Segments, rep.LastSeq, rep.LastHash[:8])
	if t := rep.TornTail; t != nil {
		fmt.Fprintf(w, "note: torn tail of %d bytes at %s offset %d (%s); it will be cut and kept in a .broken file on open\n",
			t.Bytes, t.Segment, t.Offset, t.Reason)
	}
	return nil
}

// Graph is `graph --wal DIR [--saga ID]`: sagas as a Mermaid flowchart.
func Graph(args []string, w io.Writer) error {
	var sagaID *string
	dir, err := journalArg("graph", args, func(fs *flag.FlagSet) { sagaID = fs.String("saga", "", "draw only this saga") })
	if err != nil {
		return err
	}
	// Drawn from the records the rebuild accepts: a record the daemon
	// refuses (a clean END no unwind led to, say) is not drawn as if it
	// were true.
	h := rollback.NewHistory()
	_, bad, err := checkJournal(dir, h)
	if err != nil {
		return cli.Exit(2, "cannot read journal %s: %v", dir, err)
	}
	sagas := h.Sagas
	if *sagaID != "" {
		id, perr := strconv.ParseUint(*sagaID, 10, 64)
		s := h.Saga(id)
		if perr != nil || s == nil {
			return cli.Exit(1, "no saga %q in the journal", *sagaID)
		}
		sagas = []*rollback.SagaHistory{s}
	}
	writeMermaid(w, sagas)
	if bad != nil {
		return cli.Exit(1, "journal refused at %s: drawn up to there only", bad)
	}
	return nil
}

// ReadHistory reads every record of a journal into a History. A corrupt
// journal returns what was read before the break and the error.
func ReadHistory(dir string) (*rollback.History, error) {
	h := rollback.NewHistory()
	err := wal.Scan(dir, wal.Options{}, 1, func(r wal.Record) error {
		rec, err := rollback.DecodeRecord(r.Type, r.Payload)
		if err != nil {
			return &wal.CorruptionError{Seq: r.Seq, Reason: err.Error()}
		}
		h.Add(rec)
		return nil
	})
	return h, err
}

// Recover is `recover --wal DIR --world FILE`: it takes the journal over
// and finishes every open saga on the simulated arm.
func Recover(args []string, w io.Writer) error {
	fs := cli.NewFlags("recover")
	dir := fs.String("wal", "", "journal directory")
	world := fs.String("world", "", "the simulated arm's world file")
	if err := fs.Parse(args); err != nil {
		return cli.Exit(2, "%v", err)
	}
	if *dir == "" || *world == "" {
		return cli.Exit(2, "--wal DIR and --world FILE are required")
	}
	// recover takes over a journal that exists: a mistyped path must not
	// start a new one (and a new world) and report "no saga was left open".
	switch ok, err := wal.Present(nil, *dir); {
	case err != nil:
		return cli.Exit(2, "no journal to recover: %v", err)
	case !ok:
		return cli.Exit(2, "no journal to recover: %s holds no journal segment (*.wal)", *dir)
	}
	if _, err := os.Stat(*world); err != nil {
		return cli.Exit(2, "the world to recover into: %v", err)
	}
	a, err := simarm.Open(*world, nil)
	if err != nil {
		return err
	}
	defer a.Close()
	res, err := recovery.Open(recovery.Options{Dir: *dir, Engine: rollback.Config{Actuators: a.Registry, Supplies: a.Supplies}})
	if err != nil {
		return err
	}
	defer res.Close()
	printRecovery(w, res)
	if !res.Clean() {
		return cli.Exit(1, "recovery finished, but not every unwind was clean")
	}
	return nil
}

func printRecovery(w io.Writer, res *recovery.Result) {
	fmt.Fprintf(w, "journal verified: %d records in %d segments (%s)\n", res.Opened.Records, res.Opened.Segments, res.Took.Round(10e3))
	if t := res.Opened.TailCut; t != nil {
		fmt.Fprintf(w, "torn tail cut: %d bytes at %s offset %d (%s), kept in %s\n", t.Bytes, t.Segment, t.Offset, t.Reason, t.BrokenFile)
	}
	if len(res.Reports) == 0 {
		fmt.Fprintln(w, "no saga was left open")
	}
	for _, rep := range res.Reports {
		fmt.Fprint(w, rep.String())
	}
}
