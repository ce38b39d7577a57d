package layers

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/saga-supervisor/saga-supervisor"

// rule forbids the non-test files of a package tree to import a package
// tree: a path ending in "/..." covers the tree, anything else one package.
type rule struct {
	from, why string
	forbid    []string
}

var rules = []rule{
	{from: "supervisor/...", why: "the supervisor speaks only api/: a transport is attached, never linked in",
		forbid: []string{"transport/...", "github.com/eclipse/paho.mqtt.golang/...", "github.com/mochi-mqtt/..."}},
	{from: "transport/...", why: "a transport connects, decodes, routes and publishes; it decides nothing",
		forbid: []string{"rollback/...", "recovery/...", "wal/...", "supervisor/...", "limits/..."}},
	{from: "api/...", why: "the controller API is transport-neutral",
		forbid: []string{"transport/...", "supervisor/...", "drivers/...", "github.com/eclipse/paho.mqtt.golang/...", "github.com/mochi-mqtt/..."}},
	{from: "drivers/mqtt", why: "drivers/mqtt keeps only the MQTT-attached actuator",
		forbid: []string{"api/...", "transport/...", "supervisor/...", "rollback/..."}},
	{from: "rollback/...", why: "imports run downward only",
		forbid: []string{"supervisor/...", "api/...", "transport/...", "recovery/..."}},
	{from: "recovery/...", why: "imports run downward only",
		forbid: []string{"supervisor/...", "api/...", "transport/..."}},
	{from: "wal/...", why: "the journal stores opaque records",
		forbid: []string{"rollback/...", "supervisor/...", "api/...", "transport/...", "actuators/...", "limits/..."}},
	{from: "approval/...", why: "approvals are signed by controllers in Go too: the package links nothing of the supervisor",
		forbid: []string{"api/...", "supervisor/...", "transport/...", "rollback/...", "recovery/...", "wal/...", "limits/...",
			"actuators/...", "drivers/...", "client/...", "internal/..."}},
	{from: "limits/...", why: "limits does no I/O and knows nothing above it",
		forbid: []string{"rollback/...", "supervisor/...", "api/...", "transport/...", "wal/...", "actuators/...", "drivers/...",
			"std:os/...", "std:net/...", "std:io/...", "std:syscall", "std:log/...", "std:sync/..."}},
	{from: "daemon/...", why: "the daemon assembles the layers below; only the CLI and the tests' harness start it",
		forbid: []string{"client/..."}},
	{from: "supervisor/...", why: "the daemon is above the supervisor",
		forbid: []string{"daemon/..."}},
	{from: "drivers/...", why: "a driver sets and reads outputs: it knows nothing of sagas, leases, the journal or the API",
		forbid: []string{"rollback/...", "recovery/...", "wal/...", "limits/...", "supervisor/...", "api/...", "transport/...", "client/..."}},
	{from: "actuators/...", why: "the driver interface sits under the engine, not beside it",
		forbid: []string{"rollback/...", "recovery/...", "wal/...", "supervisor/...", "api/...", "transport/...", "drivers/..."}},
	{from: "supervisor/config", why: "the configuration is data: each driver kind's section is registered, and its driver opened, by supervisor/wiring",
		forbid: []string{"drivers/...", "periph.io/...", "go.bug.st/...", "supervisor/wiring"}},
	{from: "supervisor", why: "hardware is opened by supervisor/wiring only, so a lean build (-tags saga_lean) leaves it out",
		forbid: []string{"drivers/gpio", "drivers/serial", "drivers/ina2xx", "drivers/pca9685", "periph.io/...", "go.bug.st/..."}},
	{from: "supervisor/wiring", why: "wiring opens drivers from a config; the supervisor that uses them is above it",
		forbid: []string{"supervisor", "daemon/...", "rollback/...", "recovery/...", "wal/...", "api/...", "transport/..."}},
	{from: "wal/...", why: "the journal is pure storage: no clock of the engine, no network",
		forbid: []string{"std:net/...", "drivers/...", "recovery/..."}},
}

func init() {
	// The daemon and the parts only it uses (daemon/fleet,
	// daemon/homeassistant, daemon/brokerauth) sit above the library.
	for _, lib := range []string{"supervisor/...", "rollback/...", "drivers/...", "transport/...", "recovery/...",
		"wal/...", "api/...", "client/...", "actuators/...", "limits/...", "approval/..."} {
		rules = append(rules, rule{from: lib, why: "only the daemon and the commands link the daemon", forbid: []string{"daemon/..."}})
	}
	// The binary's size budget (make size, docs/DESIGN.md "Memory"): the
	// template packages call methods by name, after which the linker keeps
	// every exported method of every type it links (2.2 MB on arm64), and
	// client_golang links protobuf (2.1 MB); internal/promtext serves
	// /metrics. Test files, and promtexttest which only they import, may.
	for _, from := range []string{"supervisor/...", "rollback/...", "drivers/...", "transport/...", "daemon/...", "recovery/...",
		"wal/...", "api/...", "client/...", "actuators/...", "limits/...", "approval/...", "internal/promtext", "cmd/..."} {
		rules = append(rules, rule{from: from, why: "the binary's size budget: no templates, no client_golang or protobuf",
			forbid: []string{"std:text/template/...", "std:html/template", "github.com/prometheus/...", "google.golang.org/protobuf/..."}})
	}
}

// match reports whether import path path matches pattern: a path of this
// module ("rollback/..."), another module's ("github.com/x/..."), or the
// standard library's ("std:os/...", "std:syscall").
func match(pattern, path string) bool {
	if std, ok := strings.CutPrefix(pattern, "std:"); ok {
		if strings.Contains(strings.SplitN(path, "/", 2)[0], ".") {
			return false // not the standard library
		}
		if tree, ok := strings.CutSuffix(std, "/..."); ok {
			return path == tree || strings.HasPrefix(path, tree+"/")
		}
		return path == std
	}
	if !strings.Contains(pattern, ".") || !strings.Contains(strings.SplitN(pattern, "/", 2)[0], ".") {
		pattern = module + "/" + pattern
	}
	if tree, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == tree || strings.HasPrefix(path, tree+"/")
	}
	return path == pattern
}

// imports maps each package of the module (by import path) to what its
// non-test files import.
func imports(t *testing.T, root string) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != root && (strings.HasPrefix(n, ".") || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		pkg := module
		if rel != "." {
			pkg += "/" + filepath.ToSlash(rel)
		}
		if out[pkg] == nil {
			out[pkg] = map[string]bool{}
		}
		for _, im := range f.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			out[pkg][path] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestImportRules(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not at %s: %v", root, err)
	}
	pkgs := imports(t, root)
	for _, r := range rules {
		seen := false
		for pkg, ims := range pkgs {
			if !match(r.from, pkg) {
				continue
			}
			seen = true
			for im := range ims {
				for _, f := range r.forbid {
					if match(f, im) {
						t.Errorf("%s imports %s: %s", strings.TrimPrefix(pkg, module+"/"), im, r.why)
					}
				}
			}
		}
		if !seen {
			t.Errorf("rule for %s matches no package: the layout changed, update the rule", r.from)
		}
	}
}

// TestRulesCatchAViolation keeps the matcher honest: a rule that matched
// nothing would pass every tree.
func TestRulesCatchAViolation(t *testing.T) {
	if !match("transport/...", module+"/transport/mqtt") || !match("transport/...", module+"/transport") ||
		match("transport/...", module+"/transporter") || !match("github.com/mochi-mqtt/...", "github.com/mochi-mqtt/server/v2") ||
		!match("drivers/mqtt", module+"/drivers/mqtt") || match("drivers/mqtt", module+"/drivers/mqtt/x") ||
		!match("std:os/...", "os") || !match("std:os/...", "os/exec") || match("std:os/...", "osx") ||
		match("std:net/...", "golang.org/x/net/http2") || !match("std:syscall", "syscall") {
		t.Fatal("pattern matching is wrong")
	}
}

// TestInternalIsShared keeps internal/ for what many layers share: a
// package there that only the commands or the daemon import (tests
// included, directly or through other such packages) belongs beside them,
// under cmd/…/internal or daemon/, where the compiler keeps the library
// out of it. Test-only packages (a doc.go and tests) and main
// packages are not imported by anything and are not counted.
func TestInternalIsShared(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	importers := map[string]map[string]bool{} // package → packages whose files (tests too) import it
	libraryOnly := map[string]bool{}          // packages under internal/ with code a library could use
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != root && (strings.HasPrefix(n, ".") || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		rel = filepath.ToSlash(rel)
		if strings.HasPrefix(rel, "internal/") && !strings.HasSuffix(p, "_test.go") &&
			filepath.Base(p) != "doc.go" && f.Name.Name != "main" {
			libraryOnly[rel] = true
		}
		for _, im := range f.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			if dep, ok := strings.CutPrefix(path, module+"/"); ok {
				if importers[dep] == nil {
					importers[dep] = map[string]bool{}
				}
				importers[dep][rel] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(libraryOnly) == 0 {
		t.Fatal("no package found under internal/: the walk is wrong")
	}
	// A package is shared when a library package imports it, or a shared
	// package of internal/ does: the commands and the daemon do not count.
	shared := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for pkg := range libraryOnly {
			if shared[pkg] {
				continue
			}
			for from := range importers[pkg] {
				if from == pkg || strings.HasPrefix(from, pkg+"/") || strings.HasPrefix(from, "cmd/") ||
					from == "daemon" || strings.HasPrefix(from, "daemon/") {
					continue
				}
				if !strings.HasPrefix(from, "internal/") || shared[from] {
					shared[pkg], changed = true, true
					break
				}
			}
		}
	}
	for pkg := range libraryOnly {
		if !shared[pkg] {
			t.Errorf("%s is imported only by the commands or the daemon: move it beside them (cmd/…/internal or daemon/)", pkg)
		}
	}
}
