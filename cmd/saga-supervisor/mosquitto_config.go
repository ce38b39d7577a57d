package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/saga-supervisor/saga-supervisor/internal/brokerauth"
	"github.com/saga-supervisor/saga-supervisor/internal/cli"
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
	if err := os.WriteFile(acl, []byte(pol.MosquittoACL()), 0o600); err != nil {
		return err
	}
	conf := mosquittoConf(cfg, passwd, acl, *listen, *tlsPort, *tlsCert, *tlsKey)
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

// mosquittoConf is the mosquitto.conf the files above need. mosquitto
// reads files as its own user (mosquitto on Debian): chown them to it.
func mosquittoConf(cfg *config.Config, passwd, acl, listen string, tlsPort int, cert, key string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# mosquitto for saga-supervisor %s (device %s), written by\n", brokerauth.Supervisor(cfg), cfg.Device)
	b.WriteString("# `saga-supervisor mosquitto-config`. The files it names are the robot's\n")
	b.WriteString("# secrets: mode 0600, owned by the user mosquitto runs as.\n")
	b.WriteString("per_listener_settings false\n")
	if listen != "" {
		if host, port, ok := strings.Cut(listen, ":"); ok && !strings.Contains(port, ":") {
			fmt.Fprintf(&b, "# Plain MQTT on %s only: passwords cross this listener in clear.\nlistener %s %s\n", host, port, host)
		}
	}
	if tlsPort != 0 {
		fmt.Fprintf(&b, "# MQTT over TLS, for controllers on other machines.\nlistener %d\ncertfile %s\nkeyfile %s\ntls_version tlsv1.2\n", tlsPort, cert, key)
	} else {
		b.WriteString("# For controllers on other machines, add a TLS listener (and give them\n")
		b.WriteString("# ssl://host:8883), e.g.:\n#   listener 8883\n#   certfile /etc/mosquitto/certs/robot.crt\n")
		b.WriteString("#   keyfile /etc/mosquitto/certs/robot.key\n#   tls_version tlsv1.2\n")
	}
	b.WriteString("# Every client logs in; its client id is its username, so no one can\n")
	b.WriteString("# take over another's session (or the supervisor's).\n")
	b.WriteString("allow_anonymous false\nuse_username_as_clientid true\n")
	fmt.Fprintf(&b, "password_file %s\nacl_file %s\n", passwd, acl)
	b.WriteString("# Replies go out at once (no Nagle delay).\nset_tcp_nodelay true\n")
	fmt.Fprintf(&b, "# No packet larger than the supervisor's max_payload and a header.\nmax_packet_size %d\n", int(cfg.MQTT.MaxPayload)+1024)
	b.WriteString("# Bounded queues per client: a flood cannot grow the broker without end.\n")
	b.WriteString("max_queued_messages 10000\nmax_inflight_messages 1024\n")
	b.WriteString("# Sessions of clients that left are dropped after a day.\npersistent_client_expiration 1d\n")
	b.WriteString("persistence false\n")
	return b.String()
}
