package packaging

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
)

// The throw-away machine TestInstallPath installs the package on: a
// copy-on-write copy of this machine (CI's fresh Debian 12), entered by a
// child of the test binary in namespaces of its own.
//
//   - Mount namespace: / is an overlay whose lower layer is this machine's
//     root file system, read-only, and whose upper layer is a tmpfs, so
//     dpkg, apt, the postinst, systemctl and the daemon write only to
//     memory. Its package database (/var/lib/dpkg) is a snapshot taken
//     while no apt or dpkg runs here. It has its own /proc, /run, /tmp and
//     /dev (null, zero, full, random, urandom, tty and a pts of its own).
//     The child chroots into it: from then on the test itself sees only
//     the copy.
//   - Network namespace: a loopback of its own, so the packaged config's
//     fixed ports (127.0.0.1:1883 and :8080) are free however busy the
//     machine, and are used as documented.
//   - PID namespace: the child is its PID 1, so every process it started
//     dies with it, whatever happens.
//
// Nothing is mounted outside the child's mount namespace; the directories
// it mounts on are plain empty directories to everyone else, removed with
// the parent's temporary directory.

// enterCopy makes the copy of this machine under dir and chroots into it.
func enterCopy(t *testing.T, dir string) {
	t.Helper()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// Nothing mounted here reaches the machine's own mount namespace.
	must("make / private", syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""))
	// The overlay takes the root file system alone, not what is mounted
	// below it: the directories the install touches must be on it.
	var rootSt syscall.Stat_t
	must("stat /", syscall.Stat("/", &rootSt))
	for _, d := range []string{"/usr", "/etc", "/var", "/home"} {
		var st syscall.Stat_t
		must("stat "+d, syscall.Stat(d, &st))
		if st.Dev != rootSt.Dev {
			t.Fatalf("%s is a file system of its own, which the copy of / would not hold", d)
		}
	}
	cow, merged := filepath.Join(dir, "cow"), filepath.Join(dir, "root")
	must("mkdir", os.Mkdir(cow, 0o700))
	must("mkdir", os.Mkdir(merged, 0o755))
	must("tmpfs for the copy's writes", syscall.Mount("tmpfs", cow, "tmpfs", 0, "mode=0700"))
	must("mkdir", os.Mkdir(filepath.Join(cow, "upper"), 0o755))
	must("mkdir", os.Mkdir(filepath.Join(cow, "work"), 0o755))
	must("the overlay of /", syscall.Mount("overlay", merged, "overlay", 0,
		"lowerdir=/,upperdir="+filepath.Join(cow, "upper")+",workdir="+filepath.Join(cow, "work")))
	at := func(p string) string { return filepath.Join(merged, p) }
	// The package database is a snapshot, not the live lower layer: an
	// apt run on this machine meanwhile (a shared one) would otherwise show
	// through as an interrupted dpkg.
	snap := filepath.Join(cow, "dpkg")
	dpkgSnapshot(t, snap)
	must("/var/lib/dpkg", syscall.Mount(snap, at("/var/lib/dpkg"), "", syscall.MS_BIND, ""))
	must("/proc", syscall.Mount("proc", at("/proc"), "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""))
	must("/run", syscall.Mount("tmpfs", at("/run"), "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0755"))
	must("/tmp", syscall.Mount("tmpfs", at("/tmp"), "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=1777"))
	must("/dev", syscall.Mount("tmpfs", at("/dev"), "tmpfs", syscall.MS_NOSUID, "mode=0755"))
	for _, d := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		must("/dev/"+d, os.WriteFile(at("/dev/"+d), nil, 0o666))
		must("/dev/"+d, syscall.Mount("/dev/"+d, at("/dev/"+d), "", syscall.MS_BIND, ""))
	}
	must("mkdir", os.Mkdir(at("/dev/pts"), 0o755))
	must("/dev/pts", syscall.Mount("devpts", at("/dev/pts"), "devpts", syscall.MS_NOSUID|syscall.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"))
	for link, to := range map[string]string{"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		must("/dev/"+link, os.Symlink(to, at("/dev/"+link)))
	}
	must("bring up lo", testtool.LoopbackUp())
	must("chroot", syscall.Chroot(merged))
	must("chdir", os.Chdir("/"))
}

// dpkgSnapshot copies this machine's /var/lib/dpkg to dst once no dpkg or
// apt is at work on it (no lock held, no journal of an unfinished run),
// waiting for one that is. It only looks at the locks (F_GETLK), never
// takes them: an apt started meanwhile is never refused.
func dpkgSnapshot(t *testing.T, dst string) {
	t.Helper()
	const db = "/var/lib/dpkg"
	quiet := func() (bool, string) {
		for _, lock := range []string{"lock-frontend", "lock"} {
			f, err := os.Open(filepath.Join(db, lock))
			if err != nil {
				continue // never locked yet
			}
			fl := syscall.Flock_t{Type: syscall.F_WRLCK}
			err = syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &fl)
			f.Close()
			if err != nil || fl.Type != syscall.F_UNLCK {
				return false, fmt.Sprintf("%s is locked (%v)", filepath.Join(db, lock), err)
			}
		}
		if ents, _ := os.ReadDir(filepath.Join(db, "updates")); len(ents) > 0 {
			return false, "dpkg has an unfinished run (" + db + "/updates)"
		}
		return true, ""
	}
	start := time.Now()
	for said := false; ; time.Sleep(time.Second) {
		ok, why := quiet()
		if ok {
			os.RemoveAll(dst)
			if err := copyTree(db, dst); err != nil {
				t.Fatal(err)
			}
			if ok, why = quiet(); ok {
				if said {
					t.Logf("this machine's dpkg is done after %v", time.Since(start).Round(time.Second))
				}
				return
			}
		}
		if time.Since(start) > 5*time.Minute {
			t.Fatalf("this machine's dpkg has been busy for 5 minutes: %s", why)
		}
		if !said {
			t.Logf("waiting for this machine's dpkg: %s", why)
			said = true
		}
	}
}

// copyTree copies a directory of regular files, directories and symbolic
// links, with their modes.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		to := filepath.Join(dst, strings.TrimPrefix(p, src))
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.Mkdir(to, fi.Mode().Perm())
		case d.Type()&os.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, to)
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, fi.Mode().Perm())
		}
		return nil // no sockets or devices in a package database
	})
}

// account is a user of the copy, from its /etc/passwd and /etc/group.
type account struct {
	name        string
	uid, gid    uint32
	groups      []uint32 // the groups it is a member of (initgroups)
	home, shell string
}

func lookupAccount(t *testing.T, name string) account {
	t.Helper()
	passwd := readDB(t, "/etc/passwd")
	p, ok := passwd[name]
	if !ok {
		t.Fatalf("no user %s in /etc/passwd", name)
	}
	uid, _ := strconv.Atoi(p[1])
	gid, _ := strconv.Atoi(p[2])
	a := account{name: name, uid: uint32(uid), gid: uint32(gid), home: p[4], shell: p[5]}
	a.groups = []uint32{a.gid}
	for _, g := range readDB(t, "/etc/group") {
		if slices.Contains(strings.Split(g[2], ","), name) {
			n, _ := strconv.Atoi(g[1])
			a.groups = append(a.groups, uint32(n))
		}
	}
	return a
}

func (a account) cred() *syscall.Credential {
	return &syscall.Credential{Uid: a.uid, Gid: a.gid, Groups: a.groups}
}

// groupID is a group's id in the copy's /etc/group.
func groupID(t *testing.T, name string) uint32 {
	t.Helper()
	g, ok := readDB(t, "/etc/group")[name]
	if !ok {
		t.Fatalf("no group %s in /etc/group (systemd would fail the unit: 216/GROUP)", name)
	}
	n, _ := strconv.Atoi(g[1])
	return uint32(n)
}

// operator is the login user of the copy who types the documented
// commands: pi, as Raspberry Pi OS makes it — a login shell, a home, and
// sudo without a password (its /etc/sudoers.d/010_pi-nopasswd).
type operator struct {
	t *testing.T
	account
	secrets []string // not to be logged: the passwords and the token, once made
}

// redact is s with every secret the test knows replaced.
func (o *operator) redact(s string) string {
	for _, x := range o.secrets {
		s = strings.ReplaceAll(s, x, "<secret>")
	}
	return s
}

func addOperator(t *testing.T) *operator {
	t.Helper()
	if _, ok := readDB(t, "/etc/passwd")["pi"]; ok {
		t.Fatal("this machine has a user pi already; the test makes its own")
	}
	cmd(t, "/", "useradd", "--create-home", "--shell", "/bin/bash", "--user-group", "pi")
	if err := os.WriteFile("/etc/sudoers.d/010_pi-nopasswd", []byte("pi ALL=(ALL) NOPASSWD: ALL\n"), 0o440); err != nil {
		t.Fatal(err)
	}
	return &operator{t: t, account: lookupAccount(t, "pi")}
}

// login is how pi's commands run: pi's login shell, in pi's home, with
// the environment a login gives (the shell's profile sets PATH).
func (o *operator) login(ctx context.Context, line string) *exec.Cmd {
	c := exec.CommandContext(ctx, o.shell, "-l", "-c", line)
	c.Dir = o.home
	c.Env = []string{"HOME=" + o.home, "USER=pi", "LOGNAME=pi", "SHELL=" + o.shell, "LANG=C.UTF-8", "TERM=dumb",
		"PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"}
	c.SysProcAttr = &syscall.SysProcAttr{Credential: o.cred(), Setsid: true}
	c.WaitDelay = 5 * time.Second
	return c
}

// sh runs a command line as pi types it and returns its output (standard
// output and error) and exit status.
func (o *operator) sh(line string) (string, int) {
	o.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := o.login(ctx, line)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee) && ctx.Err() == nil:
		return out.String(), ee.ExitCode()
	}
	o.t.Fatalf("$ %s: %v\n%s", line, err, out.String())
	return "", -1
}

// run runs a documented line (as printed, or as the step must change it:
// line) and fails the test unless it exits 0 and says each of want.
func (o *operator) run(l *pathLine, line string, want ...string) string {
	o.t.Helper()
	if line == "" {
		line = l.raw
	}
	start := time.Now()
	out, code := o.sh(line)
	o.t.Logf("%s, as pi (%v):\n$ %s\n%s", l.where, time.Since(start).Round(time.Millisecond), line, o.redact(out))
	if code != 0 {
		o.t.Fatalf("%s: exit %d: the documented command does not work as printed:\n$ %s\n%s", l.where, code, line, o.redact(out))
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			o.t.Fatalf("%s: the output does not say %q:\n$ %s\n%s", l.where, w, line, o.redact(out))
		}
	}
	return out
}

// background starts a documented command as pi and returns its output so
// far and a stop that interrupts it (^C: SIGINT to its process group).
func (o *operator) background(l *pathLine) (out func() string, stop func()) {
	o.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	c := o.login(ctx, l.raw)
	buf := &lockedBuffer{}
	c.Stdout, c.Stderr = buf, buf
	if err := c.Start(); err != nil {
		cancel()
		o.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { c.Wait(); close(done) }()
	stop = func() {
		syscall.Kill(-c.Process.Pid, syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			o.t.Errorf("%s: %q did not end on ^C", l.where, l.cmd)
		}
		cancel()
		<-done
		o.t.Logf("%s, as pi, until ^C:\n$ %s\n%s", l.where, l.raw, buf.String())
	}
	return buf.String, stop
}

// lockedBuffer is a bytes.Buffer for a writer and readers on other
// goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func (b *lockedBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Len()
}

// service starts and stops a unit of the copy as systemd does. There is
// no systemd in the copy (its PID 1 is the test), so the test reads the
// unit file systemd would load and carries out these of its [Service]
// directives: Type= (simple, notify: started once READY=1 arrives on
// $NOTIFY_SOCKET), ExecStartPre=, ExecStart=, User=, Group= and
// SupplementaryGroups= (with the user's own groups, as initgroups gives
// them), WorkingDirectory=, StateDirectory= and StateDirectoryMode=,
// UMask=, Environment=, WatchdogSec= ($WATCHDOG_USEC; a gap between
// WATCHDOG=1 pings longer than it fails the test, as systemd would kill
// the service), TimeoutStartSec=, KillSignal= and TimeoutStopSec=. Standard
// output and error go to one pipe standing for the journal, named by
// $JOURNAL_STREAM as journald's stream is. Every other directive (the
// sandboxing: ProtectSystem=, SystemCallFilter=, IPAddressDeny=,
// DevicePolicy=, NoNewPrivileges=, …; Restart=) is not carried out: the
// test logs them.
type service struct {
	t       *testing.T
	name    string
	d       map[string][]string
	cmd     *exec.Cmd
	journal *lockedBuffer
	mark    int // the journal's length at the last start
	notify  *notifySocket
	ready   time.Time
	done    chan struct{}
	// logFiles are where the service logs besides the journal (mosquitto:
	// log_dest file), shown with its journal.
	logFiles []string
	after    []string // [Unit] After=
}

// applied are the directives service carries out; starting a unit logs
// the others.
var applied = map[string]bool{"Type": true, "ExecStartPre": true, "ExecStart": true, "User": true, "Group": true,
	"SupplementaryGroups": true, "WorkingDirectory": true, "StateDirectory": true, "StateDirectoryMode": true,
	"UMask": true, "Environment": true, "WatchdogSec": true, "TimeoutStartSec": true, "KillSignal": true,
	"TimeoutStopSec": true, "NotifyAccess": true}

// loadService reads the unit file systemd would load for name.
func loadService(t *testing.T, name string) *service {
	t.Helper()
	if _, err := os.Stat("/etc/systemd/system/" + name + ".d"); err == nil {
		t.Fatalf("%s has drop-ins, which the test does not apply", name)
	}
	var text []byte
	for _, dir := range []string{"/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system", "/usr/lib/systemd/system"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
			text = b
			t.Logf("%s: %s", name, filepath.Join(dir, name))
			break
		}
	}
	if text == nil {
		t.Fatalf("no unit file %s", name)
	}
	s := &service{t: t, name: name, d: map[string][]string{}, journal: &lockedBuffer{}}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(text))
	var cont string
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cont != "" {
			line = cont + " " + line
			cont = ""
		}
		if strings.HasSuffix(line, "\\") {
			cont = strings.TrimSuffix(line, "\\")
			continue
		}
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			section = line
		case section == "[Unit]" && strings.HasPrefix(line, "After="):
			s.after = append(s.after, strings.Fields(strings.TrimPrefix(line, "After="))...)
		case section == "[Service]":
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s: odd line %q", name, line)
			}
			if v == "" {
				delete(s.d, k) // an empty assignment resets a list
				continue
			}
			s.d[k] = append(s.d[k], v)
		}
	}
	var ignored []string
	for k := range s.d {
		if !applied[k] {
			ignored = append(ignored, k)
		}
	}
	slices.Sort(ignored)
	t.Logf("%s: not carried out (no systemd in the copy): %s", name, strings.Join(ignored, " "))
	return s
}

// one is a directive's last value ("" when unset).
func (s *service) one(k string) string {
	if v := s.d[k]; len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// seconds is a time span directive as systemd writes them: 30, 30s, 90s,
// 5min, 500ms.
func (s *service) seconds(k string, def time.Duration) time.Duration {
	v := s.one(k)
	if v == "" {
		return def
	}
	if n, err := strconv.Atoi(v); err == nil {
		return time.Duration(n) * time.Second
	}
	d, err := time.ParseDuration(strings.Replace(v, "min", "m", 1))
	if err != nil {
		s.t.Fatalf("%s: %s=%s: %v", s.name, k, v, err)
	}
	return d
}

// execLine splits an Exec*= line as systemd does (quotes, no $VAR or %
// specifier expansion, which the test's units do not use), with its
// prefix: '-' lets it fail.
func (s *service) execLine(v string) (argv []string, mayFail bool) {
	s.t.Helper()
	for len(v) > 0 && strings.ContainsRune("-@:+!", rune(v[0])) {
		if v[0] != '-' {
			s.t.Fatalf("%s: the exec prefix %q is not carried out by the test", s.name, v[0])
		}
		mayFail = true
		v = v[1:]
	}
	if strings.ContainsAny(v, "$%") {
		s.t.Fatalf("%s: %q needs expansion, which the test does not do", s.name, v)
	}
	argv, err := shellWords(v)
	if err != nil || len(argv) == 0 || !filepath.IsAbs(argv[0]) {
		s.t.Fatalf("%s: cannot run %q: %v", s.name, v, err)
	}
	return argv, mayFail
}

// shellWords splits a command line on blanks, with '…' and "…" quoting
// and backslash escapes.
func shellWords(s string) ([]string, error) {
	var out []string
	var w strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote == '\'':
			w.WriteByte(c)
		case c == '\\' && i+1 < len(s):
			i++
			w.WriteByte(s[i])
			in = true
		case quote != 0:
			w.WriteByte(c)
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				out = append(out, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteByte(c)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unclosed %c", quote)
	}
	if in {
		out = append(out, w.String())
	}
	return out, nil
}

// start starts the unit as systemctl start does, and returns once it is
// started (Type=notify: READY=1).
func (s *service) start() {
	t := s.t
	t.Helper()
	if s.cmd != nil {
		t.Fatalf("%s is running already", s.name)
	}
	user := account{name: "root", home: "/root", shell: "/bin/sh", groups: []uint32{0}}
	if u := s.one("User"); u != "" {
		user = lookupAccount(t, u)
	}
	if g := s.one("Group"); g != "" {
		user.gid = groupID(t, g)
		user.groups = append(user.groups, user.gid)
	}
	for _, line := range s.d["SupplementaryGroups"] {
		for _, g := range strings.Fields(line) {
			user.groups = append(user.groups, groupID(t, g))
		}
	}
	var mode uint64 = 0o755
	if m := s.one("StateDirectoryMode"); m != "" {
		mode, _ = strconv.ParseUint(m, 8, 32)
	}
	var env []string
	for _, line := range s.d["StateDirectory"] {
		for _, d := range strings.Fields(line) {
			p := filepath.Join("/var/lib", d)
			if err := os.MkdirAll(p, os.FileMode(mode)); err != nil {
				t.Fatal(err)
			}
			os.Chown(p, int(user.uid), int(user.gid))
			os.Chmod(p, os.FileMode(mode))
			env = append(env, "STATE_DIRECTORY="+p)
		}
	}
	umask := 0o022
	if m := s.one("UMask"); m != "" {
		u, _ := strconv.ParseUint(m, 8, 32)
		umask = int(u)
	}
	wd := s.one("WorkingDirectory")
	if wd == "" {
		wd = "/"
	}
	id := make([]byte, 16)
	rand.Read(id)
	env = append(env, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin", "LANG=C.UTF-8", "INVOCATION_ID="+hex.EncodeToString(id))
	if s.one("User") != "" {
		env = append(env, "USER="+user.name, "LOGNAME="+user.name, "HOME="+user.home, "SHELL="+user.shell)
	}
	for _, line := range s.d["Environment"] {
		words, err := shellWords(line)
		if err != nil {
			t.Fatal(err)
		}
		env = append(env, words...)
	}
	notify := s.one("Type") == "notify"
	if notify {
		s.notify = newNotifySocket(t, s.name)
		env = append(env, "NOTIFY_SOCKET="+s.notify.path)
	}
	if w := s.seconds("WatchdogSec", 0); w > 0 {
		// systemd also sets WATCHDOG_PID to the main process's PID, which
		// is not known before it is started; without it the watchdog is
		// the process's all the same (sd_watchdog_enabled).
		env = append(env, fmt.Sprintf("WATCHDOG_USEC=%d", w.Microseconds()))
	}
	// The journal: standard output and error on one stream, which
	// $JOURNAL_STREAM names (device:inode) as journald's does.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	syscall.Fstat(int(w.Fd()), &st)
	env = append(env, fmt.Sprintf("JOURNAL_STREAM=%d:%d", st.Dev, st.Ino))
	s.mark = s.journal.Len()
	copied := make(chan struct{})
	go func() { io.Copy(s.journal, r); r.Close(); close(copied) }()

	newCmd := func(argv []string) *exec.Cmd {
		c := exec.Command(argv[0], argv[1:]...)
		c.Env, c.Dir, c.Stdout, c.Stderr = env, wd, w, w
		c.SysProcAttr = &syscall.SysProcAttr{Credential: user.cred(), Setsid: true}
		return c
	}
	old := syscall.Umask(umask)
	defer syscall.Umask(old)
	for _, v := range s.d["ExecStartPre"] {
		argv, mayFail := s.execLine(v)
		if err := newCmd(argv).Run(); err != nil && !mayFail {
			t.Fatalf("%s: ExecStartPre=%s: %v\n%s", s.name, v, err, s.journal.String()[s.mark:])
		}
	}
	if fi, err := os.Stat(wd); err != nil || !fi.IsDir() {
		t.Fatalf("%s: WorkingDirectory=%s: %v (systemd fails the start: status=200/CHDIR)", s.name, wd, err)
	}
	argv, _ := s.execLine(s.one("ExecStart"))
	c := newCmd(argv)
	begun := time.Now()
	if err := c.Start(); err != nil {
		t.Fatalf("%s: ExecStart=%s: %v (systemd fails the start: status=200/CHDIR, 203/EXEC, …)", s.name, s.one("ExecStart"), err)
	}
	s.cmd = c
	w.Close()
	s.done = make(chan struct{})
	go func() { s.cmd.Wait(); <-copied; close(s.done) }()
	if !notify {
		s.ready = time.Now()
		return
	}
	timeout := min(s.seconds("TimeoutStartSec", 90*time.Second), 60*time.Second)
	select {
	case <-s.notify.ready:
		s.ready = time.Now()
		t.Logf("%s: started (READY=1 after %v), PID %d", s.name, s.ready.Sub(begun).Round(time.Millisecond), s.cmd.Process.Pid)
	case <-s.done:
		t.Fatalf("%s exited before it was ready (%v):\n%s", s.name, s.cmd.ProcessState, s.log())
	case <-time.After(timeout):
		t.Fatalf("%s: no READY=1 within %v:\n%s", s.name, timeout, s.log())
	}
}

// log is the journal since the last start, and the end of each file in
// logFiles (where a service logs besides the journal).
func (s *service) log() string {
	l := s.journal.String()[s.mark:]
	for _, f := range s.logFiles {
		b, err := os.ReadFile(f)
		if err == nil {
			l += fmt.Sprintf("%s:\n%s", f, b[max(0, len(b)-4096):])
		}
	}
	return l
}

// waitLog waits until the journal since the last start holds want, and
// returns it.
func (s *service) waitLog(want string) string {
	s.t.Helper()
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if l := s.log(); strings.Contains(l, want) || time.Now().After(end) {
			return l
		}
	}
}

// stop stops the unit as systemctl stop does: KillSignal=, then
// TimeoutStopSec= before SIGKILL, which fails the test, as a main process
// that does not exit cleanly does.
func (s *service) stop() {
	t := s.t
	t.Helper()
	if s.cmd == nil {
		return
	}
	sig := syscall.SIGTERM
	if k := s.one("KillSignal"); k != "" && k != "SIGTERM" {
		t.Fatalf("%s: KillSignal=%s is not carried out by the test", s.name, k)
	}
	stopped := time.Now()
	s.cmd.Process.Signal(sig)
	timeout := min(s.seconds("TimeoutStopSec", 90*time.Second), 30*time.Second)
	select {
	case <-s.done:
	case <-time.After(timeout):
		s.cmd.Process.Kill()
		<-s.done
		t.Errorf("%s did not stop within %v of SIGTERM:\n%s", s.name, timeout, s.log())
	}
	// systemd takes exit 0 and death by SIGHUP, SIGINT, SIGTERM or
	// SIGPIPE as a clean stop.
	ws := s.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !(ws.Exited() && ws.ExitStatus() == 0) && !(ws.Signaled() && slices.Contains([]syscall.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGPIPE}, ws.Signal())) {
		t.Errorf("%s stopped uncleanly: %v\n%s", s.name, s.cmd.ProcessState, s.log())
	}
	if wd := s.seconds("WatchdogSec", 0); wd > 0 {
		if gap := s.notify.longestGap(s.ready, stopped); gap >= wd {
			t.Errorf("%s: %v without WATCHDOG=1 (WatchdogSec=%v): systemd would have killed it", s.name, gap, wd)
		}
	}
	t.Logf("%s: stopped after %v (%v)", s.name, time.Since(stopped).Round(time.Millisecond), s.cmd.ProcessState)
	s.cmd = nil
}

// restart is systemctl restart.
func (s *service) restart() {
	s.t.Helper()
	s.stop()
	s.start()
}

// restartUnits is systemctl restart of several units at once: systemd
// orders the jobs by After=, stopping a unit before the units it is
// ordered after (a restart is a stop until it is patched to a start) and
// starting it after them.
func restartUnits(t *testing.T, units ...*service) {
	t.Helper()
	ordered := slices.Clone(units)
	slices.SortStableFunc(ordered, func(a, b *service) int {
		switch {
		case slices.Contains(a.after, b.name):
			return 1
		case slices.Contains(b.after, a.name):
			return -1
		}
		return 0
	})
	for i := len(ordered) - 1; i >= 0; i-- {
		ordered[i].stop()
	}
	for _, u := range ordered {
		u.start()
	}
}

// notifySocket is a $NOTIFY_SOCKET as systemd's: it keeps every state line
// sent to it, and when.
type notifySocket struct {
	path     string
	ready    chan struct{}
	mu       sync.Mutex
	watchdog []time.Time
	once     sync.Once
}

func newNotifySocket(t *testing.T, unit string) *notifySocket {
	t.Helper()
	dir := "/run/install-path-test"
	os.MkdirAll(dir, 0o755)
	path := filepath.Join(dir, unit+".notify")
	os.Remove(path)
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o777) // as systemd's /run/systemd/notify: any service user may send
	n := &notifySocket{path: path, ready: make(chan struct{})}
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return
			}
			for _, l := range strings.Split(strings.TrimSpace(string(buf[:k])), "\n") {
				switch l {
				case "READY=1":
					n.once.Do(func() { close(n.ready) })
				case "WATCHDOG=1":
					n.mu.Lock()
					n.watchdog = append(n.watchdog, time.Now())
					n.mu.Unlock()
				}
			}
		}
	}()
	t.Cleanup(func() { conn.Close() })
	return n
}

// longestGap is the longest time between from and to without a WATCHDOG=1.
func (n *notifySocket) longestGap(from, to time.Time) time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	longest, last := time.Duration(0), from
	for _, at := range append(slices.Clone(n.watchdog), to) {
		if at.Before(from) {
			continue
		}
		longest = max(longest, at.Sub(last))
		last = at
	}
	return longest
}
