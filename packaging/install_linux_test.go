package packaging

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// What the parent run of TestInstallPath hands its child, which runs in
// the namespaces of the copy of this machine (install_root_linux_test.go).
const (
	envInstallDeb     = "SAGA_INSTALL_PATH_DEB"     // the package to install
	envInstallVersion = "SAGA_INSTALL_PATH_VERSION" // its version, the docs' <version>
	envInstallDir     = "SAGA_INSTALL_PATH_DIR"     // where the copy is mounted
)

// TestInstallPath is the documented install path, end to end: the .deb
// that `make deb` builds for this machine is installed with the commands
// README.md and docs/HARDWARE.md print, in a throw-away copy of this
// machine, by an operator pi typing them as printed (sudo and all); the
// unit is started as systemd would start it, as the user saga; ctl runs as
// root and as pi with the password root exports to pi; a halt, a restart
// that comes back halted and says so, a reset with the generated operator
// token; then Debian's mosquitto instead of the embedded broker, set up as
// printed. Every command the docs print for that path runs, and a
// documented command that fails, or one the docs print that no step runs,
// fails the test.
//
// What differs from a real install on a Pi: the copy is this machine
// (amd64 Debian 12 in CI), not Raspberry Pi OS, with pi added as Pi OS
// adds it; the config is the packaged one (the simulated arm), not a
// robot's, so no device is opened; `sudo apt install ./dist/…_<version>_arm64.deb` installs this
// machine's architecture and version; there is no systemd as PID 1, so
// `systemctl enable --now` runs without --now (systemctl enables offline)
// and the test starts the unit as systemd would (service), carrying out
// the directives that start it but not the sandboxing; `sudo apt install
// mosquitto` finds mosquitto installed already (CI installs it: the copy
// has it; on a Pi, apt starts it at once, which the test does not do),
// and `sudo systemctl restart mosquitto saga-supervisor` restarts Debian's
// own mosquitto.service and the supervisor's the same way, in systemd's
// order; the config edit the docs print is made by the test, as an editor
// would.
func TestInstallPath(t *testing.T) {
	if deb := os.Getenv(envInstallDeb); deb != "" {
		installPathInCopy(t, deb)
		return
	}
	if os.Geteuid() != 0 {
		const why = "the install path needs root: it installs the package in a throw-away copy of this machine and runs commands as other users"
		if os.Getenv("CI") != "" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	// What the documented commands run, in the copy of this machine.
	for _, p := range [][2]string{{"sudo", "sudo"}, {"apt-get", "apt"}, {"dpkg", "dpkg"}, {"systemctl", "systemd"},
		{"useradd", "passwd"}, {"mosquitto", "mosquitto"}, {"bash", "bash"}} {
		needTool(t, p[0], p[1])
	}
	arch := ""
	for a, w := range arches {
		if w.goarch == runtime.GOARCH {
			arch = a
		}
	}
	if arch == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("no package for this machine (%s) to install", runtime.GOARCH)
		}
		t.Skipf("no package for this machine (%s) to install", runtime.GOARCH)
	}
	deb := debs(t)[arch]
	version := makeVar(t, "DEB_VERSION")

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestInstallPath$", "-test.v", "-test.count=1", "-test.timeout=4m")
	c.Env = append(os.Environ(), envInstallDeb+"="+deb, envInstallVersion+"="+version, envInstallDir+"="+t.TempDir())
	c.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET | syscall.CLONE_NEWPID,
		Pdeathsig:  syscall.SIGKILL,
	}
	out, err := c.CombinedOutput()
	if err != nil && c.ProcessState == nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no mount, network and PID namespaces for the copy of this machine: %v", err)
		}
		t.Skipf("no mount, network and PID namespaces for the copy of this machine: %v", err)
	}
	t.Logf("in the throw-away copy of this machine (%v):\n%s", time.Since(start).Round(time.Millisecond), out)
	switch {
	case err != nil:
		t.Fatalf("the install path failed: %v", err)
	case !bytes.Contains(out, []byte("--- PASS: TestInstallPath")):
		t.Fatal("the install path did not run in the copy")
	}
}

// installPathInCopy is the child: it enters the copy of this machine and
// walks the install path there.
func installPathInCopy(t *testing.T, deb string) {
	start := time.Now()
	repo, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	s := &steps{t: t, lines: installPath(t, repo)}
	pkg, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	version := os.Getenv(envInstallVersion)

	enterCopy(t, os.Getenv(envInstallDir))
	os.Setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	os.Setenv("TMPDIR", "/tmp")
	// A fresh machine: no trace of the package.
	for _, p := range []string{"/etc/saga-supervisor", "/var/lib/saga-supervisor", "/usr/bin/saga-supervisor", "/usr/local/bin/saga-supervisor"} {
		if _, err := os.Stat(p); err == nil {
			t.Fatalf("this machine has %s already: the install path is tried on a machine without saga-supervisor", p)
		}
	}
	pi := addOperator(t)

	// Building: the parent ran `make deb` (into a directory of its own).
	for _, l := range s.take(`^make deb\b`) {
		t.Logf("%s: $ %s: built before the copy was made, with DIST=%s", l.where, l.raw, filepath.Dir(deb))
	}

	// Installing: the package from ./dist, as printed but for the version
	// and the architecture, which are this build's.
	l := s.one(`^sudo apt install \./dist/saga-supervisor_`)
	name := filepath.Base(deb)
	debRef := regexp.MustCompile(`saga-supervisor_<version>_(arm64|armhf|amd64)\.deb`)
	if !debRef.MatchString(l.raw) {
		t.Fatalf("%s: %q no longer names the package as dist/saga-supervisor_<version>_ARCH.deb", l.where, l.raw)
	}
	if !strings.HasPrefix(name, "saga-supervisor_"+version+"_") {
		t.Fatalf("the package %s is not of version %s", name, version)
	}
	pi.sh("mkdir -p dist")
	if err := os.WriteFile(filepath.Join(pi.home, "dist", name), pkg, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chown(filepath.Join(pi.home, "dist", name), int(pi.uid), int(pi.gid))
	pi.run(l, debRef.ReplaceAllLiteralString(l.raw, name), "Setting up saga-supervisor ("+version+")")
	installed(t, pi, version)

	// Checking the config, then starting the unit.
	for _, l := range s.take(`^sudo (-u saga )?saga-supervisor check-config /etc/saga-supervisor/config\.yaml$`) {
		pi.run(l, "", "/etc/saga-supervisor/config.yaml: valid", "journal /var/lib/saga-supervisor/saga-data/journal")
	}
	l = s.one(`^sudo systemctl enable --now saga-supervisor$`)
	// No systemd runs in the copy: systemctl enables the unit offline, and
	// the test starts it (service) as systemd would.
	pi.run(l, strings.Replace(l.raw, " --now", "", 1))
	if to, err := os.Readlink("/etc/systemd/system/multi-user.target.wants/saga-supervisor.service"); err != nil || filepath.Base(to) != "saga-supervisor.service" {
		t.Fatalf("the unit is not enabled: %q %v", to, err)
	}
	sup := loadService(t, "saga-supervisor.service")
	t.Cleanup(sup.stop)
	// The README's `saga-supervisor run --config FILE` is what the unit runs.
	exec0, _ := sup.execLine(sup.one("ExecStart"))
	for _, l := range s.take(`^saga-supervisor run `) {
		words, _ := shellWords(l.cmd)
		if strings.Join(words[1:], " ") != strings.Join(exec0[1:], " ") {
			t.Errorf("%s prints %q; the unit runs %q", l.where, l.cmd, strings.Join(exec0, " "))
		}
	}
	if out, _ := pi.sh("command -v saga-supervisor; sudo sh -c 'command -v saga-supervisor'"); out != exec0[0]+"\n"+exec0[0]+"\n" {
		t.Fatalf("saga-supervisor is not the unit's %s for pi and root:\n%s", exec0[0], out)
	}
	sup.start()
	firstStart(t, sup)
	// The secrets it made stay out of the test's log.
	for _, f := range []string{"operator-token", "mqtt/credentials/ctl", "mqtt/credentials/planner", "mqtt/credentials/saga-supervisor-arm1"} {
		pi.secrets = append(pi.secrets, secret(t, filepath.Join("/var/lib/saga-supervisor/saga-data", f)))
	}
	cfg, err := config.Load(installedConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTP.Listen != "127.0.0.1:8080" || cfg.MQTT.Listen != "127.0.0.1:1883" {
		t.Fatalf("the packaged config listens on %s and %s, not on the documented 127.0.0.1:8080 and 127.0.0.1:1883", cfg.HTTP.Listen, cfg.MQTT.Listen)
	}
	dash := dashboard{t: t, url: "http://" + cfg.HTTP.Listen}
	dash.page()

	// ctl and the credentials, as root.
	status := s.one(`^sudo saga-supervisor ctl --config /etc/saga-supervisor/config\.yaml status$`)
	notHalted := func(out string) {
		t.Helper()
		if strings.Contains(out, "HALTED") {
			t.Fatalf("status says halted:\n%s", out)
		}
	}
	notHalted(pi.run(status, "", "ready:      yes"))
	dash.halted(false)
	creds := cfg.MQTT.Auth.CredentialsDir
	out := pi.run(s.one(`^sudo saga-supervisor credentials list `), "", filepath.Join(creds, "ctl"), filepath.Join(creds, "planner"))
	for _, login := range []string{"ctl", "planner"} {
		if pw := secret(t, filepath.Join(creds, login)); strings.Contains(out, pw) {
			t.Fatalf("credentials list prints %s's password", login)
		}
	}
	// The drop-in for a listener beyond loopback: on the packaged loopback
	// config it has nothing to let through, and says so.
	pi.run(s.one(`^sudo saga-supervisor systemd-dropin --config /etc/saga-supervisor/config\.yaml$`), "")
	l = s.one(`^sudo saga-supervisor credentials show ctl `)
	if out := pi.run(l, ""); strings.TrimSpace(out) != secret(t, filepath.Join(creds, "ctl")) {
		t.Fatalf("%s: credentials show ctl does not print ctl's password", l.where)
	}
	// Anyone else is refused, with the file in the way, its mode and its
	// owner, and never logs in with no password.
	for _, l := range []*pathLine{status, l} {
		line := strings.TrimPrefix(l.raw, "sudo ")
		out, code := pi.sh(line)
		t.Logf("%s without sudo, as pi: exit %d\n$ %s\n%s", l.where, code, line, out)
		if code == 0 || !strings.Contains(out, installedConfigPath+" is mode 0640, owner root:saga: pi may not read it") {
			t.Errorf("pi, without sudo, is not refused with the config in the way (docs/HARDWARE.md says so)")
		}
	}

	// A controller running as pi, with the password root exports to it.
	for _, l := range s.take(`^sudo -u pi mkdir `) {
		pi.run(l, "")
	}
	l = s.one(`^sudo saga-supervisor credentials export `)
	pi.run(l, "", "mode 0600, owner pi")
	exported(t, l, creds)
	piStatus := s.one(`^saga-supervisor ctl --agent \S+ --password-file \S+ .*\bstatus$`)
	notHalted(pi.run(piStatus, "", "ready:      yes"))
	for _, l := range s.take(`^saga-supervisor ctl --agent \S+ --password-file \S+ .*\bhello$`) {
		pi.run(l, "")
	}

	// The e-stop: halted, in ctl, the dashboard and watch.
	watch, stopWatch := pi.background(s.one(`^sudo saga-supervisor ctl --config /etc/saga-supervisor/config\.yaml watch$`))
	waitFor(t, "watch to print the status", func() bool { return strings.Contains(watch(), "ready") })
	halt := s.one(`^sudo saga-supervisor ctl --config /etc/saga-supervisor/config\.yaml halt\b`)
	resets := s.take(`^sudo saga-supervisor ctl --config /etc/saga-supervisor/config\.yaml reset\b`)
	// What the supervisor says to do about a halt is the documented reset.
	resetCmd := strings.TrimPrefix(resets[0].cmd, "sudo ")
	halted := func(out string) {
		t.Helper()
		if !strings.Contains(out, "WARNING: the supervisor is HALTED: agent ctl") || !strings.Contains(out, resetCmd+"\n") {
			t.Fatalf("status does not say it is halted, by whom and how to reset (%s):\n%s", resetCmd, out)
		}
	}
	pi.run(halt, "")
	halted(pi.run(status, ""))
	dash.halted(true)
	if out := pi.run(piStatus, ""); !strings.Contains(out, "HALTED") {
		t.Fatalf("%s: pi's status does not say halted:\n%s", piStatus.where, out)
	}
	waitFor(t, "watch to print the halt", func() bool { return strings.Contains(watch(), "HALTED") })
	stopWatch()

	// A restart comes back halted, and says so in its log, with the reset.
	sup.restart()
	log := sup.waitLog("HALTED: the journal ends halted") // the banner's line, after the log's
	warn := regexp.MustCompile(`(?m)^<4>level=WARN msg="started HALTED: [^"]*" reason="agent ctl[^"]*" reset="([^"]*)"$`).FindStringSubmatch(log)
	if warn == nil {
		t.Fatalf("the restarted supervisor's journal does not warn (priority 4) that it started halted, why and how to reset:\n%s", log)
	}
	t.Logf("the restarted supervisor's journal: %s", warn[0])
	if warn[1] != resetCmd {
		t.Errorf("the log says to reset with %q; the docs print %q", warn[1], resetCmd)
	}
	if !strings.Contains(log, "HALTED: the journal ends halted, so the robot starts halted") {
		t.Errorf("the banner does not say the start is halted:\n%s", log)
	}
	halted(pi.run(status, ""))
	dash.halted(true)

	// The reset, with the token the first start generated: each documented
	// reset, halted again before each but the first.
	for i, l := range resets {
		if i > 0 {
			pi.run(halt, "")
		}
		pi.run(l, "", "the halt is cleared")
		dash.halted(false)
	}
	notHalted(pi.run(status, "", "ready:      yes"))

	// Debian's mosquitto instead of the embedded broker.
	pi.run(s.one(`^sudo apt install mosquitto$`), "")
	l = s.one(`^sudo saga-supervisor mosquitto-config --config /etc/saga-supervisor/config\.yaml `)
	printed := pi.run(l, "")
	edit := s.yaml()
	mosquittoConfigPrints(t, edit, printed, cfg.StateDir)
	editConfig(t, edit)
	// Both restarted at once, as printed: the supervisor's embedded broker
	// holds the port until it stops, and mosquitto.service is started, as
	// systemd would, before the supervisor, whose unit is ordered after it.
	l = s.one(`^sudo systemctl restart mosquitto saga-supervisor$`)
	if !strings.Contains(printed, "then: "+l.cmd) {
		t.Errorf("%s: mosquitto-config does not say to run %q:\n%s", l.where, l.cmd, printed)
	}
	t.Logf("%s: $ %s: the test restarts both units as systemd would", l.where, l.raw)
	mosq := loadService(t, "mosquitto.service")
	mosq.logFiles = []string{"/var/log/mosquitto/mosquitto.log"} // Debian's mosquitto.conf: log_dest file
	// Stopped as systemd would: the supervisor first (After=mosquitto.service).
	t.Cleanup(func() { sup.stop(); mosq.stop() })
	if !slices.Contains(sup.after, "mosquitto.service") {
		t.Fatalf("the supervisor's unit is not ordered after mosquitto.service (After=%v)", sup.after)
	}
	restartUnits(t, mosq, sup)
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", mosq.cmd.Process.Pid)); err != nil ||
		!regexp.MustCompile(`(?m)^Uid:\s+`+fmt.Sprint(lookupAccount(t, "mosquitto").uid)+`\s`).Match(b) {
		t.Errorf("mosquitto does not run as the user mosquitto: %v\n%s", err, b)
	}
	if !strings.Contains(sup.waitLog("  MQTT     tcp://127.0.0.1:1883\n"), "  MQTT     tcp://127.0.0.1:1883\n") {
		t.Fatalf("the supervisor does not say it uses mosquitto on 127.0.0.1:1883:\n%s", sup.log())
	}
	notHalted(pi.run(status, "", "ready:      yes"))
	notHalted(pi.run(piStatus, "", "ready:      yes"))
	// mosquitto let them in: the supervisor, ctl (root's) and planner (pi's).
	mlog, _ := os.ReadFile("/var/log/mosquitto/mosquitto.log")
	for _, u := range []string{"saga-supervisor-arm1", "ctl", "planner"} {
		if !bytes.Contains(mlog, []byte("u'"+u+"')")) {
			t.Errorf("mosquitto's log shows no login of %s:\n%s", u, mlog)
		}
	}
	pi.run(halt, "")
	halted(pi.run(status, ""))
	dash.halted(true)
	pi.run(resets[0], "", "the halt is cleared")
	dash.halted(false)

	sup.stop()
	mosq.stop()
	s.notRun()
	t.Logf("the install path took %v", time.Since(start).Round(time.Millisecond))
}

// installed checks what installing the package set up, as README.md
// says: the package, the user saga in its groups, the state directory
// (saga's, 0700), the config (0640, group saga), the unit enabled.
func installed(t *testing.T, pi *operator, version string) {
	t.Helper()
	if out, code := pi.sh("dpkg-query -W -f '${Status} ${Version}' saga-supervisor"); code != 0 || out != "install ok installed "+version {
		t.Fatalf("dpkg: %q (exit %d)", out, code)
	}
	saga := lookupAccount(t, "saga")
	group := readDB(t, "/etc/group")
	for _, g := range []string{"gpio", "i2c", "dialout"} {
		if e, ok := group[g]; !ok || !strings.Contains(","+e[2]+",", ",saga,") {
			t.Errorf("saga is not in the group %s: %v", g, group[g])
		}
	}
	if saga.home != "/var/lib/saga-supervisor" || saga.shell != "/usr/sbin/nologin" {
		t.Errorf("saga's home and shell: %s %s", saga.home, saga.shell)
	}
	owned(t, "/var/lib/saga-supervisor", 0o700, saga.uid, saga.gid)
	owned(t, installedConfigPath, 0o640, 0, groupID(t, "saga"))
	if _, err := os.Readlink("/etc/systemd/system/multi-user.target.wants/saga-supervisor.service"); err != nil {
		t.Errorf("the package did not enable the unit: %v", err)
	}
}

// firstStart checks what the first start generated: the operator token
// and the MQTT logins, saga's and private, and the journal, all under the
// state directory.
func firstStart(t *testing.T, sup *service) {
	t.Helper()
	saga := lookupAccount(t, "saga")
	state := "/var/lib/saga-supervisor"
	owned(t, state, 0o700, saga.uid, saga.gid)
	for _, f := range []string{"saga-data/operator-token", "saga-data/mqtt/credentials/ctl", "saga-data/mqtt/credentials/planner", "saga-data/mqtt/passwd"} {
		owned(t, filepath.Join(state, f), 0o600, saga.uid, saga.gid)
	}
	if fi, err := os.Stat(filepath.Join(state, "saga-data/journal")); err != nil || !fi.IsDir() {
		t.Errorf("no journal: %v", err)
	}
	log := sup.waitLog("systemd watchdog enabled") // logged just after READY=1
	if !strings.Contains(log, "operator token created") || strings.Contains(log, secret(t, filepath.Join(state, "saga-data/operator-token"))) {
		t.Errorf("the first start's journal does not say it made the operator token, or prints it:\n%s", log)
	}
	if !strings.Contains(log, "systemd watchdog enabled") || !strings.HasPrefix(log, "<6>") {
		t.Errorf("the journal is not in journal format with the watchdog on:\n%s", log)
	}
}

// exported checks the file `credentials export AGENT --to FILE --owner
// USER` wrote: AGENT's password, mode 0600, USER's.
func exported(t *testing.T, l *pathLine, creds string) {
	t.Helper()
	words, err := shellWords(l.cmd)
	if err != nil {
		t.Fatal(err)
	}
	var agent, to, owner string
	for i, w := range words {
		switch {
		case w == "export" && i+1 < len(words):
			agent = words[i+1]
		case w == "--to" && i+1 < len(words):
			to = words[i+1]
		case w == "--owner" && i+1 < len(words):
			owner = words[i+1]
		}
	}
	u := lookupAccount(t, owner)
	owned(t, to, 0o600, u.uid, u.gid)
	if secret(t, to) != secret(t, filepath.Join(creds, agent)) {
		t.Errorf("%s does not hold %s's password", to, agent)
	}
	owned(t, "/var/lib/saga-supervisor", 0o700, lookupAccount(t, "saga").uid, lookupAccount(t, "saga").gid)
}

// mosquittoConfigPrints checks that mosquitto-config printed the lines the
// docs show for the config (a relative file there, under state_dir, is
// the absolute one printed).
func mosquittoConfigPrints(t *testing.T, edit []*pathLine, printed, stateDir string) {
	t.Helper()
	got := map[string]string{}
	for _, line := range strings.Split(printed, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ": "); ok {
			v, _, _ = strings.Cut(v, "   (")
			got[k] = strings.TrimSpace(v)
		}
	}
	for _, l := range edit[1:] {
		k, v := yamlKV(t, l)
		if p := got[k]; p != v && !(strings.HasSuffix(k, "_file") && p == filepath.Join(stateDir, v)) {
			t.Errorf("%s: the docs say %s: %s; mosquitto-config printed %q", l.where, k, v, p)
		}
	}
}

// yamlKV is a documented `  key: value  # comment` line's key and value.
func yamlKV(t *testing.T, l *pathLine) (string, string) {
	t.Helper()
	k, v, ok := strings.Cut(strings.TrimSpace(l.raw), ":")
	if !ok || !strings.HasPrefix(l.raw, "  ") || strings.HasPrefix(l.raw, "   ") {
		t.Fatalf("%s: %q is not a key of the section above", l.where, l.raw)
	}
	v, _, _ = strings.Cut(v, " #")
	return k, strings.TrimSpace(v)
}

// editConfig makes the documented config edit: under the snippet's first
// line (its section, e.g. mqtt:), each key's line is replaced by the
// documented one.
func editConfig(t *testing.T, edit []*pathLine) {
	t.Helper()
	b, err := os.ReadFile(installedConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	section := strings.TrimSpace(edit[0].raw)
	start := -1
	for i, l := range lines {
		if l == section {
			start = i
		}
	}
	if start < 0 || !strings.HasSuffix(section, ":") || strings.HasPrefix(edit[0].raw, " ") {
		t.Fatalf("%s: the config has no section %q", edit[0].where, section)
	}
	for _, l := range edit[1:] {
		k, _ := yamlKV(t, l)
		done := false
		for i := start + 1; i < len(lines) && !done; i++ {
			if lines[i] != "" && lines[i][0] != ' ' && lines[i][0] != '#' {
				break // the next section
			}
			if strings.HasPrefix(lines[i], "  "+k+":") {
				lines[i], done = l.raw, true
			}
		}
		if !done {
			t.Fatalf("%s: the config's %s has no %s to set", l.where, section, k)
		}
	}
	// Written in place: the file keeps its mode and owner.
	if err := os.WriteFile(installedConfigPath, []byte(strings.Join(lines, "\n")), 0o640); err != nil {
		t.Fatal(err)
	}
	t.Logf("edited %s as docs/HARDWARE.md prints:\n%s", installedConfigPath, joinRaw(edit))
}

func joinRaw(ls []*pathLine) string {
	var b strings.Builder
	for _, l := range ls {
		b.WriteString(l.raw + "\n")
	}
	return b.String()
}

// owned checks a file's mode and owner.
func owned(t *testing.T, path string, perm os.FileMode, uid, gid uint32) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Error(err)
		return
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != perm || st.Uid != uid || st.Gid != gid {
		t.Errorf("%s: mode %04o, owner %d:%d; want %04o %d:%d", path, fi.Mode().Perm(), st.Uid, st.Gid, perm, uid, gid)
	}
}

// secret is a secret file's content without the line end.
func secret(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		t.Fatalf("%s: %v (%d bytes)", path, err, len(b))
	}
	return string(bytes.TrimSpace(b))
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// dashboard is the supervisor's HTTP side, as the operator's browser on
// the robot (or through the documented SSH tunnel) reaches it.
type dashboard struct {
	t   *testing.T
	url string
}

func (d dashboard) get(path string) (int, []byte) {
	d.t.Helper()
	res, err := http.Get(d.url + path)
	if err != nil {
		d.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// page: the dashboard is served.
func (d dashboard) page() {
	d.t.Helper()
	if code, b := d.get("/"); code != 200 || !bytes.Contains(b, []byte("<html")) {
		d.t.Fatalf("GET %s/: %d\n%.300s", d.url, code, b)
	}
}

// halted checks /api/v1/status, which the dashboard shows.
func (d dashboard) halted(want bool) {
	d.t.Helper()
	code, b := d.get("/api/v1/status")
	var st struct {
		Halted bool   `json:"halted"`
		Why    string `json:"halt_reason"`
	}
	if err := json.Unmarshal(b, &st); code != 200 || err != nil {
		d.t.Fatalf("GET /api/v1/status: %d %v\n%s", code, err, b)
	}
	if st.Halted != want {
		d.t.Fatalf("the dashboard's /api/v1/status: halted %v (%s), want %v", st.Halted, st.Why, want)
	}
}
