package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/daemon/brokerauth"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt/access"
)

// runMosquittoConfig writes what an external mosquitto needs to enforce the
// same rules as the embedded broker: the password file (logins the config
// needs, added if missing), their clear passwords for distribution, the
// ACL, and a mosquitto.conf that uses them.
func runMosquittoConfig(args []string, w io.Writer) error {
	fs := cli.NewFlags("mosquitto-config")
	cfgPath := fs.String("config", "", "the supervisor's configuration (default: the embedded default)")
	out := fs.String("out", "", "directory to write passwd, saga.acl, mosquitto.conf and credentials/ into (required)")
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
	if (*tlsPort != 0) != (*tlsCert != "" && *tlsKey != "") {
		return cli.Exit(2, "mosquitto-config: --tls-port, --tls-cert and --tls-key go together")
	}
	cfg := config.Default()
	if *cfgPath != "" {
		// The layout only: the supervisor's password file may not exist
		// yet — this command writes it.
		data, err := os.ReadFile(*cfgPath)
		if err != nil {
			return cli.Exit(2, "%v", err)
		}
		if cfg, err = config.ParseLayout(data, *cfgPath); err != nil {
			return cli.Exit(1, "%v", err)
		}
	}
	pol := brokerauth.Policy(cfg)
	if err := pol.Validate(); err != nil {
		return cli.Exit(1, "%v", err)
	}
	if err := os.MkdirAll(*out, 0o700); err != nil {
		return err
	}
	dir, err := filepath.Abs(*out)
	if err != nil {
		return err
	}
	passwd, creds, acl := filepath.Join(dir, "passwd"), filepath.Join(dir, "credentials"), filepath.Join(dir, "saga.acl")
	added, err := access.EnsureLogins(passwd, creds, brokerauth.Logins(cfg))
	if err != nil {
		return cli.Exit(1, "%v", err)
	}
	if err := os.WriteFile(acl, []byte(generatedFrom(*cfgPath)+pol.MosquittoACL()), 0o600); err != nil {
		return err
	}
	conf := generatedFrom(*cfgPath) + brokerauth.MosquittoConf(cfg, passwd, acl, *listen, *tlsPort, *tlsCert, *tlsKey)
	if err := os.WriteFile(filepath.Join(dir, "mosquitto.conf"), []byte(conf), 0o600); err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote %s/{mosquitto.conf,passwd,saga.acl}\n", dir)
	if len(added) > 0 {
		fmt.Fprintf(w, "new logins: %s; their passwords are in %s/<user> (mode 0600)\n", strings.Join(added, ", "), creds)
	}
	fmt.Fprintf(w, "run: mosquitto -c %s\n", filepath.Join(dir, "mosquitto.conf"))
	fmt.Fprintf(w, "the supervisor logs in with, in its config:\n  mqtt:\n    username: %s\n    password_file: %s\n",
		pol.Supervisor, filepath.Join(creds, pol.Supervisor))
	if cfg.MQTT.Embedded() {
		fmt.Fprintf(w, "    broker: tcp://%s   (instead of embedded)\n", *listen)
	}
	return nil
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
