package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/credentials"
	"github.com/saga-supervisor/saga-supervisor/daemon/brokerauth"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt/access"
)

// confDName is the file --conf-d writes: Debian's mosquitto.conf loads
// every *.conf of /etc/mosquitto/conf.d (include_dir).
const confDName = "saga.conf"

// runMosquittoConfig writes what an external mosquitto needs to enforce the
// same rules as the embedded broker: the password file (logins the config
// needs, added if missing) and the ACL, given to the user mosquitto runs
// as; a mosquitto.conf that uses them, or the same settings as a conf.d
// snippet; and each login's clear password in the config's
// credentials_dir, where the supervisor, ctl and `credentials` read it.
func runMosquittoConfig(args []string, w io.Writer) error {
	fs := cli.NewFlags("mosquitto-config")
	cfgPath := fs.String("config", "", "the supervisor's configuration (default: the embedded default)")
	out := fs.String("out", "", "directory to write mosquitto's passwd and saga.acl (and mosquitto.conf, without --conf-d) into (required)")
	confD := fs.String("conf-d", "", "write the conf as DIR/"+confDName+" instead of OUT/mosquitto.conf: for a mosquitto whose own conf loads DIR (Debian: /etc/mosquitto/conf.d)")
	credsFlag := fs.String("credentials", "", "where to write each login's clear password (default: the config's mqtt.auth.credentials_dir, under its state_dir)")
	mosqUser := fs.String("mosquitto-user", "mosquitto", "as root, give passwd and saga.acl to this user (and OUT to its group): the user mosquitto reads them as (Debian's drops to mosquitto); \"\" leaves them root's")
	listen := fs.String("listen", "127.0.0.1:1883", "the plain listener's address (host:port); \"\" for none (TLS only)")
	tlsPort := fs.Int("tls-port", 0, "also write a TLS listener on this port (needs --tls-cert and --tls-key)")
	tlsCert := fs.String("tls-cert", "", "the broker's certificate (PEM), for --tls-port")
	tlsKey := fs.String("tls-key", "", "the broker's private key (PEM), for --tls-port")
	if err := fs.Parse(args); err != nil {
		return cli.Exit(2, "%v", err)
	}
	if *out == "" {
		return cli.Exit(2, "mosquitto-config: --out DIR is required")
	}
	if fs.NArg() > 0 {
		return cli.Exit(2, "mosquitto-config: unexpected argument %q", fs.Arg(0))
	}
	if (*tlsPort != 0) != (*tlsCert != "" && *tlsKey != "") {
		return cli.Exit(2, "mosquitto-config: --tls-port, --tls-cert and --tls-key go together")
	}
	cfg := config.Default()
	if *cfgPath != "" {
		// The layout only: the supervisor's password file may not exist
		// yet — this command writes it.
		data, err := os.ReadFile(*cfgPath)
		if err != nil {
			return cli.Exit(2, "mosquitto-config: --config: %w", credentials.Unreadable(*cfgPath, "", err))
		}
		if cfg, err = config.ParseLayout(data, *cfgPath); err != nil {
			return cli.Exit(1, "%v", err)
		}
	}
	pol := brokerauth.Policy(cfg)
	if err := pol.Validate(); err != nil {
		return cli.Exit(1, "%v", err)
	}
	// Who mosquitto reads its files as: as root, the --mosquitto-user;
	// otherwise the files are the caller's, and so must mosquitto be.
	var mosq *user.User
	if os.Geteuid() == 0 && *mosqUser != "" {
		u, err := user.Lookup(*mosqUser)
		if err != nil {
			return cli.Exit(1, "mosquitto-config: --mosquitto-user %s: %v: install mosquitto first (sudo apt install mosquitto), or name the user it runs as (\"\" leaves the files root's)", *mosqUser, err)
		}
		mosq = u
	}
	if *confD != "" {
		if st, err := os.Stat(*confD); err != nil || !st.IsDir() {
			return cli.Exit(1, "mosquitto-config: --conf-d %s: %v: the directory mosquitto's own conf loads (Debian's: include_dir /etc/mosquitto/conf.d) must exist; is mosquitto installed?",
				*confD, cli.ErrOr(err, "not a directory"))
		}
	}

	dir, err := filepath.Abs(*out)
	if err != nil {
		return fmt.Errorf("mosquitto-config: --out %s: %w", *out, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("mosquitto-config: --out: %w", err)
	}
	credsDir := cfg.MQTT.Auth.CredentialsDir
	if *credsFlag != "" {
		credsDir = *credsFlag
	}
	creds, err := filepath.Abs(credsDir)
	if err != nil {
		return fmt.Errorf("mosquitto-config: credentials dir %s: %w", credsDir, err)
	}
	logins := brokerauth.Logins(cfg)
	var files []string
	for _, l := range logins {
		files = append(files, filepath.Join(creds, l.Name))
	}
	plan, err := credentials.NewPlan(creds, files...)
	if err != nil {
		return cli.Exit(1, "mosquitto-config: credentials_dir %s: %v", creds, err)
	}
	copied, err := adoptOldCredentials(filepath.Join(dir, "credentials"), creds, logins)
	if err != nil {
		return cli.Exit(1, "mosquitto-config: %v", err)
	}
	passwd, acl := filepath.Join(dir, "passwd"), filepath.Join(dir, "saga.acl")
	added, err := access.EnsureLogins(passwd, creds, logins)
	if err != nil {
		return cli.Exit(1, "mosquitto-config: %v", err)
	}
	if err := plan.Apply(); err != nil {
		return cli.Exit(1, "mosquitto-config: %v", err)
	}
	if err := os.WriteFile(acl, []byte(generatedFrom(*cfgPath)+pol.MosquittoACL()), 0o600); err != nil {
		return fmt.Errorf("mosquitto-config: %w", err)
	}
	if err := os.Chmod(acl, 0o600); err != nil { // an older, looser file keeps its mode through WriteFile
		return fmt.Errorf("mosquitto-config: %w", err)
	}
	if mosq != nil {
		if err := giveToMosquitto(mosq, dir, passwd, acl); err != nil {
			return cli.Exit(1, "mosquitto-config: %v", err)
		}
	}
	// The conf holds no secret, only where the secrets are: readable by
	// all, as mosquitto's own, so that mosquitto, which has dropped to its
	// user by then, reads it again on a reload (SIGHUP).
	conf := generatedFrom(*cfgPath) + brokerauth.MosquittoConf(cfg, passwd, acl, *listen, *tlsPort, *tlsCert, *tlsKey)
	confPath := filepath.Join(dir, "mosquitto.conf")
	if *confD != "" {
		confPath = filepath.Join(*confD, confDName)
	}
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return fmt.Errorf("mosquitto-config: %w", err)
	}
	if err := os.Chmod(confPath, 0o644); err != nil {
		return fmt.Errorf("mosquitto-config: %w", err)
	}

	owner := "you (mosquitto must run as you to read them)"
	if mosq != nil {
		owner = mosq.Username
	} else if os.Geteuid() == 0 {
		owner = "root (--mosquitto-user \"\")"
	}
	fmt.Fprintf(w, "wrote %s and %s (mode 0600, owner %s), %s\n", passwd, acl, owner, confPath)
	if len(copied) > 0 {
		fmt.Fprintf(w, "copied the passwords of %s from %s (an older mosquitto-config's place) to %s\n",
			strings.Join(copied, ", "), filepath.Join(dir, "credentials"), creds)
	}
	credOwner := "yours"
	if base, uid, _ := plan.Owner(); os.Geteuid() == 0 {
		credOwner = "owned like " + base + " (uid " + strconv.Itoa(uid) + ")"
	}
	if len(added) > 0 {
		fmt.Fprintf(w, "new logins: %s\n", strings.Join(added, ", "))
	}
	fmt.Fprintf(w, "each login's password is in %s/<login> (mode 0600, %s): saga-supervisor credentials -h\n", creds, credOwner)
	if *confD != "" {
		fmt.Fprintf(w, "mosquitto's own conf must load %s (Debian's /etc/mosquitto/mosquitto.conf has include_dir /etc/mosquitto/conf.d)\n", *confD)
	} else {
		fmt.Fprintf(w, "run: mosquitto -c %s\n", confPath)
	}
	fmt.Fprintf(w, "the supervisor logs in with, in its config:\n  mqtt:\n    username: %s\n    password_file: %s\n",
		pol.Supervisor, filepath.Join(creds, pol.Supervisor))
	if cfg.MQTT.Embedded() {
		fmt.Fprintf(w, "    broker: tcp://%s   (instead of embedded)\n    listen: \"\"   (no embedded broker)\n", *listen)
	}
	switch {
	case *confD == "":
	case cfg.MQTT.Embedded():
		// The running supervisor's embedded broker holds the port until
		// it stops: mosquitto restarted alone fails to bind. The unit is
		// ordered after mosquitto.service, so one restart of both stops
		// the supervisor first and starts it once mosquitto is up.
		fmt.Fprintf(w, "then: sudo systemctl restart mosquitto saga-supervisor   (the supervisor stops first: its embedded broker holds the port)\n")
	default:
		fmt.Fprintf(w, "then: sudo systemctl restart mosquitto\n")
	}
	return nil
}

// giveToMosquitto gives passwd and acl to mosquitto's user and group (mode
// 0600: mosquitto reads them after dropping to that user, and from 2.0.16
// warns about a file it does not own or that others may read), and lets
// that group into dir if no one but its owner could enter it.
func giveToMosquitto(mosq *user.User, dir string, files ...string) error {
	uid, err1 := strconv.Atoi(mosq.Uid)
	gid, err2 := strconv.Atoi(mosq.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("user %s: %w", mosq.Username, err)
	}
	for _, f := range files {
		if err := os.Chown(f, uid, gid); err != nil {
			return fmt.Errorf("giving %s to %s: %w", f, mosq.Username, err)
		}
	}
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	s, ok := st.Sys().(*syscall.Stat_t)
	perm := st.Mode().Perm()
	if !ok || int(s.Uid) == uid && perm&0o100 != 0 || int(s.Gid) == gid && perm&0o010 != 0 || perm&0o001 != 0 {
		return nil
	}
	if err := os.Chown(dir, -1, gid); err != nil {
		return fmt.Errorf("letting %s into %s: %w", mosq.Username, dir, err)
	}
	if err := os.Chmod(dir, perm|0o050); err != nil {
		return fmt.Errorf("letting %s into %s: %w", mosq.Username, dir, err)
	}
	return nil
}

// adoptOldCredentials copies the passwords an older mosquitto-config wrote
// under OUT/credentials into the config's credentials dir, where they are
// read now, for the logins that have none there yet: their users are in
// the password file already and would otherwise get no clear password at
// all. The copies keep mode 0600. It returns the logins copied.
func adoptOldCredentials(old, creds string, logins []access.Login) ([]string, error) {
	if filepath.Clean(old) == filepath.Clean(creds) {
		return nil, nil
	}
	var copied []string
	for _, l := range logins {
		src, dst := filepath.Join(old, l.Name), filepath.Join(creds, l.Name)
		if _, err := os.Lstat(dst); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		pw, err := access.ReadSecret(src)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return copied, fmt.Errorf("the older password of %s: %w", l.Name, err)
		}
		if err := os.MkdirAll(creds, 0o700); err != nil {
			return copied, fmt.Errorf("credentials: %w", err)
		}
		f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return copied, fmt.Errorf("credentials: %w", err)
		}
		_, err = f.WriteString(pw + "\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return copied, fmt.Errorf("credentials %s: %w", dst, err)
		}
		copied = append(copied, l.Name)
	}
	return copied, nil
}

// generatedFrom is the first line of the ACL and the conf: the config they
// were written from, as given on the command line, so that a copy found
// later (configs/mosquitto.acl) names the file it must agree with.
func generatedFrom(cfgPath string) string {
	if cfgPath == "" {
		return "# Written by saga-supervisor mosquitto-config from the embedded default config: do not edit.\n"
	}
	return "# Written by saga-supervisor mosquitto-config --config " + cfgPath + ": edit that file and run it again, not this one.\n"
}
