package longtest

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// moduleRoot is the directory of go.mod above this package.
func moduleRoot(t *testing.T) string {
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test")
		}
		dir = up
	}
}

// longTests reads LONG_TESTS from the Makefile (continued lines included).
func longTests(t *testing.T, root string) []string {
	f, err := os.Open(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !in {
			v, ok := strings.CutPrefix(line, "LONG_TESTS")
			if !ok {
				continue
			}
			_, line, ok = strings.Cut(v, "=")
			if !ok {
				continue
			}
			in = true
		}
		more := strings.HasSuffix(line, "\\")
		names = append(names, strings.Fields(strings.TrimSuffix(line, "\\"))...)
		if !more {
			break
		}
	}
	if len(names) == 0 {
		t.Fatal("the Makefile has no LONG_TESTS")
	}
	return names
}

// markedTests finds every Test function that runs short or skips under
// -short: it calls testing.Short, longtest.Short or longtest.Skip.
func markedTests(t *testing.T, root string) (marked map[string]string, all map[string]bool) {
	marked, all = map[string]string{}, map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Body == nil {
				continue
			}
			all[fn.Name.Name] = true
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); ok {
					switch x.Name + "." + sel.Sel.Name {
					case "testing.Short", "longtest.Short", "longtest.Skip":
						rel, _ := filepath.Rel(root, path)
						marked[fn.Name.Name] = rel
					}
				}
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return marked, all
}

// TestLongTestsAreListed: every test that runs short under `make test` is
// run in full by `make test-long` (whose -run pattern is LONG_TESTS), and
// every name listed there is a test that exists.
func TestLongTestsAreListed(t *testing.T) {
	root := moduleRoot(t)
	listed := longTests(t, root)
	marked, all := markedTests(t, root)
	if len(marked) == 0 {
		t.Fatal("no test calls testing.Short or longtest: the walk found nothing")
	}
	for name, file := range marked {
		if !slices.Contains(listed, name) {
			t.Errorf("%s (%s) runs short under -short but is not in the Makefile's LONG_TESTS: `make test-long` would never run it in full", name, file)
		}
	}
	for _, name := range listed {
		if !all[name] {
			t.Errorf("LONG_TESTS names %s, which is no test", name)
		}
	}
}
