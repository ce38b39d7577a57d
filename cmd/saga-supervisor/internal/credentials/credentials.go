// Package credentials is `saga-supervisor credentials`: the clear
// passwords of the broker logins a config needs — where each is, showing
// one to whoever may already read it, and handing one agent's to one Unix
// user — and the rules the commands that read or write those files share:
// why a file cannot be read (Unreadable), and who owns the files written
// into another user's directory (Plan).
//
// The passwords live in mqtt.auth.credentials_dir (under state_dir),
// written by the embedded broker at its first start or by
// mosquitto-config: files of mode 0600 in a directory of mode 0700, owned
// by the user the supervisor runs as. Nothing here widens a mode: a
// password leaves that directory only as a new 0600 file of one named
// user.
package credentials

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/daemon/brokerauth"
	"github.com/saga-supervisor/saga-supervisor/internal/secretfile"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt/access"
)

const helpText = `usage: saga-supervisor credentials OP [--config FILE] [args]

The clear passwords of the MQTT logins the config needs, in its
mqtt.auth.credentials_dir (relative to state_dir): written by the embedded
broker at its first start, or by mosquitto-config for an external broker;
mode 0600 in a directory of mode 0700, owned by the supervisor's user (saga
under the shipped unit).

OPs:
  list                         every login, its file and whether it is there
                               (no password is printed)
  show LOGIN                   print LOGIN's password. Only for a user who can
                               already read the file: root, or the file's owner
                               (sudo -u saga ...); anyone else is refused with
                               the file, its mode and its owner
  export LOGIN --to FILE --owner USER
                               copy LOGIN's password to FILE, mode 0600, owned
                               by USER (and USER's group): how a controller
                               running as USER gets its password. As root
                               (unless USER is you); FILE's directory must
                               exist; an existing FILE is replaced. The
                               supervisor's own login is not exported

--config FILE is the supervisor's config (default: the embedded default;
/etc/saga-supervisor/config.yaml under systemd).

Exit status: 0 ok, 1 refused or failed, 2 usage.

Flags:
`

// Run is `saga-supervisor credentials`.
func Run(args []string, w io.Writer) error {
	fs := cli.NewFlags("credentials")
	fs.SetOutput(io.Discard)
	cfgPath := fs.String("config", "", "the supervisor's config file (default: the embedded default)")
	to := fs.String("to", "", "export: the file to write")
	owner := fs.String("owner", "", "export: the user the file is given to")
	pos, err := parseAnyOrder(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(w, helpText)
			fs.SetOutput(w)
			fs.PrintDefaults()
			return err
		}
		return usage("%v", err)
	}
	if len(pos) == 0 {
		return usage("no OP given: list, show or export")
	}
	op, pos := pos[0], pos[1:]
	want := map[string]int{"list": 0, "show": 1, "export": 1}
	n, ok := want[op]
	switch {
	case !ok:
		return usage("unknown OP %q: list, show or export", op)
	case len(pos) != n:
		return usage("%s takes %d argument(s), the login; got %q", op, n, pos)
	case op != "export" && (*to != "" || *owner != ""):
		return usage("%s: --to and --owner are for export", op)
	case op == "export" && (*to == "" || *owner == ""):
		return usage("export: give --to FILE and --owner USER")
	}
	cfg, source, err := load(*cfgPath)
	if err != nil {
		return err
	}
	pol := brokerauth.Policy(cfg)
	logins := brokerauth.Logins(cfg)
	dir := cfg.MQTT.Auth.CredentialsDir
	if op == "list" {
		return list(w, source, dir, logins)
	}
	login := pos[0]
	if !slices.ContainsFunc(logins, func(l access.Login) bool { return l.Name == login }) {
		var names []string
		for _, l := range logins {
			names = append(names, l.Name)
		}
		return usage("%s: no login %q in %s (its logins: %s)", op, login, source, strings.Join(names, ", "))
	}
	var dst *target
	if op == "export" {
		if login == pol.Supervisor {
			return cli.Exit(1, "export: %s is the supervisor's own login (it also logs in as %s%s and %s%s): it stays with the supervisor; export an agent's",
				login, login, access.EstopSuffix, login, access.DevicesSuffix)
		}
		if dst, err = newTarget(login, *to, *owner); err != nil {
			return err
		}
	}
	path := filepath.Join(dir, login)
	pw, err := secretfile.Read(path)
	if err != nil {
		return cli.Exit(1, "%s %s: %w", op, login, Unreadable(path, login, err))
	}
	if op == "show" {
		_, err := fmt.Fprintln(w, pw)
		return err
	}
	return dst.write(w, login, pw)
}

func usage(format string, args ...any) error {
	return cli.Exit(2, format+" (saga-supervisor credentials -h for help)", args...)
}

// parseAnyOrder parses args with fs, taking flags and positional arguments
// in any order.
func parseAnyOrder(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos, args = append(pos, args[0]), args[1:]
	}
}

// load reads the config's layout (its secret files are not read): the
// embedded default for "".
func load(path string) (*config.Config, string, error) {
	if path == "" {
		return config.Default(), "the embedded default config", nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", cli.Exit(2, "--config: %w", Unreadable(path, "", err))
	}
	cfg, err := config.ParseLayout(data, path)
	if err != nil {
		return nil, "", cli.Exit(2, "--config: %w", err)
	}
	return cfg, path, nil
}

// list prints each login, its usernames and its file's state.
func list(w io.Writer, source, dir string, logins []access.Login) error {
	fmt.Fprintf(w, "logins of %s, their passwords in %s:\n", source, dir)
	for _, l := range logins {
		path := filepath.Join(dir, l.Name)
		state := "present"
		st, err := os.Stat(path)
		switch {
		case err == nil:
			state = fmt.Sprintf("present, mode %04o, owner %s", st.Mode().Perm(), ownerOf(st))
		case errors.Is(err, fs.ErrNotExist):
			state = "missing: the embedded broker writes it at its first start; mosquitto-config for an external broker"
		case errors.Is(err, fs.ErrPermission):
			state = "not readable by this user: " + blocker(path)
		default:
			state = err.Error()
		}
		users := ""
		if len(l.Users) > 1 || l.Users[0] != l.Name {
			users = " (users " + strings.Join(l.Users, ", ") + ")"
		}
		fmt.Fprintf(w, "  %s%s\n    %s: %s\n", l.Name, users, path, state)
	}
	return nil
}

// target is where export writes: a file, and the user and group it is
// given to.
type target struct {
	file, owner string
	uid, gid    int
	group       string
}

// newTarget checks, before any password is read, that file can be given
// to the user named owner: the user exists, this process may give it a
// file (root, or that user itself), and file's directory exists.
func newTarget(login, file, owner string) (*target, error) {
	u, err := user.Lookup(owner)
	if err != nil {
		return nil, cli.Exit(2, "export: --owner %s: %w", owner, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return nil, cli.Exit(1, "export: --owner %s: %w", owner, err)
	}
	if os.Geteuid() != 0 && os.Geteuid() != uid {
		return nil, cli.Exit(1, "export: only root may give a file to %s: sudo saga-supervisor credentials export %s --to %s --owner %s ...", owner, login, file, owner)
	}
	if st, err := os.Stat(file); err == nil && st.IsDir() {
		return nil, cli.Exit(2, "export: --to %s is a directory: name the file to write", file)
	}
	dir := filepath.Dir(file)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, cli.Exit(1, "export: --to %s: its directory %s must exist (create it as %s, e.g. mkdir -m 700 %s): %w", file, dir, owner, dir, errOr(err, syscall.ENOTDIR))
	}
	return &target{file: file, owner: owner, uid: uid, gid: gid, group: groupName(u.Gid)}, nil
}

// write writes pw to the target file, mode 0600, owned by its user and
// that user's primary group: a temporary file in the file's directory,
// given its mode and owner through its descriptor before anything is
// written to it, then renamed over the file (a symbolic link there is
// replaced, never followed).
func (t *target) write(w io.Writer, login, pw string) error {
	f, err := os.CreateTemp(filepath.Dir(t.file), "."+filepath.Base(t.file)+".tmp*")
	if err != nil {
		return cli.Exit(1, "export: %w", err)
	}
	tmp := f.Name()
	write := func() error {
		if err := f.Chmod(0o600); err != nil {
			return err
		}
		if os.Geteuid() == 0 {
			if err := f.Chown(t.uid, t.gid); err != nil {
				return err
			}
		}
		if _, err := f.WriteString(pw + "\n"); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		return os.Rename(tmp, t.file)
	}
	if err := write(); err != nil {
		f.Close()
		os.Remove(tmp)
		return cli.Exit(1, "export: writing %s: %w", t.file, err)
	}
	fmt.Fprintf(w, "wrote %s (mode 0600, owner %s:%s): the password of login %s\n", t.file, t.owner, t.group, login)
	fmt.Fprintf(w, "as %s: saga-supervisor ctl --agent %s --password-file %s ... (the Go client: client.Options{Agent: %q, PasswordFile: %q})\n",
		t.owner, login, t.file, login, t.file)
	fmt.Fprintf(w, "after %s's password is rotated, export it again\n", login)
	return nil
}

func errOr(err, or error) error {
	if err != nil {
		return err
	}
	return or
}

// Unreadable explains err, an error reading path (the password of login,
// or "" for another file), when it is a permission error: which part of
// the path this user may not pass, its mode and owner, and how to get the
// password anyway. Other errors are returned as they are.
func Unreadable(path, login string, err error) error {
	if !errors.Is(err, fs.ErrPermission) {
		return err
	}
	hint := ""
	if login != "" {
		hint = fmt.Sprintf("; as root or the owner, `saga-supervisor credentials show %s`; for a controller running as another user, "+
			"`sudo saga-supervisor credentials export %s --to FILE --owner USER`, then --password-file FILE", login, login)
	}
	return fmt.Errorf("%w: %s%s", err, blocker(path), hint)
}

// blocker describes the innermost part of path this process can see: the
// file itself, or the directory it may not search.
func blocker(path string) string {
	me := "this user"
	if u, err := user.Current(); err == nil {
		me = u.Username
	}
	for p := path; ; p = filepath.Dir(p) {
		if st, err := os.Stat(p); err == nil {
			if p == path {
				return fmt.Sprintf("%s is mode %04o, owner %s: %s may not read it", p, st.Mode().Perm(), ownerOf(st), me)
			}
			return fmt.Sprintf("its directory %s is mode %04o, owner %s: %s may not enter it", p, st.Mode().Perm(), ownerOf(st), me)
		}
		if filepath.Dir(p) == p {
			return "no part of " + path + " can be seen"
		}
	}
}

// ownerOf is a file's owner and group, by name where they have one.
func ownerOf(st os.FileInfo) string {
	s, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return "?"
	}
	uid := strconv.FormatUint(uint64(s.Uid), 10)
	name := uid
	if u, err := user.LookupId(uid); err == nil {
		name = u.Username
	}
	return name + ":" + groupName(strconv.FormatUint(uint64(s.Gid), 10))
}

func groupName(gid string) string {
	if g, err := user.LookupGroupId(gid); err == nil {
		return g.Name
	}
	return gid
}
