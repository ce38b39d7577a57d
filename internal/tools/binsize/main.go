// Command binsize tells where the bytes of a Go binary go: it reads the
// symbols of an unstripped ELF build (the same as `go tool nm -size`) and
// sums their sizes by module and by package, counting only what the file
// holds (.text, .rodata, .data and the like; not .bss).
//
// The function table (.gopclntab with its go:func.* data, a third of the
// file) has no symbols per function; it grows with the number and
// size of functions, so binsize shares it out in proportion to each
// package's code and says so. Type descriptors and string data have no
// symbols in the table either: they are reported as one unattributed sum.
//
//	go run ./internal/tools/binsize [-top N] [-modules-only] BINARY
//
// `make size` runs it on an unstripped twin of each release binary.
package main

import (
	"cmp"
	"debug/buildinfo"
	"debug/elf"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

func main() {
	top := flag.Int("top", 15, "rows per table")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: binsize [-top N] UNSTRIPPED-BINARY")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(os.Stdout, flag.Arg(0), *top); err != nil {
		fmt.Fprintln(os.Stderr, "binsize:", err)
		os.Exit(1)
	}
}

// sizes are the bytes of one module or package.
type sizes struct {
	name       string
	text, data uint64 // code; everything else the file holds (rodata, data, types)
	pcln       uint64 // its estimated share of .gopclntab
}

func (s sizes) total() uint64 { return s.text + s.data + s.pcln }

func run(w io.Writer, path string, top int) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return fmt.Errorf("%s: %w (binsize needs an unstripped build)", path, err)
	}
	var modules []string
	if bi, err := buildinfo.ReadFile(path); err == nil {
		modules = append(modules, bi.Main.Path)
		for _, d := range bi.Deps {
			modules = append(modules, d.Path)
		}
	}
	mainModule := ""
	if len(modules) > 0 {
		mainModule = modules[0]
	}

	byPkg := map[string]*sizes{}
	var textTotal, pclnTotal, attributed, loaded uint64
	for _, s := range f.Sections {
		if s.Name == ".gopclntab" {
			pclnTotal = s.Size
		}
		if s.Type == elf.SHT_PROGBITS && s.Flags&elf.SHF_ALLOC != 0 {
			loaded += s.Size
		}
	}
	for _, sym := range syms {
		if sym.Size == 0 || int(sym.Section) >= len(f.Sections) || sym.Section == elf.SHN_UNDEF {
			continue
		}
		sec := f.Sections[sym.Section]
		if sec.Type != elf.SHT_PROGBITS || sec.Flags&elf.SHF_ALLOC == 0 || sec.Name == ".gopclntab" {
			continue // .bss takes no room in the file; the table is shared out below
		}
		pkg := symbolPackage(sym.Name, modules)
		if pkg == "main" {
			pkg = mainModule + " (main)"
		}
		p := byPkg[pkg]
		if p == nil {
			p = &sizes{name: pkg}
			byPkg[pkg] = p
		}
		if sec.Flags&elf.SHF_EXECINSTR != 0 {
			p.text += sym.Size
			textTotal += sym.Size
		} else {
			p.data += sym.Size
		}
		attributed += sym.Size
	}
	byMod := map[string]*sizes{}
	for _, p := range byPkg {
		if textTotal > 0 {
			p.pcln = pclnTotal * p.text / textTotal
		}
		mod := packageModule(p.name, modules)
		m := byMod[mod]
		if m == nil {
			m = &sizes{name: mod}
			byMod[mod] = m
		}
		m.text += p.text
		m.data += p.data
		m.pcln += p.pcln
	}

	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: %s unstripped, %s loaded: %s in symbols, %s function tables (shared out by code size), %s without symbols (types, strings)\n",
		path, mib(uint64(st.Size())), mib(loaded), mib(attributed), mib(pclnTotal), mib(loaded-attributed-pclnTotal))
	table(w, "module", byMod, top)
	table(w, "package", byPkg, top)
	return nil
}

func table(w io.Writer, what string, m map[string]*sizes, top int) {
	rows := make([]*sizes, 0, len(m))
	for _, s := range m {
		rows = append(rows, s)
	}
	slices.SortFunc(rows, func(a, b *sizes) int {
		return cmp.Or(cmp.Compare(b.total(), a.total()), strings.Compare(a.name, b.name))
	})
	fmt.Fprintf(w, "\n%10s %10s %10s %10s  %s (top %d of %d)\n", "total", "text", "data", "pclntab", what, min(top, len(rows)), len(rows))
	for _, r := range rows[:min(top, len(rows))] {
		fmt.Fprintf(w, "%10s %10s %10s %10s  %s\n", mib(r.total()), mib(r.text), mib(r.data), mib(r.pcln), r.name)
	}
}

func mib(n uint64) string { return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20)) }

// symbolPackage returns the import path of the package a symbol belongs
// to: "net/http" for "net/http.(*Server).Serve", the type's package for a
// type descriptor or an itab, and a name in parentheses for the linker's
// own tables.
func symbolPackage(name string, modules []string) string {
	// The linker escapes dots in a path's last element (paho%2emqtt%2egolang).
	name = strings.ReplaceAll(name, "%2e", ".")
	for _, p := range []string{"type:", "go:itab.", "go:info.", "go:string.", "go:link.", ".eq.", ".dict."} {
		name = strings.TrimPrefix(name, p)
	}
	name = strings.TrimLeft(name, "*")
	switch {
	case strings.HasPrefix(name, "go:"), strings.HasPrefix(name, "runtime.") && strings.Contains(name, "tab"):
		if strings.HasPrefix(name, "runtime.") {
			return "runtime"
		}
		return "(linker tables)"
	case strings.HasPrefix(name, "func("), strings.HasPrefix(name, "struct {"), strings.HasPrefix(name, "map["),
		strings.HasPrefix(name, "[]"), strings.HasPrefix(name, "["), strings.HasPrefix(name, "chan "),
		strings.HasPrefix(name, "interface {"), strings.HasPrefix(name, "noalg."):
		return "(unnamed types)"
	}
	if i := strings.IndexAny(name, "[(,"); i >= 0 {
		name = name[:i]
	}
	// The module's own path may hold dots (gopkg.in/yaml.v3): start after it.
	start := 0
	for _, m := range modules {
		if len(m) > start && strings.HasPrefix(name, m) && len(name) > len(m) && (name[len(m)] == '/' || name[len(m)] == '.') {
			start = len(m)
		}
	}
	if i := strings.LastIndexByte(name[start:], '/'); i >= 0 {
		start += i
	}
	if i := strings.IndexByte(name[start:], '.'); i >= 0 {
		return name[:start+i]
	}
	return name
}

// packageModule returns the module a package is in: the longest listed
// module path it starts with, "std" for the standard library (its vendored
// golang.org/x copies included), or the package's name in parentheses.
func packageModule(pkg string, modules []string) string {
	best := ""
	for _, m := range modules {
		if len(m) > len(best) && (pkg == m || strings.HasPrefix(pkg, m+"/") || strings.HasPrefix(pkg, m+" ")) {
			best = m
		}
	}
	switch {
	case best != "":
		return best
	case strings.HasPrefix(pkg, "("):
		return pkg
	case !strings.Contains(strings.SplitN(pkg, "/", 2)[0], "."):
		return "std"
	}
	return pkg
}
