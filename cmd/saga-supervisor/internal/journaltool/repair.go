package journaltool

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// Repair is `repair --wal DIR [--yes]`: it mends a journal the daemon
// refuses as corrupt, or that ends in a torn tail, by cutting it just
// before its first bad record. Without --yes it only reads: it names the
// first bad record and the last good one, and says exactly what a cut
// removes, segment by segment — records after the damage that still check
// included — and exits 1 (0 when nothing needs repair). With --yes it keeps
// every byte it cuts in .broken files (with their cut notes), cuts, checks
// the journal again and says what was lost; exit 0 when the journal then
// verifies. It never cuts a journal whose anchor says records are lost (run
// --accept-journal-loss is the operator's way past that), nor a record
// whose chain is intact but that the rebuild refuses: cutting is for
// damage. Exit 2: no journal there, or unreadable.
func Repair(args []string, w io.Writer) error {
	var yes *bool
	var at *uint64
	dir, err := journalArg("repair", args, func(fs *flag.FlagSet) {
		yes = fs.Bool("yes", false, "cut: without it, repair only says what it would cut")
		at = fs.Uint64("at", 0, "cut just before this record instead of the first bad one: the operator's way past a record the daemon refuses in an intact chain (with --yes)")
	})
	if err != nil {
		return err
	}
	plan, err := wal.PlanCut(dir, wal.Options{}, *at)
	if err != nil && *at != 0 {
		return cli.Exit(2, "%v", err)
	}
	if err != nil {
		return cli.Exit(2, "cannot read journal %s: %v", dir, err)
	}
	if l := plan.Report.Lost; l != nil {
		fmt.Fprintf(w, "LOST: %s\n", l.Reason)
		fmt.Fprintln(w, "Cutting cannot bring those records back, and repair does not cut this journal. Keep a copy of it; once you have looked,")
		fmt.Fprintln(w, "`saga-supervisor run --accept-journal-loss` starts on it halted, with the loss journaled.")
		return cli.Exit(1, "journal records lost: not repaired by cutting")
	}
	// The rebuild's rules over what comes before the damage: a record they
	// refuse is not damage, and a cut after it would not mend the journal.
	_, bad, err := checkJournal(dir, nil)
	if err != nil {
		return cli.Exit(2, "cannot read journal %s: %v", dir, err)
	}
	if bad != nil && bad.refused != nil && *at == 0 {
		fmt.Fprintf(w, "REFUSED: %d records verified, then %s\n", bad.accepted, bad)
		fmt.Fprintln(w, "The hash chain is intact there: this is not damage, and repair does not cut it on its own. Keep a copy of the journal and report it.")
		fmt.Fprintf(w, "Once you have looked, `saga-supervisor repair --wal %s --at %d` says what a cut just before it removes, and with --yes cuts there.\n", dir, bad.seq())
		return cli.Exit(1, "a record the daemon refuses, in an intact chain: not repaired by cutting unless told where (--at)")
	}
	if plan.CutAt == 0 {
		rep := plan.Report
		fmt.Fprintf(w, "nothing to repair: %d records in %d segments, chain intact, last seq %d, head %x\n", rep.Records, rep.Segments, rep.LastSeq, rep.LastHash[:8])
		return nil
	}
	describeDamage(w, dir, plan)
	if !*yes {
		fmt.Fprintln(w, "Nothing was changed.")
		return cli.Exit(1, "repair needed; run again with --yes to cut (the cut bytes are kept in .broken files)")
	}

	done, err := wal.Cut(dir, wal.Options{}, *at)
	if errors.Is(err, wal.ErrLocked) {
		return cli.Exit(1, "the journal is in use (%v): stop the supervisor first; nothing was cut", err)
	}
	if err != nil {
		return cli.Exit(1, "repair failed part way (%v): what it cut is kept in .broken files, and running it again finishes the cut", err)
	}
	switch {
	case done.Report.Lost != nil:
		return cli.Exit(1, "the journal changed since it was read, and now lost records its anchor vouches for (%s): nothing was cut", done.Report.Lost.Reason)
	case done.CutAt == 0:
		fmt.Fprintln(w, "The journal changed since it was read and needs no repair now (a supervisor cut its torn tail?): nothing was cut.")
	case done.CutAt != plan.CutAt:
		fmt.Fprintf(w, "The journal changed since it was read: the cut was made from seq %d on instead:\n", done.CutAt)
		describeDamage(w, dir, done)
	}
	slices.Sort(done.BrokenFiles)
	for _, name := range done.BrokenFiles {
		fmt.Fprintf(w, "kept: %s (with its note %s.cut)\n", name, name)
	}
	if done.CutAt != 0 {
		fmt.Fprintf(w, "CUT: the journal now ends at record seq %d; what is listed above as cut is gone from it.\n", done.CutAt-1)
	}
	rep, bad, err := checkJournal(dir, nil)
	if err != nil {
		return cli.Exit(2, "cannot read journal %s after the cut: %v", dir, err)
	}
	if bad != nil || !rep.OK() {
		what := "a torn tail or lost records"
		if bad != nil {
			what = bad.String()
		}
		return cli.Exit(1, "after the cut the journal still does not verify: %s", what)
	}
	fmt.Fprintf(w, "OK: %d records in %d segments, chain intact, last seq %d, head %x\n", rep.Records, rep.Segments, rep.LastSeq, rep.LastHash[:8])
	return nil
}

// describeDamage prints the first bad record, the last good one and what
// the cut removes.
func describeDamage(w io.Writer, dir string, plan wal.RepairPlan) {
	rep := plan.Report
	if b := rep.Broken; b != nil && b.Seq == plan.CutAt {
		fmt.Fprintf(w, "first bad record: seq %d in segment %s at offset %d: %s\n", b.Seq, b.Segment, b.Offset, b.Reason)
	} else if t := rep.TornTail; t != nil && plan.CutAt == rep.LastSeq+1 {
		fmt.Fprintf(w, "torn tail: segment %s at offset %d, %d bytes (%s): where record seq %d was being written, never acknowledged\n",
			t.Segment, t.Offset, t.Bytes, t.Reason, plan.CutAt)
	}
	operator := plan.CutAt <= rep.LastSeq // before a record that verified: the operator's cut (--at)
	switch kept := plan.CutAt - 1; {
	case operator:
		fmt.Fprintf(w, "the operator's cut: just before record seq %d, the chain intact there; the last record kept is seq %d%s\n", plan.CutAt, kept, recordAt(dir, kept))
	case rep.LastSeq == 0:
		fmt.Fprintln(w, "last good record: none (the damage is at the journal's very start)")
	default:
		fmt.Fprintf(w, "last good record: seq %d, hash %x%s\n", rep.LastSeq, rep.LastHash[:8], recordAt(dir, rep.LastSeq))
	}
	fmt.Fprintf(w, "a repair cuts every record from seq %d on, and keeps the bytes in .broken files:\n", plan.CutAt)
	var bytes int64
	records := 0
	for _, c := range plan.Cuts {
		bytes += c.Bytes
		records += c.Records
		what := fmt.Sprintf("%d bytes from offset %d", c.Bytes, c.Offset)
		if c.Whole {
			what = fmt.Sprintf("the whole file, %d bytes", c.Bytes)
		}
		held := "no record in them checks"
		if c.Records > 0 {
			held = fmt.Sprintf("%d records that check (seq %d to %d)", c.Records, c.FirstRecord, c.LastRecord)
		}
		fmt.Fprintf(w, "  %s: %s; %s\n", c.Segment, what, held)
	}
	fmt.Fprintf(w, "  in all: %d bytes in %d segments", bytes, len(plan.Cuts))
	switch {
	case operator:
		fmt.Fprintf(w, ", %d records that verified", records)
	case rep.Broken != nil:
		fmt.Fprintf(w, ", the damaged record seq %d and %d records after it that check", plan.CutAt, records)
	}
	fmt.Fprintln(w)
	if operator {
		fmt.Fprintf(w, "WARNING: THE CUT REMOVES %d RECORDS THAT VERIFIED, FROM SEQ %d ON.\n", records, plan.CutAt)
	} else if records > 0 {
		fmt.Fprintf(w, "WARNING: %d RECORDS AFTER THE DAMAGE ARE WHOLE AND VERIFY ON THEIR OWN: THE CUT LOSES THEM TOO.\n", records)
	}
	if plan.AnchorSeq >= plan.CutAt {
		fmt.Fprintf(w, "WARNING: THE ANCHOR SAYS RECORDS UP TO SEQ %d WERE DURABLE: THE CUT REMOVES RECORDS THAT WERE ACKNOWLEDGED.\n", plan.AnchorSeq)
	}
	if rep.Broken == nil && !operator {
		fmt.Fprintln(w, "(A torn tail holds no acknowledged record; the supervisor also cuts it itself, keeping the bytes, at its next start.)")
		return
	}
	fmt.Fprintln(w, "After the cut, the ids of sagas begun in the cut records are handed out again: an operator approval naming one, still inside its window, could be used once more.")
}

// recordAt describes record seq for the operator — its type and when it
// was written — or says nothing if it cannot be read.
func recordAt(dir string, seq uint64) string {
	var out string
	stop := errors.New("found")
	wal.Scan(dir, wal.Options{}, seq, func(r wal.Record) error {
		if r.Seq != seq {
			return stop
		}
		if rec, err := rollback.DecodeRecord(r.Type, r.Payload); err == nil {
			out = fmt.Sprintf(", %s", rec.Type)
			if rec.UnixNano != 0 {
				out += ", written " + time.Unix(0, rec.UnixNano).UTC().Format(time.RFC3339Nano)
			}
		}
		return stop
	})
	return out
}
