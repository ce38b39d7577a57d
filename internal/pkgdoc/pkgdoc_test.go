package pkgdoc

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryPackageHasADocComment walks the module from its root and fails
// for any package (test files aside) with no package doc comment.
func TestEveryPackageHasADocComment(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found: %v", err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
			return filepath.SkipDir
		}
		entries, err := os.ReadDir(path)
		if err != nil {
			return err
		}
		documented := map[string]bool{} // package name → has a doc comment
		for _, e := range entries {
			n := e.Name()
			if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(path, n), nil, parser.ParseComments|parser.PackageClauseOnly)
			if err != nil {
				return err
			}
			documented[f.Name.Name] = documented[f.Name.Name] || (f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != "")
		}
		for name, ok := range documented {
			checked++
			if !ok {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("package %s (%s) has no package doc comment", name, rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 8 {
		t.Fatalf("only %d packages found: the walk is broken", checked)
	}
}
