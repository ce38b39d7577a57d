// Package ctl is `saga-supervisor ctl`: a controller from the shell over
// MQTT API v1 (status, halt, reset, hello, run-saga, watch), the operator's
// drain and quarantine over HTTP, and the
// offline operator-key ops (keygen, approve).
package ctl

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/approval"
	"github.com/saga-supervisor/saga-supervisor/client"
	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/credentials"
	"github.com/saga-supervisor/saga-supervisor/internal/secretfile"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
)

const helpText = `usage: saga-supervisor ctl [flags] OP [op flags] [args]

A controller from the shell, over MQTT API v1 (docs/API.md).

OPs:
  status                       the supervisor's full status (ready, halt, journal,
                               supplies, actuators, leases, open sagas)
  halt [--reason R]            latch the e-stop; needs no lease
       [--zone Z]              halt only zone Z (zones): its actuators park, steps
                               on them are refused ZONE_HALTED, the other zones
                               serve; an unknown zone halts everything
  reset [--token-file F]       clear a halt with the operator token, read from the
        | --token T            supervisor's http.reset_token_file (default
        [--http URL]           ./saga-data/operator-token, which it generates; with
        [--http-cert F]        --config, the file that config names) or from F, a
        [--mqtt] [--zone Z]    file holding only the token (mode 0600 or 0400);
                               --token shows it to every user of this machine (ps).
                               Over HTTP (default http://127.0.0.1:8080; with
                               --config and http.tls, https:// trusting exactly
                               that config's certificate, --http-cert), or with
                               --mqtt over the broker (only if the supervisor allows
                               it: mqtt.allow_reset, TLS). A supervisor with no token
                               configured refuses every reset (NO_OPERATOR_TOKEN):
                               set http.reset_token_file and restart it. With
                               --zone, clear only zone Z's halt
  drain [--grace D] [--reason R]
                               refuse new sagas (DRAINING) for maintenance; sagas
                               open now may finish within D (default 1m, at most
                               24h), then they are unwound. Ready is NO while it
                               lasts; halt still works. In force until undrain,
                               across restarts
  undrain [--reason R]         end the drain
  quarantine AGENT [--reason R]
                               bar an agent: its lease ends, its sagas are unwound,
                               and all it sends but halt is refused (QUARANTINED)
                               until release; across restarts
  release AGENT [--reason R]   end an agent's quarantine
                               (drain, undrain, quarantine and release take the
                               operator token and go over HTTP, as reset does:
                               --token-file, --token, --http, --http-cert)
  hello                        take a lease and give it back (bye): can this agent act?
  run-saga [--deadline D] ACTUATOR=VALUE ...
                               one saga: hello, begin, every step in order, commit,
                               bye. The first step that is refused or fails ends it:
                               the saga is aborted (or was unwound by the failure)
                               and the rollback report is printed
  watch [--for D] [--count N]  print status, events (unwinds, drift) and actuator
                               states until interrupted (or for D, or N messages);
                               a warning line when a halt latches
  keygen --out FILE            a new operator approval key: FILE (private, mode
                               0600) and FILE.pub (list it in approvals.public_keys);
                               never overwrites
  approve --key FILE --saga N --actuator A --value V [--ttl 30s]
                               print an approval token for one step (the device is
                               --device); no broker is contacted. --key repeated:
                               one token per key, one per line

run-saga takes --approval-key FILE (sign each step's approval with the
operator key, once the saga id is known; repeated, with each key) or
--ask-approval (print the saga id and read each step's tokens, separated by
spaces, or an empty line for none, from standard input): for actuators marked
requires_approval (docs/API.md, "Approvals"). An actuator requiring M
approvals needs M tokens from M operators' keys: each operator runs approve
with their own key, and the tokens are pasted on one line.

A lease lives only as long as the process that holds it keeps heartbeating, so
begin, step, commit and abort cannot be separate invocations: the lease, and
with it the saga, would end when the first one exits. run-saga is the way to run
a saga from a shell; a controller that decides step by step uses the Go package
github.com/saga-supervisor/saga-supervisor/client (or any MQTT client).

--config FILE reads the supervisor's config file (/etc/saga-supervisor/config.yaml
under systemd) for its broker, device, prefix, CA file, credentials dir, operator
token file and HTTP address, so that ctl talks to that supervisor; flags given
win. Its relative paths resolve against its state_dir, as the daemon's do, so
ctl finds the agent's password (credentials_dir/<agent>, embedded broker or
mosquitto alike) and the operator token from any directory. The secrets it
names are not read, but for the agent's password and the operator token, which
reset reads when given no token. A controller running as another user than
the supervisor's gets its own copy of its password: saga-supervisor
credentials -h.

When the supervisor is halted, status, hello, run-saga, watch and reset say so
first, with the reason and how to reset ("WARNING: the supervisor is HALTED: ...");
with --json, the op's object carries "halt": {"halted": true, "reason": ...}
(status: its own "halted" and "halt_reason"; watch: the status lines).

Exit status: 0 ok, 1 refused or failed (the code and message are printed),
2 usage.

Flags (before or after OP):
`

// globals are the flags every op takes.
type globals struct {
	broker, device, prefix, agent string
	asJSON                        bool
	timeout, ttl                  time.Duration
	username, passwordFile        string
	credentials                   string
	caFile                        string
	configFile                    string
	// tokenFile is where the supervisor keeps its operator token
	// (http.reset_token_file): reset reads it when given no token.
	tokenFile string
	// httpCert is the certificate an https:// supervisor must present
	// (http.tls.cert_file, or --http-cert): trusted exactly, whatever
	// name it was issued for, like the supervisor's own pin on its
	// embedded broker. "" trusts the system's CAs.
	httpCert string
}

// defaultGlobals match the embedded default configuration, so that ctl with
// no flags talks to `saga-supervisor run` with no flags.
func defaultGlobals() *globals {
	def := config.Default()
	return &globals{
		broker: "tcp://" + def.MQTT.Listen,
		device: def.Device,
		prefix: def.MQTT.Prefix,
		// The agent the default configuration lets in (agents.allow.ctl),
		// with the password the supervisor generated for it.
		agent:       "ctl",
		credentials: def.MQTT.Auth.CredentialsDir,
		tokenFile:   def.HTTP.OperatorTokenFile(),
		timeout:     5 * time.Second,
	}
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.broker, "broker", g.broker, "the broker's URL (tcp://, ssl://, ws://, wss://)")
	fs.StringVar(&g.device, "device", g.device, "the robot's device name (the topic level after the prefix)")
	fs.StringVar(&g.prefix, "prefix", g.prefix, "the topic prefix")
	fs.StringVar(&g.agent, "agent", g.agent, "the agent name this command acts as (also its MQTT username; its client id is <agent>/<pid>)")
	fs.BoolVar(&g.asJSON, "json", g.asJSON, "print JSON instead of text")
	fs.DurationVar(&g.timeout, "timeout", g.timeout, "how long to wait for the broker and for each reply")
	fs.DurationVar(&g.ttl, "ttl", g.ttl, "the lease TTL to ask for (hello, run-saga; 0: the supervisor's default); approve: how long the approval is valid (0: 30s)")
	fs.StringVar(&g.username, "username", g.username, "the broker username")
	fs.StringVar(&g.passwordFile, "password-file", g.passwordFile, "a file holding only the broker password (mode 0600 or 0400)")
	fs.StringVar(&g.credentials, "credentials", g.credentials, "where the supervisor wrote the embedded broker's generated passwords: without --password-file, the agent's is read from DIR/<agent> if it exists")
	fs.StringVar(&g.caFile, "ca-file", g.caFile, "CA certificates (PEM) to verify a TLS broker with (default: the system's)")
	fs.StringVar(&g.configFile, "config", g.configFile, "the supervisor's config file: the broker, device, prefix, CA file, credentials dir and HTTP address are taken from it (flags given win; its secret files are not read)")
}

// fromConfig takes, from the supervisor's config file, what the flags not
// given on the command line (set) should be to reach that supervisor. It
// parses the file's layout only: the secrets it names are read later, if
// at all — the agent's password from the credentials dir, the operator
// token (reset, given no token) from the file the config names; the
// supervisor's own MQTT password never. Its relative paths resolve as the
// daemon's do, against its state_dir (config.ResolvePath), so ctl finds the
// same files from any directory. The credentials dir is taken for an
// external broker too: it is where mosquitto-config writes the logins'
// passwords.
func (g *globals) fromConfig(set map[string]bool, httpURL *string) error {
	data, err := os.ReadFile(g.configFile)
	if err != nil {
		return fmt.Errorf("--config: %w", credentials.Unreadable(g.configFile, "", err))
	}
	cfg, err := config.ParseLayout(data, g.configFile)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	take := func(flag string, dst *string, v string) {
		if !set[flag] && v != "" {
			*dst = v
		}
	}
	broker := cfg.MQTT.Broker
	if cfg.MQTT.Embedded() {
		scheme := "tcp://"
		if cfg.MQTT.TLS.CertFile != "" {
			scheme = "ssl://"
		}
		broker = scheme + loopback(cfg.MQTT.Listen)
	}
	take("broker", &g.broker, broker)
	take("device", &g.device, cfg.Device)
	take("prefix", &g.prefix, cfg.MQTT.Prefix)
	take("ca-file", &g.caFile, cfg.MQTT.TLS.CAFile)
	take("credentials", &g.credentials, cfg.MQTT.Auth.CredentialsDir)
	g.tokenFile = cfg.HTTP.OperatorTokenFile() // that supervisor's, or none
	if cfg.HTTP.Listen != "" {
		scheme := "http://"
		if cfg.HTTP.TLS.Enabled() {
			scheme = "https://"
			take("http-cert", &g.httpCert, cfg.HTTP.TLS.CertFile)
		}
		take("http", httpURL, scheme+loopback(cfg.HTTP.Listen))
	}
	return nil
}

// loopback is a listen address as this machine dials it: an unspecified
// host (every address) becomes loopback.
func loopback(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip, err := netip.ParseAddr(host); host == "" || err == nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if err == nil && ip.Is6() {
			host = "::1"
		}
	}
	return net.JoinHostPort(host, port)
}

func usage(w io.Writer, g *globals) {
	fmt.Fprint(w, helpText)
	fs := flag.NewFlagSet("ctl", flag.ContinueOnError)
	g.register(fs)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// parseAnyOrder parses args with fs, taking flags and positional arguments in
// any order.
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

func flagSet(name string) *flag.FlagSet {
	fs := cli.NewFlags(name)
	fs.SetOutput(io.Discard) // the error is returned and printed once
	fs.Usage = func() {}
	return fs
}

func usageErr(err error) error {
	return cli.Exit(2, "%v (saga-supervisor ctl -h for help)", err)
}

// Run is `saga-supervisor ctl`.
func Run(args []string, w io.Writer) error {
	g := defaultGlobals()
	fs := flagSet("ctl")
	g.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(w, defaultGlobals())
			return err
		}
		return usageErr(err)
	}
	if fs.NArg() == 0 {
		return usageErr(errors.New("no OP given: status, halt, reset, drain, undrain, quarantine, release, hello, run-saga, watch, keygen or approve"))
	}
	op, rest := fs.Arg(0), fs.Args()[1:]
	if op == "help" {
		usage(w, defaultGlobals())
		return nil
	}

	ofs := flagSet("ctl " + op)
	g.register(ofs)
	var (
		reason, token, tokenFile string
		httpURL                  = "http://" + config.Default().HTTP.Listen
		overMQTT                 bool
		deadline, forDur         time.Duration
		count                    int
		keyFiles                 keyFileList
		outFile                  string
		actuator                 string
		value                    float64
		sagaID                   uint64
		askApproval              bool
		approvalTTL              = approval.DefaultTTL
		zone                     string
	)
	switch op {
	case "halt":
		ofs.StringVar(&reason, "reason", "", "why (journaled, and in the halt status)")
		ofs.StringVar(&zone, "zone", "", "halt only this zone of the configuration (zones); an unknown zone halts everything")
	case "reset":
		ofs.StringVar(&zone, "zone", "", "reset only this zone's halt (a full halt needs a reset without --zone)")
		ofs.StringVar(&token, "token", "", "the operator token")
		ofs.StringVar(&tokenFile, "token-file", "", "a file holding only the operator token (mode 0600 or 0400)")
		ofs.StringVar(&httpURL, "http", httpURL, "the supervisor's HTTP address")
		ofs.StringVar(&g.httpCert, "http-cert", "", "for an https:// --http: the supervisor's certificate (PEM), trusted exactly (default with --config: its http.tls.cert_file; none: the system's CAs)")
		ofs.BoolVar(&overMQTT, "mqtt", false, "reset over MQTT instead of HTTP (the supervisor must allow it: mqtt.allow_reset)")
	case "drain", "undrain", "quarantine", "release":
		ofs.StringVar(&reason, "reason", "", "why (journaled, and in the status)")
		ofs.StringVar(&token, "token", "", "the operator token")
		ofs.StringVar(&tokenFile, "token-file", "", "a file holding only the operator token (mode 0600 or 0400)")
		ofs.StringVar(&httpURL, "http", httpURL, "the supervisor's HTTP address")
		ofs.StringVar(&g.httpCert, "http-cert", "", "for an https:// --http: the supervisor's certificate (PEM), trusted exactly (default with --config: its http.tls.cert_file; none: the system's CAs)")
		if op == "drain" {
			ofs.DurationVar(&deadline, "grace", supervisor.DefaultDrainGrace, "how long open sagas may run on before they are unwound (0..24h)")
		}
	case "run-saga":
		ofs.DurationVar(&deadline, "deadline", 0, "each step is void unless admitted within D of reaching the supervisor (1ms..1m; 0: none)")
		ofs.StringVar(&reason, "reason", "", "the abort reason when a step is refused (default: names the step)")
		ofs.Var(&keyFiles, "approval-key", "sign each step's approval with this operator private key (mode 0600 or 0400); repeat it to sign with several keys (requires_approval: M)")
		ofs.BoolVar(&askApproval, "ask-approval", false, "print the saga id, then read each step's approval tokens from standard input: one line per step, tokens separated by spaces (an empty line: none)")
		ofs.DurationVar(&approvalTTL, "approval-ttl", approvalTTL, "with --approval-key: how long each approval is valid")
	case "keygen":
		ofs.StringVar(&outFile, "out", "", "the private key file to write (its public key goes to FILE.pub)")
	case "approve":
		ofs.Var(&keyFiles, "key", "the operator's private key file (mode 0600 or 0400); repeated, one token per key, one per line")
		ofs.StringVar(&actuator, "actuator", "", "the actuator the step moves")
		ofs.Float64Var(&value, "value", math.NaN(), "the exact value the step commands")
		ofs.Uint64Var(&sagaID, "saga", 0, "the saga the step belongs to")
		// --ttl is the global flag (a lease's TTL elsewhere): here, how long
		// the approval is valid, from now; 0 (not given): 30s.
	case "watch":
		ofs.DurationVar(&forDur, "for", 0, "stop after this long (0: until interrupted)")
		ofs.IntVar(&count, "count", 0, "stop after this many messages (0: no limit)")
	case "status", "hello":
	case "begin", "step", "commit", "abort":
		return usageErr(fmt.Errorf("%s is not an op of its own: a lease, and the saga under it, end when this process exits; use run-saga ACTUATOR=VALUE ... (or the Go client package)", op))
	default:
		return usageErr(fmt.Errorf("unknown OP %q: status, halt, reset, drain, undrain, quarantine, release, hello, run-saga, watch, keygen or approve", op))
	}
	pos, err := parseAnyOrder(ofs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(w, defaultGlobals())
			return err
		}
		return usageErr(err)
	}
	var target string
	if op == "quarantine" || op == "release" {
		if len(pos) != 1 {
			return usageErr(fmt.Errorf("%s needs one AGENT (the name it acts under)", op))
		}
		if err := api.ValidName(pos[0]); err != nil {
			return usageErr(fmt.Errorf("%s: agent %q: %w", op, pos[0], err))
		}
		target, pos = pos[0], nil
	}
	if op == "drain" && (deadline < 0 || deadline > rollback.MaxDrainGrace) {
		return usageErr(fmt.Errorf("drain: --grace %v is outside 0..%v", deadline, rollback.MaxDrainGrace))
	}
	if op != "run-saga" && len(pos) > 0 {
		return usageErr(fmt.Errorf("%s: unexpected argument %q", op, pos[0]))
	}
	if g.configFile != "" {
		set := map[string]bool{}
		mark := func(f *flag.Flag) { set[f.Name] = true }
		fs.Visit(mark)
		ofs.Visit(mark)
		if err := g.fromConfig(set, &httpURL); err != nil {
			return usageErr(err)
		}
	}
	resetHint := g.resetHint()

	switch op { // offline ops: no broker
	case "keygen":
		return opKeygen(w, outFile)
	case "approve":
		if g.ttl != 0 {
			approvalTTL = g.ttl
		}
		return opApprove(w, g.device, keyFiles, actuator, value, sagaID, approvalTTL)
	}

	opt, err := g.options()
	if err != nil {
		return usageErr(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := &output{w: w, json: g.asJSON, resetHint: resetHint}

	switch op {
	case "status":
		return opStatus(ctx, opt, out)
	case "halt":
		return opHalt(ctx, opt, out, reason, zone)
	case "reset":
		if token, err = g.operatorToken(token, tokenFile); err != nil {
			return usageErr(err)
		}
		if !overMQTT {
			hc, err := httpClient(g.httpCert)
			if err != nil {
				return usageErr(err)
			}
			return opResetHTTP(ctx, hc, httpURL, g.timeout, out, token, zone)
		}
		return opReset(ctx, opt, out, token, zone)
	case "drain", "undrain", "quarantine", "release":
		if token, err = g.operatorToken(token, tokenFile); err != nil {
			return usageErr(err)
		}
		hc, err := httpClient(g.httpCert)
		if err != nil {
			return usageErr(err)
		}
		body := map[string]any{}
		if reason != "" {
			body["reason"] = reason
		}
		switch op {
		case "drain":
			body["grace_ms"] = deadline.Milliseconds()
		case "quarantine", "release":
			body["agent"] = target
		}
		return opOperatorHTTP(ctx, hc, httpURL, g.timeout, out, token, op, body)
	case "hello":
		return opHello(ctx, opt, out)
	case "run-saga":
		steps, err := parseSteps(pos)
		if err != nil {
			return usageErr(err)
		}
		var sopts []client.StepOption
		if deadline != 0 {
			if deadline < time.Millisecond || deadline > api.MaxDeadlineMS*time.Millisecond {
				return usageErr(fmt.Errorf("--deadline %v is outside 1ms..1m", deadline))
			}
			sopts = append(sopts, client.WithDeadline(deadline))
		}
		var ap approver
		switch {
		case len(keyFiles) > 0 && askApproval:
			return usageErr(errors.New("run-saga: give --approval-key or --ask-approval, not both"))
		case len(keyFiles) > 0:
			if approvalTTL <= 0 || approvalTTL > approval.MaxTTLLimit {
				return usageErr(fmt.Errorf("--approval-ttl %v is outside 1ms..%v", approvalTTL, approval.MaxTTLLimit))
			}
			privs, err := loadApprovalKeys(keyFiles)
			if err != nil {
				return usageErr(fmt.Errorf("--approval-key: %w", err))
			}
			dev := g.device
			ap = func(saga uint64, s sagaStep) ([]string, error) {
				return signAll(privs, approval.Claims{Device: dev, Actuator: s.actuator, Value: s.value, Saga: saga}, approvalTTL)
			}
		case askApproval:
			in := bufio.NewReader(stdin)
			ap = func(saga uint64, s sagaStep) ([]string, error) {
				fmt.Fprintf(w, "approval for saga %d, %s=%s (saga-supervisor ctl approve --saga %d --actuator %s --value %s); several: separated by spaces; empty line: none:\n",
					saga, s.actuator, formatFloat(s.value), saga, s.actuator, formatFloat(s.value))
				line, err := in.ReadString('\n')
				if err != nil && (err != io.EOF || line == "") {
					return nil, fmt.Errorf("reading the approval: %w", err)
				}
				return strings.Fields(line), nil
			}
		}
		return opRunSaga(ctx, opt, out, steps, reason, sopts, ap)
	default: // watch
		if forDur < 0 || count < 0 {
			return usageErr(errors.New("watch: --for and --count must not be negative"))
		}
		return opWatch(ctx, opt, out, forDur, count)
	}
}

// options turns the flags into client options (reading the secret files).
func (g *globals) options() (client.Options, error) {
	// A client id of the agent's own (agent/<pid>), so that two ctl
	// commands at once — a watch and a run-saga — do not take each other's
	// session (mosquitto with use_username_as_clientid makes it the
	// username whatever is sent).
	opt := client.Options{Broker: g.broker, Agent: g.agent, ClientID: g.agent + "/" + strconv.Itoa(os.Getpid()),
		Prefix: g.prefix, Device: g.device, Username: g.username, Timeout: g.timeout, TTL: g.ttl}
	if err := api.ValidName(g.agent); err != nil {
		return opt, fmt.Errorf("--agent %q: %w", g.agent, err)
	}
	if err := (mqtt.Topics{Prefix: g.prefix, Device: g.device}).Validate(); err != nil {
		return opt, fmt.Errorf("--prefix/--device: %w", err)
	}
	if g.timeout <= 0 {
		return opt, fmt.Errorf("--timeout must be positive")
	}
	if g.ttl < 0 {
		return opt, fmt.Errorf("--ttl must not be negative")
	}
	passwordFile := g.passwordFile
	if passwordFile == "" && g.username == "" && g.credentials != "" {
		// The password generated for this agent (by the embedded broker or
		// mosquitto-config), if there is one. One this user may not read
		// is an error that says whose it is, not a silent anonymous login.
		p := filepath.Join(g.credentials, g.agent)
		switch _, err := os.Stat(p); {
		case err == nil:
			passwordFile, opt.Username = p, g.agent
		case errors.Is(err, fs.ErrPermission):
			return opt, fmt.Errorf("agent %s's password %s: %w", g.agent, p, credentials.Unreadable(p, g.agent, err))
		}
	}
	if passwordFile != "" {
		pw, err := readSecret(passwordFile)
		if err != nil {
			return opt, fmt.Errorf("password file %s: %w", passwordFile, credentials.Unreadable(passwordFile, g.agent, err))
		}
		opt.Password = pw
	}
	if g.caFile != "" {
		pem, err := os.ReadFile(g.caFile)
		if err != nil {
			return opt, fmt.Errorf("--ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return opt, fmt.Errorf("--ca-file %s: no PEM certificate in it", g.caFile)
		}
		opt.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return opt, nil
}

// readSecret reads a password or token file (package secretfile).
func readSecret(path string) (string, error) { return secretfile.Read(path) }

// Conn is ctl's broker connection flags (--broker, --prefix, --agent,
// --username, --password-file, --credentials, --ca-file, --timeout,
// --json, ...), for other commands that connect the way ctl does
// (`saga-supervisor fleet`).
type Conn struct{ g *globals }

// NewConn returns ctl's defaults, logging in as agent (or ctl's default
// agent if "").
func NewConn(agent string) *Conn {
	g := defaultGlobals()
	if agent != "" {
		g.agent = agent
	}
	return &Conn{g}
}

// Register adds the flags to fs.
func (c *Conn) Register(fs *flag.FlagSet) { c.g.register(fs) }

// Options are the client options the flags say (secret files read).
func (c *Conn) Options() (client.Options, error) { return c.g.options() }

// JSON reports --json.
func (c *Conn) JSON() bool { return c.g.asJSON }
