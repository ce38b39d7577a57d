package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
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
	"github.com/saga-supervisor/saga-supervisor/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/internal/secretfile"
	"github.com/saga-supervisor/saga-supervisor/supervisor"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
)

const ctlHelp = `usage: saga-supervisor ctl [flags] OP [op flags] [args]

A controller from the shell, over MQTT API v1 (docs/API.md).

OPs:
  status                       the supervisor's full status (ready, halt, journal,
                               supplies, actuators, leases, open sagas)
  halt [--reason R]            latch the e-stop; needs no lease
  reset --token-file F         clear a halt with the operator token, read from a file
        | --token T            holding only the token (mode 0600 or 0400); --token
        [--http URL]           shows it to every user of this machine (ps). Over HTTP
        [--mqtt]               (default http://127.0.0.1:8080), or with --mqtt over
                               the broker (only if the supervisor allows it:
                               mqtt.allow_reset, TLS)
  hello                        take a lease and give it back (bye): can this agent act?
  run-saga [--deadline D] ACTUATOR=VALUE ...
                               one saga: hello, begin, every step in order, commit,
                               bye. The first step that is refused or fails ends it:
                               the saga is aborted (or was unwound by the failure)
                               and the rollback report is printed
  watch [--for D] [--count N]  print status, events and actuator states until
                               interrupted (or for D, or N messages)
  keygen --out FILE            a new operator approval key: FILE (private, mode
                               0600) and FILE.pub (list it in approvals.public_keys);
                               never overwrites
  approve --key FILE --saga N --actuator A --value V [--ttl 30s]
                               print an approval token for one step (the device is
                               --device); no broker is contacted

run-saga takes --approval-key FILE (sign each step's approval with the
operator key, once the saga id is known) or --ask-approval (print the saga id
and read each step's token, or an empty line for none, from standard input):
for actuators marked requires_approval (docs/API.md, "Approvals").

A lease lives only as long as the process that holds it keeps heartbeating, so
begin, step, commit and abort cannot be separate invocations: the lease, and
with it the saga, would end when the first one exits. run-saga is the way to run
a saga from a shell; a controller that decides step by step uses the Go package
github.com/saga-supervisor/saga-supervisor/client (or any MQTT client).

Exit status: 0 ok, 1 refused or failed (the code and message are printed),
2 usage.

Flags (before or after OP):
`

// ctlFlags are the flags every op takes.
type ctlFlags struct {
	broker, device, prefix, agent string
	asJSON                        bool
	timeout, ttl                  time.Duration
	username, passwordFile        string
	credentials                   string
	caFile                        string
}

// defaultCtlFlags match the embedded default configuration, so that ctl with
// no flags talks to `saga-supervisor run` with no flags.
func defaultCtlFlags() *ctlFlags {
	def := config.Default()
	return &ctlFlags{
		broker: "tcp://" + def.MQTT.Listen,
		device: def.Device,
		prefix: def.MQTT.Prefix,
		// The agent the default configuration lets in (agents.allow.ctl),
		// with the password the supervisor generated for it.
		agent:       "ctl",
		credentials: def.MQTT.Auth.CredentialsDir,
		timeout:     5 * time.Second,
	}
}

func (g *ctlFlags) register(fs *flag.FlagSet) {
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
}

func ctlUsage(w io.Writer, g *ctlFlags) {
	fmt.Fprint(w, ctlHelp)
	fs := flag.NewFlagSet("ctl", flag.ContinueOnError)
	g.register(fs)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// ctlParse parses args with fs, taking flags and positional arguments in
// any order.
func ctlParse(fs *flag.FlagSet, args []string) ([]string, error) {
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

func ctlFlagSet(name string) *flag.FlagSet {
	fs := cli.NewFlags(name)
	fs.SetOutput(io.Discard) // the error is returned and printed once
	fs.Usage = func() {}
	return fs
}

func ctlUsageErr(err error) error {
	return cli.Exit(2, "%v (saga-supervisor ctl -h for help)", err)
}

// runCtl is `saga-supervisor ctl`.
func runCtl(args []string, w io.Writer) error {
	g := defaultCtlFlags()
	fs := ctlFlagSet("ctl")
	g.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			ctlUsage(w, defaultCtlFlags())
			return err
		}
		return ctlUsageErr(err)
	}
	if fs.NArg() == 0 {
		return ctlUsageErr(errors.New("no OP given: status, halt, reset, hello, run-saga, watch, keygen or approve"))
	}
	op, rest := fs.Arg(0), fs.Args()[1:]
	if op == "help" {
		ctlUsage(w, defaultCtlFlags())
		return nil
	}

	ofs := ctlFlagSet("ctl " + op)
	g.register(ofs)
	var (
		reason, token, tokenFile string
		httpURL                  = "http://" + config.Default().HTTP.Listen
		overMQTT                 bool
		deadline, forDur         time.Duration
		count                    int
		keyFile, outFile         string
		actuator                 string
		value                    float64
		sagaID                   uint64
		askApproval              bool
		approvalTTL              = approval.DefaultTTL
	)
	switch op {
	case "halt":
		ofs.StringVar(&reason, "reason", "", "why (journaled, and in the halt status)")
	case "reset":
		ofs.StringVar(&token, "token", "", "the operator token")
		ofs.StringVar(&tokenFile, "token-file", "", "a file holding only the operator token (mode 0600 or 0400)")
		ofs.StringVar(&httpURL, "http", httpURL, "the supervisor's HTTP address")
		ofs.BoolVar(&overMQTT, "mqtt", false, "reset over MQTT instead of HTTP (the supervisor must allow it: mqtt.allow_reset)")
	case "run-saga":
		ofs.DurationVar(&deadline, "deadline", 0, "each step is void unless admitted within D of reaching the supervisor (1ms..1m; 0: none)")
		ofs.StringVar(&reason, "reason", "", "the abort reason when a step is refused (default: names the step)")
		ofs.StringVar(&keyFile, "approval-key", "", "sign each step's approval with this operator private key (mode 0600 or 0400)")
		ofs.BoolVar(&askApproval, "ask-approval", false, "print the saga id, then read each step's approval token from standard input (an empty line: none)")
		ofs.DurationVar(&approvalTTL, "approval-ttl", approvalTTL, "with --approval-key: how long each approval is valid")
	case "keygen":
		ofs.StringVar(&outFile, "out", "", "the private key file to write (its public key goes to FILE.pub)")
	case "approve":
		ofs.StringVar(&keyFile, "key", "", "the operator's private key file (mode 0600 or 0400)")
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
		return ctlUsageErr(fmt.Errorf("%s is not an op of its own: a lease, and the saga under it, end when this process exits; use run-saga ACTUATOR=VALUE ... (or the Go client package)", op))
	default:
		return ctlUsageErr(fmt.Errorf("unknown OP %q: status, halt, reset, hello, run-saga, watch, keygen or approve", op))
	}
	pos, err := ctlParse(ofs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			ctlUsage(w, defaultCtlFlags())
			return err
		}
		return ctlUsageErr(err)
	}
	if op != "run-saga" && len(pos) > 0 {
		return ctlUsageErr(fmt.Errorf("%s: unexpected argument %q", op, pos[0]))
	}

	switch op { // offline ops: no broker
	case "keygen":
		return ctlKeygen(w, outFile)
	case "approve":
		if g.ttl != 0 {
			approvalTTL = g.ttl
		}
		return ctlApprove(w, g.device, keyFile, actuator, value, sagaID, approvalTTL)
	}

	opt, err := g.options()
	if err != nil {
		return ctlUsageErr(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := &ctlOut{w: w, json: g.asJSON}

	switch op {
	case "status":
		return ctlStatus(ctx, opt, out)
	case "halt":
		return ctlHalt(ctx, opt, out, reason)
	case "reset":
		if (token == "") == (tokenFile == "") {
			return ctlUsageErr(errors.New("reset: give --token or --token-file (one of them)"))
		}
		if tokenFile != "" {
			if token, err = readCtlSecret(tokenFile); err != nil {
				return ctlUsageErr(fmt.Errorf("--token-file: %w", err))
			}
		}
		if !overMQTT {
			return ctlResetHTTP(ctx, httpURL, g.timeout, out, token)
		}
		return ctlReset(ctx, opt, out, token)
	case "hello":
		return ctlHello(ctx, opt, out)
	case "run-saga":
		steps, err := ctlParseSteps(pos)
		if err != nil {
			return ctlUsageErr(err)
		}
		var sopts []client.StepOption
		if deadline != 0 {
			if deadline < time.Millisecond || deadline > api.MaxDeadlineMS*time.Millisecond {
				return ctlUsageErr(fmt.Errorf("--deadline %v is outside 1ms..1m", deadline))
			}
			sopts = append(sopts, client.WithDeadline(deadline))
		}
		var ap ctlApprover
		switch {
		case keyFile != "" && askApproval:
			return ctlUsageErr(errors.New("run-saga: give --approval-key or --ask-approval, not both"))
		case keyFile != "":
			if approvalTTL <= 0 || approvalTTL > approval.MaxTTLLimit {
				return ctlUsageErr(fmt.Errorf("--approval-ttl %v is outside 1ms..%v", approvalTTL, approval.MaxTTLLimit))
			}
			priv, err := approval.LoadPrivateKey(keyFile)
			if err != nil {
				return ctlUsageErr(fmt.Errorf("--approval-key: %w", err))
			}
			dev := g.device
			ap = func(saga uint64, s ctlStep) (string, error) {
				now := time.Now()
				return approval.Sign(priv, approval.Claims{Device: dev, Actuator: s.actuator, Value: s.value, Saga: saga,
					NotBefore: now, NotAfter: now.Add(approvalTTL)})
			}
		case askApproval:
			in := bufio.NewReader(ctlStdin)
			ap = func(saga uint64, s ctlStep) (string, error) {
				fmt.Fprintf(w, "approval for saga %d, %s=%s (saga-supervisor ctl approve --saga %d --actuator %s --value %s); empty line: none:\n",
					saga, s.actuator, ctlFloat(s.value), saga, s.actuator, ctlFloat(s.value))
				line, err := in.ReadString('\n')
				if err != nil && (err != io.EOF || line == "") {
					return "", fmt.Errorf("reading the approval: %w", err)
				}
				return strings.TrimSpace(line), nil
			}
		}
		return ctlRunSaga(ctx, opt, out, steps, reason, sopts, ap)
	default: // watch
		if forDur < 0 || count < 0 {
			return ctlUsageErr(errors.New("watch: --for and --count must not be negative"))
		}
		return ctlWatch(ctx, opt, out, forDur, count)
	}
}

// options turns the flags into client options (reading the secret files).
func (g *ctlFlags) options() (client.Options, error) {
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
		// The password the supervisor generated for this agent, if any.
		if p := filepath.Join(g.credentials, g.agent); fileExists(p) {
			passwordFile, opt.Username = p, g.agent
		}
	}
	if passwordFile != "" {
		pw, err := readCtlSecret(passwordFile)
		if err != nil {
			return opt, fmt.Errorf("password file %s: %w", passwordFile, err)
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

// readCtlSecret reads a password or token file (package secretfile).
func readCtlSecret(path string) (string, error) { return secretfile.Read(path) }

type ctlStep struct {
	actuator string
	value    float64
}

// ctlParseSteps reads ACTUATOR=VALUE pairs.
func ctlParseSteps(args []string) ([]ctlStep, error) {
	if len(args) == 0 {
		return nil, errors.New("run-saga: give at least one ACTUATOR=VALUE")
	}
	steps := make([]ctlStep, 0, len(args))
	for _, a := range args {
		name, val, ok := strings.Cut(a, "=")
		if !ok || name == "" || val == "" {
			return nil, fmt.Errorf("run-saga: %q is not ACTUATOR=VALUE", a)
		}
		if err := api.ValidName(name); err != nil {
			return nil, fmt.Errorf("run-saga: actuator %q: %w", name, err)
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("run-saga: %q: the value must be a finite number", a)
		}
		steps = append(steps, ctlStep{name, v})
	}
	return steps, nil
}

// ctlOut prints results as text or JSON.
type ctlOut struct {
	w    io.Writer
	json bool
}

func (o *ctlOut) printJSON(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	fmt.Fprintf(o.w, "%s\n", b)
}

// fail turns an error into the exit status: 1 with the code and message of
// a refusal or failure (also printed as JSON with --json).
func (o *ctlOut) fail(what string, err error) error {
	if errors.Is(err, client.ErrLoginRefused) {
		err = fmt.Errorf("%w\n  log in as an agent the supervisor knows: --agent NAME with --password-file FILE, or run ctl where the\n  supervisor runs, which reads the password it generated from --credentials (default ./saga-data/mqtt/credentials/<agent>)", err)
	}
	if o.json {
		j := map[string]any{"ok": false, "op": what, "error": err.Error()}
		var ce *client.Error
		if errors.As(err, &ce) {
			j["code"], j["message"] = ce.Code, ce.Message
			if ce.Report != nil {
				j["report"] = ce.Report
			}
		}
		o.printJSON(j)
	}
	var ce *client.Error
	if errors.As(err, &ce) {
		return cli.Exit(1, "%s refused: %s: %s", what, ce.Code, ce.Message)
	}
	return cli.Exit(1, "%s: %v", what, err)
}

// ctlCleanupCtx is a context for the last words (abort, bye) after ctx was
// interrupted.
func ctlCleanupCtx(opt client.Options) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), opt.Timeout)
}

func ctlStatus(ctx context.Context, opt client.Options, out *ctlOut) error {
	opt.NoLease = true
	c, err := client.Dial(ctx, opt)
	if err != nil {
		return out.fail("status", err)
	}
	defer c.Close(context.Background())
	raw, err := c.Status(ctx)
	if err != nil {
		return out.fail("status", err)
	}
	if out.json {
		fmt.Fprintf(out.w, "%s\n", raw)
		return nil
	}
	var st supervisor.Status
	if err := json.Unmarshal(raw, &st); err != nil {
		return cli.Exit(1, "status: cannot read the supervisor's status %s: %v", raw, err)
	}
	ctlWriteStatus(out.w, &st)
	return nil
}

func ctlWriteStatus(w io.Writer, st *supervisor.Status) {
	if st.Ready {
		fmt.Fprintln(w, "ready:      yes")
	} else {
		fmt.Fprintf(w, "ready:      NO — %s\n", strings.Join(st.Reasons, "; "))
	}
	if st.Halted {
		fmt.Fprintf(w, "halted:     YES — %s\n", st.HaltWhy)
	} else {
		fmt.Fprintln(w, "halted:     no")
	}
	j := st.Journal
	fmt.Fprintf(w, "journal:    %s, last seq %d, durable %d", j.Dir, j.LastSeq, j.Durable)
	if j.Error != "" {
		fmt.Fprintf(w, ", FAILED: %s", j.Error)
	}
	fmt.Fprintln(w)
	for _, s := range st.Supplies {
		state := "ok"
		switch {
		case !s.Known:
			state = "unknown"
		case s.Tripped:
			state = "TRIPPED " + s.Code
		case s.Stale:
			state = "stale"
		case s.Code != "":
			state = s.Code
		}
		fmt.Fprintf(w, "supply:     %-10s %6.2f V  %s (on trip: %s)\n", s.Name, s.Volts, state, s.Action)
	}
	for _, a := range st.Actuators {
		fmt.Fprintf(w, "actuator:   %-10s %-8s commanded %g", a.Name, a.Kind, a.Commanded)
		if a.ReadBack != nil {
			fmt.Fprintf(w, ", reads %g", *a.ReadBack)
		}
		if a.Error != "" {
			fmt.Fprintf(w, ", ERROR: %s", a.Error)
		}
		fmt.Fprintln(w)
	}
	if len(st.Leases) == 0 {
		fmt.Fprintln(w, "leases:     none")
	}
	for _, l := range st.Leases {
		fmt.Fprintf(w, "lease:      %-10s ttl %dms, expires in %.2fs\n", l.Agent, l.TTLMS, l.ExpiresIn)
	}
	if len(st.OpenSagas) == 0 {
		fmt.Fprintln(w, "open sagas: none")
	} else {
		ids := make([]string, len(st.OpenSagas))
		for i, id := range st.OpenSagas {
			ids[i] = strconv.FormatUint(id, 10)
		}
		fmt.Fprintf(w, "open sagas: %s\n", strings.Join(ids, ", "))
	}
}

func ctlHalt(ctx context.Context, opt client.Options, out *ctlOut, reason string) error {
	opt.NoLease = true
	c, err := client.Dial(ctx, opt)
	if err != nil {
		return out.fail("halt", err)
	}
	defer c.Close(context.Background())
	if err := c.Halt(ctx, reason); err != nil {
		return out.fail("halt", err)
	}
	if out.json {
		out.printJSON(map[string]any{"ok": true, "op": "halt"})
	} else {
		fmt.Fprintln(out.w, "halted: every actuator is at its safe policy and every command is refused until an operator resets")
	}
	return nil
}

func ctlReset(ctx context.Context, opt client.Options, out *ctlOut, token string) error {
	opt.NoLease = true
	c, err := client.Dial(ctx, opt)
	if err != nil {
		return out.fail("reset", err)
	}
	defer c.Close(context.Background())
	if err := c.Reset(ctx, token); err != nil {
		return out.fail("reset", err)
	}
	if out.json {
		out.printJSON(map[string]any{"ok": true, "op": "reset"})
	} else {
		fmt.Fprintln(out.w, "reset: the halt is cleared; controllers must hello again and begin new sagas")
	}
	return nil
}

func ctlHello(ctx context.Context, opt client.Options, out *ctlOut) error {
	c, err := client.Dial(ctx, opt)
	if err != nil {
		return out.fail("hello", err)
	}
	l, _ := c.Lease()
	cctx, cancel := ctlCleanupCtx(opt)
	defer cancel()
	if err := c.Close(cctx); err != nil {
		return out.fail("bye", err)
	}
	if out.json {
		out.printJSON(map[string]any{"ok": true, "op": "hello", "agent": opt.Agent, "lease": l.ID, "epoch": l.Epoch,
			"ttl_ms": l.TTL.Milliseconds(), "heartbeat_ms": l.Heartbeat.Milliseconds()})
	} else {
		fmt.Fprintf(out.w, "hello: agent %s got lease %s, epoch %d, ttl %v (heartbeat every %v)\n", opt.Agent, l.ID, l.Epoch, l.TTL, l.Heartbeat)
		fmt.Fprintln(out.w, "bye: lease ended")
	}
	return nil
}

// ctlStepJSON is one step of run-saga's JSON output.
type ctlStepJSON struct {
	Actuator  string   `json:"actuator"`
	Requested float64  `json:"requested"`
	Step      uint32   `json:"step,omitempty"`
	Value     *float64 `json:"value,omitempty"`
	Prior     *float64 `json:"prior,omitempty"`
	Clamped   bool     `json:"clamped,omitempty"`
	Code      string   `json:"code,omitempty"`
	Message   string   `json:"message,omitempty"`
}

// ctlSagaJSON is run-saga's JSON output.
type ctlSagaJSON struct {
	OK        bool            `json:"ok"`
	Agent     string          `json:"agent"`
	Lease     string          `json:"lease,omitempty"`
	Epoch     uint64          `json:"epoch,omitempty"`
	Saga      uint64          `json:"saga,omitempty"`
	Steps     []ctlStepJSON   `json:"steps"`
	Committed bool            `json:"committed"`
	Aborted   bool            `json:"aborted,omitempty"`
	Report    *api.ReportJSON `json:"report,omitempty"`
	Error     string          `json:"error,omitempty"`
	Code      string          `json:"code,omitempty"`
}

// ctlApprover gives the approval token of a step of saga ("" for none).
type ctlApprover func(saga uint64, s ctlStep) (string, error)

// ctlStdin is where --ask-approval reads tokens (tests replace it).
var ctlStdin io.Reader = os.Stdin

func ctlFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func ctlRunSaga(ctx context.Context, opt client.Options, out *ctlOut, steps []ctlStep, reason string, sopts []client.StepOption, ap ctlApprover) error {
	res := ctlSagaJSON{Agent: opt.Agent, Steps: []ctlStepJSON{}}
	text := func(format string, args ...any) {
		if !out.json {
			fmt.Fprintf(out.w, format, args...)
		}
	}
	// finish prints the result and gives the exit status; cause is the
	// supervisor's refusal or failure behind err, if any.
	finish := func(err, cause error) error {
		if out.json {
			res.OK = err == nil
			if err != nil {
				res.Error, res.Code = err.Error(), client.CodeOf(cause)
			}
			out.printJSON(res)
		}
		if err == nil {
			return nil
		}
		return cli.Exit(1, "run-saga: %v", err)
	}

	c, err := client.Dial(ctx, opt)
	if err != nil {
		return finish(err, err)
	}
	defer func() {
		cctx, cancel := ctlCleanupCtx(opt)
		defer cancel()
		c.Close(cctx) // bye; the saga is committed or unwound by now
	}()
	l, _ := c.Lease()
	res.Lease, res.Epoch = l.ID, l.Epoch
	text("lease %s, epoch %d, ttl %v\n", l.ID, l.Epoch, l.TTL)
	saga, err := c.Begin(ctx)
	if err != nil {
		return finish(err, err)
	}
	res.Saga = saga.ID()
	text("saga %d begun\n", saga.ID())

	for i, s := range steps {
		opts := sopts
		if ap != nil {
			tok, err := ap(saga.ID(), s)
			if err != nil {
				cctx, cancel := ctlCleanupCtx(opt)
				rep, _ := saga.Abort(cctx, "run-saga: no approval")
				cancel()
				res.Aborted, res.Report = rep != nil, rep
				return finish(fmt.Errorf("step %s=%g: approval: %w; saga %d aborted", s.actuator, s.value, err, saga.ID()), err)
			}
			if tok != "" {
				opts = append(opts[:len(opts):len(opts)], client.WithApproval(tok))
			}
		}
		r, err := saga.Step(ctx, s.actuator, s.value, opts...)
		js := ctlStepJSON{Actuator: s.actuator, Requested: s.value}
		if err == nil {
			js.Step, js.Value, js.Prior, js.Clamped = r.Step, &r.Value, &r.Prior, r.Clamped
			res.Steps = append(res.Steps, js)
			clamped := ""
			if r.Clamped {
				clamped = fmt.Sprintf(" (clamped from %g)", r.Requested)
			}
			text("step %d  %-10s %g -> %g%s\n", r.Step, s.actuator, r.Prior, r.Value, clamped)
			continue
		}
		var ce *client.Error
		if errors.As(err, &ce) {
			js.Code, js.Message = ce.Code, ce.Message
		} else {
			js.Message = err.Error()
		}
		res.Steps = append(res.Steps, js)
		what := fmt.Sprintf("step %s=%g (%d of %d)", s.actuator, s.value, i+1, len(steps))
		switch {
		case ce != nil && ce.Report != nil:
			// The step failed and the supervisor unwound the saga already.
			text("%s FAILED: %s: %s\n", what, ce.Code, ce.Message)
			res.Report = ce.Report
			ctlReport(out, ce.Report)
			return finish(fmt.Errorf("%s failed: %s; saga %d unwound, %s", what, ctlDescribe(err), saga.ID(), ce.Report.Verdict), err)
		case errors.Is(err, client.ErrLeaseLost):
			text("%s: LEASE LOST: %v\n", what, err)
			text("the supervisor unwinds the saga itself; its report is on the events topic (ctl watch)\n")
			return finish(fmt.Errorf("%s: %w", what, err), err)
		}
		how := "refused"
		if ce != nil && client.IsRefusal(err) {
			text("%s REFUSED, nothing moved: %s: %s\n", what, ce.Code, ce.Message)
		} else {
			how = "outcome unknown"
			text("%s: outcome unknown: %v\n", what, err)
		}
		why := reason
		if why == "" {
			why = fmt.Sprintf("run-saga: %s: %s", what, ctlOr(client.CodeOf(err), "no reply"))
		}
		cctx, cancel := ctlCleanupCtx(opt)
		rep, aerr := saga.Abort(cctx, why)
		cancel()
		if aerr != nil {
			text("abort: %v\n", aerr)
			return finish(fmt.Errorf("%s: %s; abort: %w", what, ctlDescribe(err), aerr), err)
		}
		res.Aborted, res.Report = true, rep
		text("saga %d aborted\n", saga.ID())
		ctlReport(out, rep)
		return finish(fmt.Errorf("%s %s: %s; saga %d aborted, unwind %s", what, how, ctlDescribe(err), saga.ID(), ctlVerdict(rep)), err)
	}
	if err := saga.Commit(ctx); err != nil {
		if !client.IsRefusal(err) && !errors.Is(err, client.ErrSagaEnded) && !errors.Is(err, client.ErrLeaseLost) {
			// The commit's outcome is unknown: unwind rather than guess.
			cctx, cancel := ctlCleanupCtx(opt)
			rep, aerr := saga.Abort(cctx, "run-saga: commit outcome unknown")
			cancel()
			if aerr == nil {
				res.Aborted, res.Report = true, rep
				ctlReport(out, rep)
			}
		}
		return finish(err, err)
	}
	res.Committed = true
	text("saga %d committed\n", saga.ID())
	return finish(nil, nil)
}

// ctlKeygen is `ctl keygen --out FILE`.
func ctlKeygen(w io.Writer, out string) error {
	if out == "" {
		return ctlUsageErr(errors.New("keygen: give --out FILE"))
	}
	pub, priv, err := approval.GenerateKey()
	if err != nil {
		return cli.Exit(1, "keygen: %v", err)
	}
	host, _ := os.Hostname()
	comment := "operator"
	if u := os.Getenv("USER"); u != "" {
		comment = u + "@" + host
	}
	if err := approval.WriteKeyPair(out, pub, priv, comment); err != nil {
		return cli.Exit(1, "keygen: %v", err)
	}
	fmt.Fprintf(w, "private key: %s (mode 0600: keep it secret)\npublic key:  %s.pub (key id %s): list it in approvals.public_keys\n",
		out, out, approval.KeyID(pub))
	return nil
}

// ctlApprove is `ctl approve`: it prints the token on stdout, alone.
func ctlApprove(w io.Writer, device, keyFile, actuator string, value float64, saga uint64, ttl time.Duration) error {
	switch {
	case keyFile == "":
		return ctlUsageErr(errors.New("approve: give --key FILE"))
	case actuator == "":
		return ctlUsageErr(errors.New("approve: give --actuator"))
	case math.IsNaN(value) || math.IsInf(value, 0):
		return ctlUsageErr(errors.New("approve: give --value, a finite number"))
	case saga == 0:
		return ctlUsageErr(errors.New("approve: give --saga, the saga id (from the controller's begin)"))
	case ttl <= 0 || ttl > approval.MaxTTLLimit:
		return ctlUsageErr(fmt.Errorf("approve: --ttl %v is outside 1ms..%v", ttl, approval.MaxTTLLimit))
	}
	if err := api.ValidName(actuator); err != nil {
		return ctlUsageErr(fmt.Errorf("approve: --actuator %q: %w", actuator, err))
	}
	priv, err := approval.LoadPrivateKey(keyFile)
	if err != nil {
		return ctlUsageErr(fmt.Errorf("approve: --key: %w", err))
	}
	now := time.Now()
	tok, err := approval.Sign(priv, approval.Claims{Device: device, Actuator: actuator, Value: value, Saga: saga,
		NotBefore: now, NotAfter: now.Add(ttl)})
	if err != nil {
		return cli.Exit(1, "approve: %v", err)
	}
	fmt.Fprintln(w, tok)
	return nil
}

// ctlDescribe is "CODE: message" for a supervisor's refusal or failure, the
// error's text otherwise.
func ctlDescribe(err error) string {
	var ce *client.Error
	if errors.As(err, &ce) {
		return ce.Code + ": " + ce.Message
	}
	return err.Error()
}

func ctlOr(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

func ctlVerdict(r *api.ReportJSON) string {
	if r == nil {
		return "unknown"
	}
	return r.Verdict
}

// ctlReport prints a rollback report as text (JSON output carries it
// whole).
func ctlReport(out *ctlOut, r *api.ReportJSON) {
	if out.json || r == nil {
		return
	}
	ctlReportText(out.w, r, "")
}

func ctlReportText(w io.Writer, r *api.ReportJSON, indent string) {
	how := "unwind " + r.Verdict
	if r.Verdict != "clean" {
		how = "unwind PARTIAL — look at the robot"
	}
	rec := ""
	if r.Recovered {
		rec = ", finished by recovery"
	}
	fmt.Fprintf(w, "%ssaga %d of %s: %s (%s%s): %s\n", indent, r.Saga, r.Agent, how, r.Order, rec, r.Reason)
	for _, s := range r.Steps {
		fmt.Fprintf(w, "%s  step %d %-10s %s, back to %s (was commanded %s), %s, %d attempt(s)", indent,
			s.Step, s.Actuator, s.Outcome, ctlNum(s.Prior), ctlNum(s.Target), s.Bucket, s.Attempts)
		if s.Error != "" {
			fmt.Fprintf(w, ": %s", s.Error)
		}
		fmt.Fprintln(w)
	}
}

func ctlNum(p *float64) string {
	if p == nil {
		return "null"
	}
	return strconv.FormatFloat(*p, 'g', -1, 64)
}

func ctlWatch(ctx context.Context, opt client.Options, out *ctlOut, forDur time.Duration, count int) error {
	opt.NoLease = true
	c, err := client.Dial(ctx, opt)
	if err != nil {
		return out.fail("watch", err)
	}
	defer c.Close(context.Background())
	if forDur > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, forDur)
		defer cancel()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n := 0
	err = c.Watch(ctx, func(u client.Update) {
		if count > 0 && n >= count {
			return
		}
		n++
		ctlWriteUpdate(out, u)
		if count > 0 && n >= count {
			cancel()
		}
	})
	if err != nil {
		return out.fail("watch", err)
	}
	return nil
}

// ctlWriteUpdate prints one watched message.
func ctlWriteUpdate(out *ctlOut, u client.Update) {
	if out.json {
		j := map[string]any{"topic": u.Topic, "retained": u.Retained}
		if json.Valid(u.Payload) {
			j["payload"] = json.RawMessage(u.Payload)
		} else {
			j["payload"] = string(u.Payload)
		}
		out.printJSON(j)
		return
	}
	w := out.w
	ts := time.Now().Format("15:04:05.000")
	switch {
	case u.Status != nil:
		s := u.Status
		line := fmt.Sprintf("%s status   %s", ts, s.State)
		if s.State == api.StateOnline {
			if s.Ready {
				line += ", ready"
			} else {
				line += ", NOT READY: " + strings.Join(s.Reasons, "; ")
			}
		}
		if s.Halted {
			line += ", HALTED: " + s.HaltReason
		}
		fmt.Fprintln(w, line)
	case u.State != nil:
		fmt.Fprintf(w, "%s state    %s = %g\n", ts, u.State.Actuator, u.State.Commanded)
	case u.Event != nil && u.Event.Kind == api.EventRollback && u.Event.Report != nil:
		fmt.Fprintf(w, "%s rollback ", ts)
		ctlReportText(w, u.Event.Report, "")
	case u.Event != nil && u.Event.Kind == api.EventReply && u.Event.Reply != nil:
		r := u.Event.Reply
		fmt.Fprintf(w, "%s refused  (no reply topic) id %q: %s: %s\n", ts, r.ID, r.Code, r.Message)
	default:
		fmt.Fprintf(w, "%s %s %s\n", ts, u.Topic, u.Payload)
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// ctlResetHTTP resets over the supervisor's HTTP API, as an operator does:
// the token goes as a bearer token, never through the broker.
func ctlResetHTTP(ctx context.Context, base string, timeout time.Duration, out *ctlOut, token string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(base, "/")+"/api/v1/reset", strings.NewReader(`{"operator":"ctl"}`))
	if err != nil {
		return ctlUsageErr(fmt.Errorf("--http: %w", err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return out.fail("reset", err)
	}
	defer res.Body.Close()
	var body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	json.NewDecoder(io.LimitReader(res.Body, 64<<10)).Decode(&body)
	if res.StatusCode != http.StatusOK {
		if body.Code == "" {
			body.Code, body.Message = api.CodeInternal, res.Status
		}
		return out.fail("reset", &client.Error{Op: "reset", Code: body.Code, Message: body.Message})
	}
	if out.json {
		out.printJSON(map[string]any{"ok": true, "op": "reset"})
	} else {
		fmt.Fprintln(out.w, "reset: the halt is cleared; controllers must hello again and begin new sagas")
	}
	return nil
}
