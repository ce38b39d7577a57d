package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/logging"
	"github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/memtrim"
	"github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/systemd"
	"github.com/saga-supervisor/saga-supervisor/daemon"
	"github.com/saga-supervisor/saga-supervisor/daemon/brokerauth"
	"github.com/saga-supervisor/saga-supervisor/internal/buildinfo"
	"github.com/saga-supervisor/saga-supervisor/internal/promtext"
	"github.com/saga-supervisor/saga-supervisor/recovery"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
)

// ExitJournalRefused is run's exit status when the journal cannot be
// opened (recovery.ErrRefused): its file system read-only or full, its
// chain broken, records lost, another process holding it. The systemd
// unit does not restart on it (RestartPreventExitStatus=3).
const ExitJournalRefused = 3

// runRun is the daemon: the product's main job.
func runRun(args []string, w io.Writer) error {
	// The daemon is never memory-profiled. The runtime samples one
	// allocation in 512 KiB by default: a stack walk each, and during a
	// flood some hundreds of KiB of sample records and hash-table pages it
	// never gives back.
	runtime.MemProfileRate = 0
	fs := cli.NewFlags("run")
	cfgPath := fs.String("config", "", "configuration file (default: the embedded default — sim arm, in-process broker)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", logging.Auto, "how stderr's log lines look: "+logging.Formats+
		" (auto: journal — no time, each line led by its syslog priority <3>..<7> — when stderr is systemd's journal, text otherwise)")
	acceptLoss := fs.Bool("accept-journal-loss", false, "start on a journal that lost durable records (verify says LOST): the loss is journaled and the supervisor starts halted until an operator resets. Only after looking at the journal and the robot")
	if err := fs.Parse(args); err != nil {
		return cli.Exit(2, "%v", err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return cli.Exit(2, "--log-level: %v", err)
	}
	lg, err := logging.New(os.Stderr, *logFormat, level)
	if err != nil {
		return cli.Exit(2, "--log-format: %v", err)
	}

	cfg := config.Default()
	source := "the embedded default"
	if *cfgPath != "" {
		if cfg, err = config.Load(*cfgPath); err != nil {
			return cli.Exit(1, "%v", err)
		}
		source = *cfgPath
	}
	for _, warn := range cfg.Warnings() {
		lg.Warn("config: " + warn)
	}
	// A stop asked for while the daemon starts waits for the start, then
	// takes the orderly path below: unwound and parked, never the default
	// action of SIGTERM (exit at once, with sagas open and status online).
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	lg.Info("starting", "version", buildinfo.Get().Version, "config", source, "device", cfg.Device)
	// The operator token a halt is reset with, generated at the first
	// start like the MQTT logins: a halt is never a dead end.
	tokenCreated, err := daemon.EnsureResetToken(cfg)
	if err != nil {
		return cli.Exit(1, "%v", err)
	}
	if tokenCreated {
		lg.Info("operator token created", "file", cfg.HTTP.OperatorTokenFile(), "mode", "0600")
	}
	// The viewer token (http.viewer_token_file), generated the same way
	// when asked to be.
	viewerCreated, err := daemon.EnsureViewerToken(cfg)
	if err != nil {
		return cli.Exit(1, "%v", err)
	}
	if viewerCreated {
		lg.Info("viewer token created", "file", cfg.HTTP.ViewerTokenFile, "mode", "0600")
	}
	// Every saga-supervisor ctl command printed below talks to this
	// supervisor: the config it runs on, if it was given one.
	ctlCmd := "saga-supervisor ctl"
	if *cfgPath != "" {
		ctlCmd += " --config " + cli.ShellQuote(*cfgPath)
	}

	// Start-up (crash recovery) is extended past TimeoutStartSec while it
	// makes progress, and only then.
	var progress atomic.Uint64
	stopExtend := systemd.Extend(systemd.Socket, 2*time.Second, 10*time.Second, progress.Load)
	d, err := daemon.Start(daemon.Options{Config: cfg, Logger: lg, Progress: func() { progress.Add(1) }, AcceptJournalLoss: *acceptLoss, Version: buildinfo.Get().Version})
	stopExtend()
	if errors.Is(err, recovery.ErrRefused) {
		// A restart changes nothing here: the unit's
		// RestartPreventExitStatus= names this status, so systemd leaves
		// the unit failed with this line in its log instead of looping.
		lg.Error("the journal cannot be opened: exiting, not to be restarted until an operator acts", "dir", cfg.Journal.Dir, "err", err, "exit", ExitJournalRefused)
		return cli.Exit(ExitJournalRefused, "%v", err)
	}
	if err != nil {
		return err
	}
	defer d.Close()

	topics := mqtt.Topics{Prefix: cfg.MQTT.Prefix, Device: cfg.Device}
	reset := resetAdvice(cfg, d.HTTPAddr() != "", ctlCmd)
	halted, why := d.Sup.Engine().Halted()
	if halted {
		lg.Warn("started HALTED: every command is refused until an operator resets it", "reason", why, "reset", reset.do())
	}
	fmt.Fprintf(w, "saga-supervisor %s running on %s (device %s)\n", buildinfo.Get().Version, source, cfg.Device)
	fmt.Fprintf(w, "  journal  %s\n  MQTT     %s%s\n", cfg.Journal.Dir, d.BrokerURL, map[bool]string{true: " (in-process broker)"}[d.Broker != nil])
	if u := d.HTTPURL(); u != "" {
		login := ""
		if cfg.HTTP.Login {
			login = "; a login: " + u + "/login"
		}
		fmt.Fprintf(w, "  HTTP     %s  (/readyz, /metrics, /api/v1/status%s)\n", u, login)
	}
	if c := d.HTTPCert; c != nil {
		created := ""
		if c.Created {
			created = ", created now"
		}
		// What the operator compares with the fingerprint the browser
		// shows before accepting a self-signed certificate.
		fmt.Fprintf(w, "  TLS      %s  (SHA-256 %s%s)\n", c.CertFile, c.Fingerprint, created)
	}
	if f := cfg.HTTP.OperatorTokenFile(); f != "" {
		created := ""
		if tokenCreated {
			created = ", created now"
		}
		fmt.Fprintf(w, "  token    %s  (the operator token, for reset: mode 0600%s)\n", f, created)
	}
	if f := cfg.HTTP.ViewerTokenFile; f != "" {
		created := ""
		if viewerCreated {
			created = ", created now"
		}
		fmt.Fprintf(w, "  viewer   %s  (the viewer token: read and halt, never reset: mode 0600%s)\n", f, created)
	}
	if halted {
		fmt.Fprintf(w, "HALTED: the journal ends halted, so the robot starts halted: %s. Every command is refused until an operator resets it.\n", why)
		reset.print(w)
	}
	if ready, reasons := d.Sup.Readiness(); !ready && !halted {
		// Up and observable without a part (the broker, a board): say so
		// where the user looks first, naming the part and its error.
		lg.Warn("started NOT READY: HTTP serves, every command is refused, and what is missing is retried in the background", "reasons", strings.Join(reasons, "; "))
		fmt.Fprintf(w, "NOT READY: %s.\n  Every command is refused until it is back; it is retried in the background, and /readyz says why meanwhile.\n", strings.Join(reasons, "; "))
	}
	printFirstSteps(w, cfg, d.Broker, d.BrokerURL, ctlCmd, topics)
	if !halted {
		reset.print(w)
	}

	// What a burst of traffic left on the heap goes back to the system
	// once the burst is over, and the idle heap stays near its live size
	// (cmd/saga-supervisor/internal/memtrim). Nothing waits for it.
	trim := memtrim.Start(memtrim.Options{Log: lg.With("component", "memory")})
	defer trim.Stop()
	registerMemoryMetrics(d.Sup.Registry(), trim)

	systemd.Socket(systemd.Ready)
	if every := systemd.WatchdogInterval(); every > 0 {
		// Fed only while the supervisor makes progress (Supervisor.Alive).
		defer systemd.Feed(systemd.Socket, every/2, d.Sup.Alive, lg)()
		lg.Info("systemd watchdog enabled", "interval", every)
	}

	select {
	case s := <-sig:
		lg.Info("stopping", "signal", s.String())
	case err := <-d.Err():
		lg.Error("http server failed", "err", err)
	}
	systemd.Socket(systemd.Stopping)
	// The orderly stop: unwind open sagas and park the actuators while the
	// transport is still up to publish the reports, then say offline.
	if err := d.Close(); err != nil {
		lg.Error("stopped with errors", "err", err)
		return err
	}
	lg.Info("stopped")
	return nil
}

// runCheckConfig validates a configuration file.
func runCheckConfig(args []string, w io.Writer) error {
	fs := cli.NewFlags("check-config")
	if err := fs.Parse(args); err != nil {
		return cli.Exit(2, "%v", err)
	}
	if fs.NArg() != 1 {
		return cli.Exit(2, "usage: saga-supervisor check-config FILE")
	}
	cfg, err := config.Load(fs.Arg(0))
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return cli.Exit(2, "%v", err)
		}
		fmt.Fprintln(w, err)
		return cli.Exit(1, "%s is not valid", fs.Arg(0))
	}
	for _, warn := range cfg.Warnings() {
		fmt.Fprintln(w, "warning:", warn)
	}
	fmt.Fprintf(w, "%s: valid — device %s, %d actuators, %d supplies, journal %s, MQTT %s\n",
		fs.Arg(0), cfg.Device, len(cfg.Actuators), len(cfg.Supplies), cfg.Journal.Dir, cfg.MQTT.Broker)
	return nil
}

// printFirstSteps tells a new user how to reach the supervisor: on the
// locked embedded broker, who was given a password just now and where it
// is, and a first command that logs in — with mosquitto_rr and with
// `saga-supervisor ctl` — printed only where it works as printed: the
// broker's address, the agent's login and the config it runs on included
// (the TestDayOne tests run each as printed).
func printFirstSteps(w io.Writer, cfg *config.Config, emb *brokerauth.Started, brokerURL, ctlCmd string, topics mqtt.Topics) {
	locked := emb != nil && !emb.Anonymous
	if locked && len(emb.Added) > 0 {
		fmt.Fprintf(w, "MQTT logins created: %s\n", strings.Join(emb.Added, ", "))
		fmt.Fprintf(w, "  their passwords are in %s/<user> (mode 0600); the broker keeps only hashes, in %s\n",
			emb.CredentialsDir, cfg.MQTT.Auth.PasswordFile)
	}
	names := brokerauth.Policy(cfg).Agents
	if locked && len(names) == 0 {
		fmt.Fprintf(w, "No agents under agents.allow: every user of %s may act.\n", cfg.MQTT.Auth.PasswordFile)
		return
	}
	agent := statusAgent(cfg, names)
	if agent == "" {
		fmt.Fprintf(w, "No agent under agents.allow may send status: give one the op to try the commands of docs/API.md.\n")
		return
	}
	if len(names) > 0 {
		fmt.Fprintf(w, "Agents allowed (agents.allow): %s. Each logs in as its own name, client id <name> or <name>/<tag>.\n", strings.Join(names, ", "))
	}
	// The agent's password: in credentials_dir, where the supervisor wrote
	// it (embedded) or mosquitto-config did (an external broker); ctl
	// --config reads it from there too.
	password, ctlLogin := "", ""
	switch {
	case locked:
		password = emb.CredentialsDir + "/" + agent
	case emb == nil && cfg.MQTT.Username != "":
		password = filepath.Join(cfg.MQTT.Auth.CredentialsDir, agent)
		if cfg.MQTT.Auth.CredentialsDir == "" || !fileExists(password) {
			fmt.Fprintf(w, "Agents log in to %s with their own passwords (saga-supervisor mosquitto-config writes them to %s/<agent>):\n"+
				"give ctl --agent NAME --password-file FILE, and mosquitto_rr -u NAME -P PASSWORD.\n", brokerURL, cfg.MQTT.Auth.CredentialsDir)
			return
		}
		if !strings.Contains(ctlCmd, "--config") {
			ctlLogin = " --password-file " + cli.ShellQuote(password)
		}
	}
	if agent != "ctl" {
		ctlLogin = " --agent " + agent + ctlLogin
	}
	host, port, mqttOK := plainMQTT(brokerURL)
	if mqttOK {
		fmt.Fprintf(w, "Send a first command (mosquitto_rr is in mosquitto-clients):\n")
	} else {
		fmt.Fprintf(w, "Send a first command:\n")
	}
	if mqttOK {
		login := ""
		if password != "" {
			// The client id must be the username (or username/<tag>): -i.
			login = fmt.Sprintf(" -u %s -i %s -P \"$(cat %s)\"", agent, agent, cli.ShellQuote(password))
		}
		// One connection that asks and waits for the answer (it works on
		// mosquitto too, where use_username_as_clientid allows one
		// connection a login), for at most 5 s.
		fmt.Fprintf(w, "  mosquitto_rr -h %s -p %s%s -t %s -e %s -q 1 -W 5 -m '{\"id\":\"1\",\"agent\":\"%s\",\"op\":\"status\"}'\n",
			cli.ShellQuote(host), port, login, topics.AgentCmd(agent), topics.Reply(agent), agent)
	}
	fmt.Fprintf(w, "  %s%s status\n", ctlCmd, ctlLogin)
}

// statusAgent is the agent the first commands act as: ctl (ctl's own
// default) if it may send status, else the first agent of names that may;
// with no agents.allow, any agent may, so ctl. "" when none may.
func statusAgent(cfg *config.Config, names []string) string {
	if len(names) == 0 {
		return "ctl"
	}
	may := func(name string) bool {
		ops := cfg.Agents.Allow[name].Ops
		return ops == nil || slices.Contains(ops, "status")
	}
	if slices.Contains(names, "ctl") && may("ctl") {
		return "ctl"
	}
	for _, n := range names {
		if may(n) {
			return n
		}
	}
	return ""
}

// plainMQTT is the host and port of a plain MQTT broker URL (tcp://,
// mqtt://), which mosquitto_rr reaches with -h and -p; ok is false for a
// TLS or WebSocket broker, whose options depend on its certificates.
func plainMQTT(broker string) (host, port string, ok bool) {
	u, err := url.Parse(broker)
	if err != nil || (u.Scheme != "tcp" && u.Scheme != "mqtt") {
		return "", "", false
	}
	host, port = u.Hostname(), u.Port()
	if port == "" {
		port = "1883"
	}
	return host, port, host != ""
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// resetHow is how a halt of this supervisor is cleared: the command that
// works as printed (cmd), or, when there is none, what to do (note).
type resetHow struct{ cmd, note string }

// resetAdvice is the way to reset this supervisor: `ctl reset` with the
// config it runs on, reading the operator token from its file — or why no
// command can, and what to do.
func resetAdvice(cfg *config.Config, httpOn bool, ctlCmd string) resetHow {
	switch {
	case cfg.HTTP.ResetToken == "":
		return resetHow{note: "no operator token is configured, so no one can reset a halt: set http.reset_token_file " +
			"(with http.generate_reset_token: true the supervisor creates it) and restart"}
	case !httpOn:
		return resetHow{note: "HTTP is off (http.listen), and reset is over HTTP: turn it on (127.0.0.1:8080) and restart"}
	case cfg.HTTP.OperatorTokenFile() == "":
		return resetHow{note: "with the token of http.reset_token in a file of mode 0600: " + ctlCmd + " reset --token-file FILE"}
	}
	return resetHow{cmd: ctlCmd + " reset"}
}

// do is the command, or the note.
func (r resetHow) do() string { return cmp.Or(r.cmd, r.note) }

// print writes how to clear a halt: the command on a line of its own.
func (r resetHow) print(w io.Writer) {
	if r.cmd == "" {
		fmt.Fprintf(w, "Clear a halt: %s.\n", r.note)
		return
	}
	fmt.Fprintf(w, "Clear a halt (an operator's act; ctl reads the token file):\n  %s\n", r.cmd)
}

// registerMemoryMetrics exports what the trimmer did:
// saga_memory_trims_total and saga_memory_returned_bytes_total.
func registerMemoryMetrics(reg *promtext.Registry, t *memtrim.Trimmer) {
	reg.MustRegister(promtext.NewCounterFunc(promtext.Opts{
		Name: "saga_memory_trims_total",
		Help: "Times the daemon returned free heap to the system while quiet: what a burst of traffic left behind, or its own idle garbage.",
	}, func() float64 { return float64(t.Stats().Trims) }))
	reg.MustRegister(promtext.NewCounterFunc(promtext.Opts{
		Name: "saga_memory_returned_bytes_total",
		Help: "Bytes of free heap those trims returned to the system.",
	}, func() float64 { return float64(t.Stats().Returned) }))
}
