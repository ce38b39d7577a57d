package journaltool

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/internal/cli"
)

// recover on a path that holds no journal fails (exit 2) and creates
// nothing. A mistyped --wal made a new, empty journal and a new world,
// and exited 0: "no saga was left open" (issue 14).
func TestRecoverRefusesWhereNoJournalIs(t *testing.T) {
	base := t.TempDir()
	empty := filepath.Join(base, "empty")
	os.Mkdir(empty, 0o700)
	notes := filepath.Join(base, "notes")
	os.Mkdir(notes, 0o700)
	os.WriteFile(filepath.Join(notes, "README"), []byte("not a journal"), 0o600)
	world := filepath.Join(base, "world")
	for _, tt := range []struct{ name, dir string }{
		{"no such directory", filepath.Join(base, "typo")},
		{"an empty directory", empty},
		{"a directory without segments", notes},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := listTree(t, base)
			err := Recover([]string{"--wal", tt.dir, "--world", world}, io.Discard)
			if cli.Status(err) != 2 {
				t.Fatalf("recover --wal %s: exit %d (%v), want 2", tt.dir, cli.Status(err), err)
			}
			if after := listTree(t, base); after != before {
				t.Errorf("recover created files:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

func listTree(t *testing.T, root string) string {
	t.Helper()
	var s string
	filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		s += p + " "
		return nil
	})
	return s
}
