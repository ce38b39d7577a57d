package journaltool

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// repair, on each kind of damage: without --yes it names the first bad
// record, the last good one and every byte a cut removes, segment by
// segment, warns of records after the damage that are whole, and changes
// nothing (every file's bytes equal); with --yes the .broken files hold
// exactly the bytes cut, the journal then opens with wal.Open, and a
// second run says there is nothing to repair. What cutting cannot mend —
// records lost behind the anchor, a record the rebuild refuses in an
// intact chain — it refuses to cut.
func TestRepairCommand(t *testing.T) {
	const sagas = 8 // 32 records over several 1 KiB segments
	cases := []struct {
		name string
		// damage breaks the journal in dir (its frames given) and returns
		// the seq of the first record a cut removes (0: none).
		damage func(t *testing.T, dir string, fs map[uint64]frame) uint64
		exit   int      // without --yes
		says   []string // without --yes
		cuts   bool     // --yes cuts, exit 0
	}{
		{"a bit flipped mid-log", func(t *testing.T, dir string, fs map[uint64]frame) uint64 {
			flipBit(t, fs[7].seg, fs[7].off+25)
			return 7
		}, 1, []string{"first bad record: seq 7 in segment", "last good record: seq 6, hash", "INTENT, written 2023-11-14T22:13:20Z",
			"RECORDS AFTER THE DAMAGE ARE WHOLE", "THE ANCHOR SAYS RECORDS UP TO SEQ 32 WERE DURABLE", "records that check (seq 8 to", "Nothing was changed", "--yes"}, true},
		{"a torn tail", func(t *testing.T, dir string, fs map[uint64]frame) uint64 {
			tearAfter(t, fs[uint64(len(fs))])
			return uint64(len(fs)) + 1
		}, 1, []string{"torn tail: segment", "never acknowledged", "last good record: seq 32", "no record in them checks", "the supervisor also cuts it itself"}, true},
		{"the last record damaged, which the anchor vouches for", func(t *testing.T, dir string, fs map[uint64]frame) uint64 {
			last := fs[uint64(len(fs))]
			flipBit(t, last.seg, last.off+25)
			return 0
		}, 1, []string{"LOST:", "run --accept-journal-loss", "not repaired by cutting"}, false},
		{"the last record damaged, the anchor not yet past it", func(t *testing.T, dir string, fs map[uint64]frame) uint64 {
			last := fs[uint64(len(fs))]
			flipBit(t, last.seg, last.off+25)
			os.Remove(filepath.Join(dir, anchorFile)) // a crash before the anchor's next move, as far as it matters
			return uint64(len(fs))
		}, 1, []string{"torn tail: segment", "last good record: seq 31"}, true},
		{"a record the rebuild refuses, in an intact chain", func(t *testing.T, dir string, fs map[uint64]frame) uint64 {
			writeJournal(t, dir, rollback.Record{Type: rollback.RecEnd, Saga: 1, Code: "clean"})
			return 0
		}, 1, []string{"REFUSED:", "record seq 33 (END)", "this is not damage", "--at 33"}, false},
		{"an intact journal", func(t *testing.T, dir string, fs map[uint64]frame) uint64 { return 0 }, 0, []string{"nothing to repair: 32 records"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "journal")
			writeJournal(t, dir, committed(1, sagas)...)
			fs := frames(t, dir)
			cutAt := tc.damage(t, dir, fs)
			before := tree(t, dir)
			out, code := run(Repair, "--wal", dir)
			if code != tc.exit {
				t.Fatalf("repair: exit %d, want %d\n%s", code, tc.exit, out)
			}
			contains(t, "repair", out, tc.says...)
			if diff := sameTree(before, tree(t, dir)); diff != "" {
				t.Fatalf("repair without --yes changed the journal: %s", diff)
			}
			plan, err := wal.PlanRepair(dir, wal.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range plan.Cuts {
				what := fmt.Sprintf("%s: %d bytes from offset %d", c.Segment, c.Bytes, c.Offset)
				if c.Whole {
					what = fmt.Sprintf("%s: the whole file, %d bytes", c.Segment, c.Bytes)
				}
				contains(t, "repair", out, what)
			}

			out, code = run(Repair, "--wal", dir, "--yes")
			if !tc.cuts {
				if code != tc.exit {
					t.Fatalf("repair --yes: exit %d, want %d\n%s", code, tc.exit, out)
				}
				if diff := sameTree(before, tree(t, dir)); diff != "" {
					t.Fatalf("repair --yes changed a journal it must not cut: %s", diff)
				}
				return
			}
			if code != 0 {
				t.Fatalf("repair --yes: exit %d\n%s", code, out)
			}
			contains(t, "repair --yes", out, "kept: ", fmt.Sprintf("CUT: the journal now ends at record seq %d", cutAt-1), "OK:")
			// Every byte cut is kept, in the .broken file of its segment.
			kept, err := wal.Cuts(dir, wal.Options{})
			if err != nil || len(kept) != len(plan.Cuts) {
				t.Fatalf("kept %+v (%v), the plan cut %+v", kept, err, plan.Cuts)
			}
			for i, k := range kept {
				c := plan.Cuts[i]
				got, _ := os.ReadFile(filepath.Join(dir, k.BrokenFile))
				seg := before[filepath.Join(dir, c.Segment)]
				if want := seg[c.Offset : c.Offset+c.Bytes]; string(got) != want {
					t.Errorf("%s holds %d bytes, not the %d cut from %s at %d", k.BrokenFile, len(got), len(want), c.Segment, c.Offset)
				}
			}
			l, err := wal.Open(dir, wal.Options{})
			if err != nil {
				t.Fatalf("the repaired journal does not open: %v", err)
			}
			if l.LastSeq() != cutAt-1 {
				t.Errorf("the repaired journal ends at %d, want %d", l.LastSeq(), cutAt-1)
			}
			l.Close()
			out, code = run(Repair, "--wal", dir)
			if code != 0 {
				t.Fatalf("repair after the cut: exit %d\n%s", code, out)
			}
			contains(t, "repair after the cut", out, "nothing to repair")
		})
	}
}

// The operator's way past a record the daemon refuses in an intact chain:
// repair --at SEQ says what a cut just before it removes, changes nothing
// without --yes, and with --yes cuts there (the bytes kept), after which the
// journal verifies, the rebuild accepts it and the daemon would start on it.
func TestRepairAtTheOperatorsRecord(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	writeJournal(t, dir, committed(1, 8)...)
	writeJournal(t, dir, rollback.Record{Type: rollback.RecEnd, Saga: 1, Code: "clean"}, rollback.Record{Type: rollback.RecLease, Agent: "a", Epoch: 9})
	before := tree(t, dir)
	out, code := run(Repair, "--wal", dir, "--at", "33")
	if code != 1 {
		t.Fatalf("repair --at 33: exit %d\n%s", code, out)
	}
	contains(t, "repair --at", out, "the operator's cut: just before record seq 33", "last record kept is seq 32", "THE CUT REMOVES 2 RECORDS THAT VERIFIED", "Nothing was changed")
	if diff := sameTree(before, tree(t, dir)); diff != "" {
		t.Fatalf("repair --at without --yes changed the journal: %s", diff)
	}
	for _, bad := range []string{"0", "40", "x"} {
		if bad == "0" {
			continue // 0 is the default: the first bad record
		}
		if _, code := run(Repair, "--wal", dir, "--at", bad, "--yes"); code != 2 {
			t.Errorf("repair --at %s: exit %d, want 2", bad, code)
		}
	}
	if diff := sameTree(before, tree(t, dir)); diff != "" {
		t.Fatalf("a refused --at changed the journal: %s", diff)
	}
	out, code = run(Repair, "--wal", dir, "--at", "33", "--yes")
	if code != 0 {
		t.Fatalf("repair --at 33 --yes: exit %d\n%s", code, out)
	}
	contains(t, "repair --at --yes", out, "CUT: the journal now ends at record seq 32", "OK:")
	if out, code := run(Verify, "--wal", dir); code != 0 {
		t.Fatalf("verify after the cut: exit %d\n%s", code, out)
	}
}
