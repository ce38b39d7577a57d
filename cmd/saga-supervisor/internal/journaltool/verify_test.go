package journaltool

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/recovery"
	"github.com/saga-supervisor/saga-supervisor/rollback"
)

// Every command that reads a journal fails (exit 2) on a path that holds
// none, and creates nothing: a mistyped path read as an empty, intact
// journal (verify said OK, certify PASS, graph drew nothing).
func TestToolsRefuseWhereNoJournalIs(t *testing.T) {
	base := t.TempDir()
	empty := filepath.Join(base, "empty")
	os.Mkdir(empty, 0o700)
	notes := filepath.Join(base, "notes")
	os.Mkdir(notes, 0o700)
	os.WriteFile(filepath.Join(notes, "README"), []byte("not a journal"), 0o600)
	file := filepath.Join(base, "file")
	os.WriteFile(file, []byte("not a directory"), 0o600)
	world := filepath.Join(base, "world")
	commands := []struct {
		name string
		run  func(dir string) (string, int)
	}{
		{"verify", func(dir string) (string, int) { return run(Verify, "--wal", dir) }},
		{"certify", func(dir string) (string, int) { return run(Certify, "--wal", dir) }},
		{"graph", func(dir string) (string, int) { return run(Graph, "--wal", dir) }},
		{"repair", func(dir string) (string, int) { return run(Repair, "--wal", dir) }},
		{"repair --yes", func(dir string) (string, int) { return run(Repair, "--wal", dir, "--yes") }},
		{"recover", func(dir string) (string, int) { return run(Recover, "--wal", dir, "--world", world) }},
	}
	for _, c := range commands {
		for _, d := range []struct{ name, dir string }{
			{"no such directory", filepath.Join(base, "typo")},
			{"an empty directory", empty},
			{"a directory without segments", notes},
			{"a file", file},
		} {
			t.Run(c.name+"/"+d.name, func(t *testing.T) {
				before := tree(t, base)
				out, code := c.run(d.dir)
				if code != 2 {
					t.Fatalf("%s --wal %s: exit %d, want 2:\n%s", c.name, d.dir, code, out)
				}
				if diff := sameTree(before, tree(t, base)); diff != "" {
					t.Errorf("%s: %s", c.name, diff)
				}
			})
		}
	}
	// Every segment deleted, the anchor left: a journal that lost its
	// records, not "no journal here".
	lost := filepath.Join(base, "lost")
	writeJournal(t, lost, committed(1, 2)...)
	segs, _ := filepath.Glob(filepath.Join(lost, "*.wal"))
	for _, s := range segs {
		os.Remove(s)
	}
	if out, code := run(Verify, "--wal", lost); code != 1 {
		t.Errorf("verify on a journal whose every segment is gone: exit %d, want 1 (LOST):\n%s", code, out)
	}
}

// Records with an intact chain that the engine never writes where they
// stand. verify and certify refuse exactly what the daemon's start
// (recovery.Open, rebuilding the engine) refuses, at the same record, and
// pass what it starts on. (Checking only the chain and that each payload
// decodes would pass a clean END with no ABORT.)
func TestToolsRefuseWhatTheDaemonRefuses(t *testing.T) {
	begin := committed(1, 1)[0]
	beginOf := func(saga uint64) rollback.Record { r := begin; r.Saga = saga; return r }
	cases := []struct {
		name    string
		recs    []rollback.Record
		refused uint64 // 0: the daemon starts on it
	}{
		{"committed sagas", committed(1, 3), 0},
		{"a clean END with no ABORT", append(committed(1, 2), beginOf(3), rollback.Record{Type: rollback.RecEnd, Saga: 3, Code: "clean"}), 10},
		{"a COMMIT after ABORT", append(committed(1, 1), beginOf(2), rollback.Record{Type: rollback.RecAbort, Saga: 2, Message: "x"},
			rollback.Record{Type: rollback.RecCommit, Saga: 2}), 7},
		{"a second BEGIN of an open saga", []rollback.Record{begin, begin}, 2},
		{"a payload that is not an engine record", append(committed(1, 1), rollback.Record{Type: 99}), 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "journal")
			writeJournal(t, dir, tc.recs...)
			vout, vcode := run(Verify, "--wal", dir)
			cout, ccode := run(Certify, "--wal", dir)
			gout, gcode := run(Graph, "--wal", dir)
			reg, _ := actuators.NewRegistry()
			res, derr := recovery.Open(recovery.Options{Dir: dir, Engine: rollback.Config{Actuators: reg}})
			if derr == nil {
				res.Close()
			}
			if tc.refused == 0 {
				if vcode != 0 || ccode != 0 || gcode != 0 || derr != nil {
					t.Fatalf("verify exit %d, certify exit %d, graph exit %d, the daemon's start: %v\n%s\n%s\n%s", vcode, ccode, gcode, derr, vout, cout, gout)
				}
				return
			}
			at := fmt.Sprintf("record seq %d ", tc.refused)
			if gcode != 1 {
				t.Errorf("graph: exit %d, want 1 (drawn up to the refused record)", gcode)
			}
			contains(t, "graph", gout, "drawn up to there only", at)
			if vcode != 1 {
				t.Errorf("verify: exit %d, want 1", vcode)
			}
			contains(t, "verify", vout, "BROKEN", at)
			if ccode != 1 {
				t.Errorf("certify: exit %d, want 1", ccode)
			}
			contains(t, "certify", cout, "FAIL: the daemon refuses this journal: "+at)
			if derr == nil {
				t.Fatal("the daemon started on a journal verify refuses")
			}
			if !regexp.MustCompile(fmt.Sprintf(`record %d[ :]`, tc.refused)).MatchString(derr.Error()) {
				t.Errorf("the daemon refused %v; verify refused record %d", derr, tc.refused)
			}
		})
	}
}
