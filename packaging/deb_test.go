package packaging

import (
	"bufio"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
)

// root is the module's root: the Makefile and the files the packages ship.
const root = ".."

// needTool finds a program the tests use (package testtool).
func needTool(t *testing.T, name, pkg string) string { return testtool.Need(t, pkg, name) }

// cmd runs a program and returns its standard output, failing the test
// with its standard error if it fails.
func cmd(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	c := exec.Command(name, args...)
	c.Dir = dir
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// makeVar is a variable as the Makefile computes it (its print-% target).
func makeVar(t *testing.T, name string) string {
	t.Helper()
	return strings.TrimSpace(cmd(t, root, "make", "-s", "--no-print-directory", "print-"+name))
}

// arches are the packages `make deb` builds: Debian architecture → what
// the binary inside must be.
var arches = map[string]struct {
	machine elf.Machine
	class   elf.Class
	goarch  string
	goarm   string
}{
	"amd64": {elf.EM_X86_64, elf.ELFCLASS64, "amd64", ""},
	"arm64": {elf.EM_AARCH64, elf.ELFCLASS64, "arm64", ""},
	"armhf": {elf.EM_ARM, elf.ELFCLASS32, "arm", "7"},
}

var (
	buildOnce sync.Once
	builtDir  string
	buildErr  error
	buildLog  []byte
)

// debs builds the packages once per test binary, with `make deb` into a
// directory of their own, and returns each one's path by architecture.
func debs(t *testing.T) map[string]string {
	t.Helper()
	needTool(t, "make", "make")
	needTool(t, "git", "git")
	needTool(t, "dpkg-deb", "dpkg")
	buildOnce.Do(func() {
		builtDir, buildErr = os.MkdirTemp("", "saga-deb-")
		if buildErr != nil {
			return
		}
		start := time.Now()
		c := exec.Command("make", "--no-print-directory", "deb", "DIST="+builtDir)
		c.Dir = root
		buildLog, buildErr = c.CombinedOutput()
		buildLog = fmt.Appendf(buildLog, "(make deb took %v)\n", time.Since(start).Round(time.Second))
	})
	if buildErr != nil {
		t.Fatalf("make deb: %v\n%s", buildErr, buildLog)
	}
	version := makeVar(t, "DEB_VERSION")
	out := map[string]string{}
	for arch := range arches {
		p := filepath.Join(builtDir, fmt.Sprintf("saga-supervisor_%s_%s.deb", version, arch))
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("make deb made no %s package: %v\n%s", arch, err, buildLog)
		}
		out[arch] = p
	}
	return out
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
	os.Exit(code)
}

// entry is one line of `dpkg-deb --contents`.
type entry struct{ mode, owner string }

func contents(t *testing.T, deb string) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	sc := bufio.NewScanner(strings.NewReader(cmd(t, "", "dpkg-deb", "--contents", deb)))
	for sc.Scan() {
		// -rw-r----- root/saga     19844 2026-12-03 19:32 ./etc/saga-supervisor/config.yaml
		f := strings.Fields(sc.Text())
		if len(f) < 6 {
			t.Fatalf("dpkg-deb --contents: odd line %q", sc.Text())
		}
		out[strings.TrimSuffix(strings.TrimPrefix(f[5], "."), "/")] = entry{f[0], f[1]}
	}
	return out
}

// shipped is every file the package holds: its mode and owner, and the
// file of the source tree it must be a copy of ("" where it is built).
var shipped = map[string]struct {
	entry
	src string
}{
	"/usr/bin/saga-supervisor":                                  {entry{"-rwxr-xr-x", "root/root"}, ""},
	"/usr/lib/systemd/system/saga-supervisor.service":           {entry{"-rw-r--r--", "root/root"}, ""},
	"/usr/lib/udev/rules.d/99-saga-supervisor.rules":            {entry{"-rw-r--r--", "root/root"}, "configs/99-saga-supervisor.rules"},
	"/usr/lib/sysusers.d/saga-supervisor.conf":                  {entry{"-rw-r--r--", "root/root"}, "packaging/sysusers.conf"},
	"/usr/lib/tmpfiles.d/saga-supervisor.conf":                  {entry{"-rw-r--r--", "root/root"}, "packaging/tmpfiles.conf"},
	"/etc/saga-supervisor/config.yaml":                          {entry{"-rw-r-----", "root/saga"}, ""}, // installedConfig
	"/usr/share/doc/saga-supervisor/examples/raspberry-pi.yaml": {entry{"-rw-r--r--", "root/root"}, "configs/raspberry-pi.yaml"},
	"/usr/share/lintian/overrides/saga-supervisor":              {entry{"-rw-r--r--", "root/root"}, "packaging/lintian-overrides"},
}

// Each package says its architecture and version, holds exactly the
// files it should with their modes and owners, marks the config a
// conffile, carries maintainer scripts a shell can parse, and holds a
// static binary for its architecture built with the Makefile's flags.
func TestDebPackages(t *testing.T) {
	all := debs(t)
	version := makeVar(t, "DEB_VERSION")
	gitVersion, gitCommit := makeVar(t, "VERSION"), makeVar(t, "COMMIT")
	for arch, want := range arches {
		t.Run(arch, func(t *testing.T) {
			deb := all[arch]
			field := func(name string) string {
				return strings.TrimSpace(cmd(t, "", "dpkg-deb", "--field", deb, name))
			}
			for name, w := range map[string]string{"Package": "saga-supervisor", "Architecture": arch, "Version": version} {
				if got := field(name); got != w {
					t.Errorf("%s: %q, want %q", name, got, w)
				}
			}
			if d := field("Depends"); !strings.Contains(d, "adduser") {
				t.Errorf("Depends %q lacks adduser (the postinst's fallback)", d)
			}

			files := contents(t, deb)
			for path, w := range shipped {
				if got, ok := files[path]; !ok {
					t.Errorf("no %s in the package", path)
				} else if got != w.entry {
					t.Errorf("%s: %s %s, want %s %s", path, got.mode, got.owner, w.mode, w.owner)
				}
			}
			for path, e := range files {
				if _, ok := shipped[path]; !ok && !strings.HasPrefix(e.mode, "d") {
					t.Errorf("unexpected file %s (%s %s)", path, e.mode, e.owner)
				}
				if strings.HasPrefix(e.mode, "d") && e.owner != "root/root" {
					t.Errorf("directory %s owned by %s", path, e.owner)
				}
			}

			tmp := t.TempDir()
			ctrl, tree := filepath.Join(tmp, "DEBIAN"), filepath.Join(tmp, "root")
			cmd(t, "", "dpkg-deb", "--control", deb, ctrl)
			cmd(t, "", "dpkg-deb", "--extract", deb, tree)
			conffiles, err := os.ReadFile(filepath.Join(ctrl, "conffiles"))
			if err != nil || strings.TrimSpace(string(conffiles)) != "/etc/saga-supervisor/config.yaml" {
				t.Errorf("conffiles: %q (%v), want the config alone", conffiles, err)
			}
			for _, s := range []string{"postinst", "prerm", "postrm"} {
				p := filepath.Join(ctrl, s)
				fi, err := os.Stat(p)
				if err != nil || fi.Mode().Perm() != 0o755 {
					t.Errorf("maintainer script %s: %v %v", s, fi, err)
					continue
				}
				sameFile(t, p, filepath.Join(root, "packaging", "scripts", s))
				cmd(t, "", "sh", "-n", p)
			}
			for path, w := range shipped {
				if w.src != "" {
					sameFile(t, filepath.Join(tree, path), filepath.Join(root, w.src))
				}
			}
			installedConfig(t, filepath.Join(tree, "etc/saga-supervisor/config.yaml"))
			unit, err := os.ReadFile(filepath.Join(tree, "usr/lib/systemd/system/saga-supervisor.service"))
			if err != nil {
				t.Fatal(err)
			}
			if !regexp.MustCompile(`(?m)^ExecStart=/usr/bin/saga-supervisor run `).Match(unit) || bytes.Contains(unit, []byte("/usr/local")) {
				t.Errorf("the packaged unit does not start /usr/bin/saga-supervisor:\n%s", unit)
			}

			bin := filepath.Join(tree, "usr/bin/saga-supervisor")
			f, err := elf.Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Machine != want.machine || f.Class != want.class {
				t.Errorf("binary is %v %v, want %v %v", f.Class, f.Machine, want.class, want.machine)
			}
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP {
					t.Error("binary is dynamically linked (CGO_ENABLED=0 lost)")
				}
			}
			bi, err := buildinfo.ReadFile(bin)
			if err != nil {
				t.Fatal(err)
			}
			settings := map[string]string{}
			for _, s := range bi.Settings {
				settings[s.Key] = s.Value
			}
			for k, w := range map[string]string{"GOOS": "linux", "GOARCH": want.goarch, "GOARM": want.goarm, "CGO_ENABLED": "0", "-trimpath": "true"} {
				if settings[k] != w {
					t.Errorf("built with %s=%q, want %q", k, settings[k], w)
				}
			}
			// -trimpath keeps -ldflags out of the build info: look for
			// what -X set in the binary's data instead.
			b, err := os.ReadFile(bin)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range []string{gitVersion, gitCommit} {
				if !bytes.Contains(b, []byte(x)) {
					t.Errorf("the binary does not hold %q (-ldflags -X lost)", x)
				}
			}
		})
	}
}

// installedConfig checks the config an install writes: configs/default.yaml
// with its state_dir set to the unit's state directory — where tmpfiles.d
// makes it and where the unit's StateDirectory= and WorkingDirectory= put
// the daemon — so that `ctl --config` and the other tools given the file
// find the daemon's files from any directory.
func installedConfig(t *testing.T, path string) {
	t.Helper()
	unit, err := os.ReadFile(filepath.Join(root, "configs/saga-supervisor.service"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^StateDirectory=(\S+)$`).FindSubmatch(unit)
	if m == nil {
		t.Fatal("the unit has no StateDirectory=")
	}
	state := "/var/lib/" + string(m[1])
	for _, want := range []string{"\nWorkingDirectory=" + state + "\n"} {
		if !bytes.Contains(unit, []byte(want)) {
			t.Errorf("the unit lacks %q", strings.TrimSpace(want))
		}
	}
	tmpfiles, err := os.ReadFile(filepath.Join(root, "packaging/tmpfiles.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^d\s+` + regexp.QuoteMeta(state) + `\s+0700\s`).Match(tmpfiles) {
		t.Errorf("packaging/tmpfiles.conf does not make %s, mode 0700", state)
	}
	def, err := os.ReadFile(filepath.Join(root, "configs/default.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Replace(def, []byte("\nstate_dir: .\n"), []byte("\nstate_dir: "+state+"\n"), 1)
	if bytes.Equal(want, def) {
		t.Fatal("configs/default.yaml has no line `state_dir: .` for the install to set")
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not configs/default.yaml with state_dir: %s", path, state)
	}
}

func sameFile(t *testing.T, got, want string) {
	t.Helper()
	g, err := os.ReadFile(got)
	if err != nil {
		t.Error(err)
		return
	}
	w, err := os.ReadFile(want)
	if err != nil {
		t.Error(err)
		return
	}
	if !bytes.Equal(g, w) {
		t.Errorf("%s differs from %s", got, want)
	}
}

// The binary of this machine's architecture, taken out of its package,
// runs and reports what git says of the tree it was built from; its unit
// passes systemd-analyze pointed at it.
func TestDebBinaryReportsGit(t *testing.T) {
	all := debs(t)
	arch := runtime.GOARCH
	deb, ok := all[arch]
	if !ok {
		if os.Getenv("CI") != "" {
			t.Fatalf("no package for this machine (%s) to run", arch)
		}
		t.Skipf("no package for this machine (%s) to run", arch)
	}
	tree := t.TempDir()
	cmd(t, "", "dpkg-deb", "--extract", deb, tree)
	bin := filepath.Join(tree, "usr/bin/saga-supervisor")

	var got struct{ Version, Commit, Date, Go string }
	if err := json.Unmarshal([]byte(cmd(t, "", bin, "version", "--json")), &got); err != nil {
		t.Fatal(err)
	}
	want := strings.TrimSpace(cmd(t, root, "git", "describe", "--tags", "--always", "--dirty"))
	if got.Version != want {
		t.Errorf("version %q, git describe says %q", got.Version, want)
	}
	if want := strings.TrimSpace(cmd(t, root, "git", "rev-parse", "HEAD")); got.Commit != want {
		t.Errorf("commit %q, git says %q", got.Commit, want)
	}
	committed, err := time.Parse(time.RFC3339, strings.TrimSpace(cmd(t, root, "git", "log", "-1", "--format=%cI")))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := time.Parse(time.RFC3339, got.Date); err != nil || !d.Equal(committed) {
		t.Errorf("date %q (%v), the commit's is %v", got.Date, err, committed)
	}
	if got.Go != runtime.Version() {
		t.Errorf("go %q, the toolchain is %s", got.Go, runtime.Version())
	}

	analyze := needTool(t, "systemd-analyze", "systemd")
	unit, err := os.ReadFile(filepath.Join(tree, "usr/lib/systemd/system/saga-supervisor.service"))
	if err != nil {
		t.Fatal(err)
	}
	// verify checks that ExecStart exists: point it at the extracted binary.
	p := filepath.Join(t.TempDir(), "saga-supervisor.service")
	os.WriteFile(p, bytes.ReplaceAll(unit, []byte("/usr/bin/saga-supervisor"), []byte(bin)), 0o644)
	if out, err := exec.Command(analyze, "verify", p).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// What the package sets up, run for real in a throw-away root: sysusers
// creates saga and puts it in the groups the unit names, every group the
// udev rules hand devices to exists, and tmpfiles makes the state directory
// saga's and gives it the config.
func TestUsersGroupsAndDirectoriesInAThrowawayRoot(t *testing.T) {
	sysusers := needTool(t, "systemd-sysusers", "systemd")
	tmpfiles := needTool(t, "systemd-tmpfiles", "systemd")
	tree := t.TempDir()
	cmd(t, "", "dpkg-deb", "--extract", debs(t)["amd64"], tree)
	cmd(t, "", sysusers, "--root="+tree, filepath.Join(tree, "usr/lib/sysusers.d/saga-supervisor.conf"))

	passwd := readDB(t, filepath.Join(tree, "etc/passwd"))
	group := readDB(t, filepath.Join(tree, "etc/group"))
	saga, ok := passwd["saga"]
	if !ok {
		t.Fatalf("no user saga after sysusers:\n%v", passwd)
	}
	if saga[4] != "/var/lib/saga-supervisor" || saga[5] != "/usr/sbin/nologin" {
		t.Errorf("saga's home and shell: %q %q", saga[4], saga[5])
	}
	// passwd: x uid gid gecos home shell; group: x gid members.
	if g, ok := group["saga"]; !ok || g[1] != saga[2] {
		t.Errorf("saga's own group: %v, user's gid %s", g, saga[2])
	}

	unit, err := os.ReadFile(filepath.Join(root, "configs/saga-supervisor.service"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^SupplementaryGroups=(.*)$`).FindSubmatch(unit)
	if m == nil || !regexp.MustCompile(`(?m)^User=saga$`).Match(unit) || !regexp.MustCompile(`(?m)^Group=saga$`).Match(unit) {
		t.Fatal("the unit no longer runs as saga:saga with SupplementaryGroups=")
	}
	unitGroups := strings.Fields(string(m[1]))
	for _, g := range unitGroups {
		if e, ok := group[g]; !ok || !slices.Contains(strings.Split(e[2], ","), "saga") {
			t.Errorf("group %s (the unit's SupplementaryGroups): %v, saga not a member", g, e)
		}
	}
	rules, err := os.ReadFile(filepath.Join(root, "configs/99-saga-supervisor.rules"))
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, m := range regexp.MustCompile(`GROUP="([^"]+)"|/bin/chgrp ([a-z_]+) `).FindAllSubmatch(rules, -1) {
		used[string(m[1])+string(m[2])] = true
	}
	for _, g := range []string{"gpio", "i2c", "dialout"} {
		if !used[g] {
			t.Errorf("the udev rules give no device to %s", g)
		}
	}
	for g := range used {
		if !slices.Contains(unitGroups, g) {
			t.Errorf("the udev rules give devices to %s, which the unit does not run with", g)
		}
	}

	cmd(t, "", tmpfiles, "--root="+tree, "--create", filepath.Join(tree, "usr/lib/tmpfiles.d/saga-supervisor.conf"))
	check := func(path string, perm os.FileMode, uid, gid string) {
		t.Helper()
		fi, err := os.Stat(filepath.Join(tree, path))
		if err != nil {
			t.Error(err)
			return
		}
		if fi.Mode().Perm() != perm {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode().Perm(), perm)
		}
		if os.Getuid() != 0 {
			return // ownership is root's to change; the modes were checked
		}
		if u, g := owner(fi); u != uid || g != gid {
			t.Errorf("%s: owned by %s:%s, want %s:%s", path, u, g, uid, gid)
		}
	}
	check("var/lib/saga-supervisor", 0o700, saga[1], saga[2])
	check("etc/saga-supervisor/config.yaml", 0o640, "0", group["saga"][1])
}

// readDB reads an /etc/passwd or /etc/group: name → the other fields.
func readDB(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Split(line, ":")
		out[f[0]] = f[1:]
	}
	return out
}

// make install lays the files out under DESTDIR and PREFIX with the unit
// starting the installed binary, and a second install keeps the config
// the operator edited.
func TestMakeInstall(t *testing.T) {
	needTool(t, "make", "make")
	dest := t.TempDir()
	install := func() string {
		return cmd(t, root, "make", "--no-print-directory", "install", "DESTDIR="+dest, "BIN="+filepath.Join(t.TempDir(), "saga-supervisor"))
	}
	install()
	for path, perm := range map[string]os.FileMode{
		"usr/local/bin/saga-supervisor":                                  0o755,
		"usr/local/lib/systemd/system/saga-supervisor.service":           0o644,
		"usr/local/lib/udev/rules.d/99-saga-supervisor.rules":            0o644,
		"usr/local/lib/sysusers.d/saga-supervisor.conf":                  0o644,
		"usr/local/lib/tmpfiles.d/saga-supervisor.conf":                  0o644,
		"usr/local/share/doc/saga-supervisor/examples/raspberry-pi.yaml": 0o644,
		"etc/saga-supervisor/config.yaml":                                0o640,
	} {
		fi, err := os.Stat(filepath.Join(dest, path))
		if err != nil {
			t.Error(err)
		} else if fi.Mode().Perm() != perm {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode().Perm(), perm)
		}
	}
	unit, err := os.ReadFile(filepath.Join(dest, "usr/local/lib/systemd/system/saga-supervisor.service"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^ExecStart=/usr/local/bin/saga-supervisor run `).Match(unit) {
		t.Error("the installed unit does not start /usr/local/bin/saga-supervisor")
	}

	config := filepath.Join(dest, "etc/saga-supervisor/config.yaml")
	installedConfig(t, config)
	edited := []byte("# the operator's own\ndevice: arm7\n")
	if err := os.WriteFile(config, edited, 0o640); err != nil {
		t.Fatal(err)
	}
	out := install()
	if b, err := os.ReadFile(config); err != nil || !bytes.Equal(b, edited) {
		t.Fatalf("a second install replaced the edited config (%v):\n%s\n%s", err, b, out)
	}
	if !strings.Contains(out, "kept the existing") {
		t.Errorf("the second install does not say it kept the config:\n%s", out)
	}
}

// debversion.sh makes versions dpkg accepts, in the order the builds were
// made: a later tag or more commits after one sort later, a release
// candidate before its release, an untagged build before any release.
func TestDebVersion(t *testing.T) {
	dpkg := needTool(t, "dpkg", "dpkg")
	const epoch = "1775037600" // 2026-04-01T10:00:00Z
	ordered := []struct{ git, deb string }{
		{"0123abc", "0~git20260401100000.0123abc"},
		{"0123abc-dirty", "0~git20260401100000.0123abc.dirty"},
		{"v1.0.0-rc1", "1.0.0~rc1"},
		{"v1.0.0-rc1-3-gdeadbee", "1.0.0~rc1+git3.deadbee"},
		{"v1.0.0", "1.0.0"},
		{"v1.0.0-dirty", "1.0.0+dirty"},
		{"v1.0.0-2-gabc1234", "1.0.0+git2.abc1234"},
		{"v1.0.0-2-gabc1234-dirty", "1.0.0+git2.abc1234.dirty"},
		{"v1.0.0-10-g1234abc", "1.0.0+git10.1234abc"},
		{"v1.1.0", "1.1.0"},
	}
	for i, c := range ordered {
		got := strings.TrimSpace(cmd(t, root, "sh", "packaging/debversion.sh", c.git, epoch))
		if got != c.deb {
			t.Errorf("%s: %q, want %q", c.git, got, c.deb)
		}
		if i > 0 {
			prev := ordered[i-1].deb
			if err := exec.Command(dpkg, "--compare-versions", prev, "lt", got).Run(); err != nil {
				t.Errorf("dpkg does not sort %s before %s", prev, got)
			}
		}
	}
}

// lintianKnown are the tags lintian may still give, each for a reason; any
// other warning or error fails the test.
var lintianKnown = map[string]string{
	"no-copyright-file": "the project has no licence file yet to copy into the package",
	"no-changelog":      "releases are not tagged yet: there is no changelog to ship",
	"no-manual-page":    "`saga-supervisor help` and the README are the manual for now",
}

// Debian's own checker finds nothing in the packages but the known tags.
func TestLintian(t *testing.T) {
	lintian := needTool(t, "lintian", "lintian")
	for arch, deb := range debs(t) {
		t.Run(arch, func(t *testing.T) {
			c := exec.Command(lintian, "--tag-display-limit", "0", "--display-level", ">=warning", deb)
			out, _ := c.CombinedOutput() // exit 2 on errors: the tags decide
			tag := regexp.MustCompile(`(?m)^([EW]): saga-supervisor(?: [^:]*)?: (\S+)(.*)$`)
			n := 0
			for _, m := range tag.FindAllSubmatch(out, -1) {
				n++
				if why, ok := lintianKnown[string(m[2])]; ok {
					t.Logf("lintian %s %s (known: %s)", m[1], m[2], why)
					continue
				}
				t.Errorf("lintian %s: %s%s", m[1], m[2], m[3])
			}
			if n == 0 && len(bytes.TrimSpace(out)) != 0 && !bytes.Contains(out, []byte("root privileges")) {
				t.Logf("lintian said:\n%s", out)
			}
		})
	}
}
