//go:build !saga_lean

package hil

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Capability names an injection a rig can make. A scenario that needs one
// the rig file does not list is skipped in rig mode with a message naming
// it.
type Capability string

// The injections the scenarios use. The first four are control endpoints
// of the rig's control URL, the same ones `saga-supervisor sim-mcu` serves;
// the last two are the rig file's broker_control commands.
const (
	CapNak           Capability = "nak"            // POST /nak?channel=C&code=N: the board refuses a channel
	CapVolts         Capability = "volts"          // POST /volts?supply=I&v=V: a supply sags
	CapEStop         Capability = "estop"          // POST /fault?flag=estop&on=true|false: the board's e-stop
	CapUnplug        Capability = "unplug"         // POST /unplug, /replug: the serial cable
	CapBrokerRestart Capability = "broker-restart" // broker_control stop and start: a graceful restart
	CapBrokerCrash   Capability = "broker-crash"   // broker_control kill and start: the broker dies
)

// Capabilities lists every capability, in the order docs/HIL.md lists them.
var Capabilities = []Capability{CapNak, CapVolts, CapEStop, CapUnplug, CapBrokerRestart, CapBrokerCrash}

// Defaults and bounds of the rig file.
const (
	DefaultTolerance = 0.001           // one thousandth: what the serial link carries
	DefaultSettle    = 5 * time.Second // hang guard for an output to reach a value
	MaxSettle        = 5 * time.Minute
	MaxRigFileBytes  = 1 << 20
	maxOutput        = 255
)

// RigFile describes a real rig (docs/HIL.md, examples/rig.yaml). Relative
// paths in it are relative to the directory of the rig file.
type RigFile struct {
	// Config is the supervisor config the scenarios run the binary on
	// (`saga-supervisor run --config`). Required.
	Config string `yaml:"config"`
	// WorkDir is the supervisor's working directory, which the config's
	// relative paths (journal, secret files) are relative to. Default: the
	// rig file's directory.
	WorkDir string `yaml:"workdir"`
	// TokenFile holds the operator token for reset. Default: the config's
	// reset token.
	TokenFile string `yaml:"token_file"`
	// Broker is the MQTT broker URL the scenarios' agents use. Default:
	// the config's broker (tcp://<listen> for the embedded one).
	Broker string `yaml:"broker"`
	// Agents are the broker logins the scenarios' controllers use. Empty:
	// anonymous, with made-up agent names.
	Agents AgentsSpec `yaml:"agents"`
	// ReadBack is the independent observer of the outputs. Required.
	ReadBack ReadBackSpec `yaml:"readback"`
	// Control is where injections are made, and which ones exist.
	Control ControlSpec `yaml:"control"`
	// BrokerControl stops, kills and starts the broker (the broker
	// scenarios).
	BrokerControl BrokerControl `yaml:"broker_control"`
	// Supply names the supply the sag scenario drives through the control
	// URL. Default: the first supply (by name) with driver: mcu.
	Supply SupplySpec `yaml:"supply"`
	// Actuators are the actuators under test, with optional overrides.
	// Empty: every actuator with driver: mcu, read back at its channel.
	Actuators map[string]ActuatorSpec `yaml:"actuators"`

	dir string // the rig file's directory
}

// AgentsSpec lists broker logins for the scenarios' agents. With the
// shipped ACL (configs/mosquitto.acl) a login may act only as the agent of
// the same name, so each login is an agent name; they share one password.
type AgentsSpec struct {
	Names        []string `yaml:"names"`         // at least MinAgentLogins
	PasswordFile string   `yaml:"password_file"` // one line: the password of every name
}

// MinAgentLogins is how many agent logins a rig file must give, if any:
// the most agents a scenario uses.
const MinAgentLogins = 6

// ReadBackSpec is the read-back channel: an HTTP endpoint whose GET /state
// answers like `saga-supervisor sim-mcu` (State).
type ReadBackSpec struct {
	URL string `yaml:"url"` // required: http://host:port (GET URL/state)
	// Tolerance is how far a read-back value may be from the value
	// expected (actuator units; default DefaultTolerance). A measured
	// position needs more than a reported one.
	Tolerance float64 `yaml:"tolerance"`
	// Settle bounds how long an output may take to reach a value before a
	// scenario fails (a hang guard, not a speed requirement; default
	// DefaultSettle).
	Settle time.Duration `yaml:"settle"`
}

// ControlSpec is the injection endpoint.
type ControlSpec struct {
	URL    string       `yaml:"url"`    // default: the read-back URL
	Inject []Capability `yaml:"inject"` // what it can do (nak, volts, estop, unplug)
}

// BrokerControl holds commands (argv, no shell) that stop, kill and start
// the MQTT broker the supervisor and the agents use. Start is required
// with either of the others.
type BrokerControl struct {
	Stop  []string `yaml:"stop"`  // a graceful stop (systemctl stop mosquitto)
	Kill  []string `yaml:"kill"`  // the broker dies (systemctl kill -s KILL mosquitto)
	Start []string `yaml:"start"` // and starts again
}

// SupplySpec names the supply under test.
type SupplySpec struct {
	Name  string `yaml:"name"`
	Index *int   `yaml:"index"` // its index at the control URL; default its mcu.supply
}

// ActuatorSpec overrides how one actuator is tested.
type ActuatorSpec struct {
	// Output is the actuator's index in the read-back's outputs (and its
	// channel at the control URL). Default: its mcu channel.
	Output *int `yaml:"output"`
	// Setup is the value every scenario first commits the actuator to, so
	// that priors differ from initial and safe values. Move is where a
	// scenario's saga then drives it. Defaults: inside [min, max], away
	// from the safe value.
	Setup *float64 `yaml:"setup"`
	Move  *float64 `yaml:"move"`
	// Tolerance overrides readback.tolerance for this actuator: a servo
	// measured to a tenth of a degree and a duty cycle to a thousandth
	// need different ones.
	Tolerance *float64 `yaml:"tolerance"`
}

// LoadRig reads and checks the rig file at path.
func LoadRig(path string) (*RigFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, errorf(CodeRigFile, err, "rig file")
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxRigFileBytes+1))
	if err != nil {
		return nil, errorf(CodeRigFile, err, "rig file %s", path)
	}
	if len(b) > MaxRigFileBytes {
		return nil, errorf(CodeRigFile, nil, "rig file %s: over %d bytes", path, MaxRigFileBytes)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, errorf(CodeRigFile, err, "rig file %s", path)
	}
	return ParseRig(b, abs)
}

// ParseRig decodes a rig file strictly (an unknown key, a second document
// or a mistyped value is an error), fills defaults, checks it, and resolves
// relative paths against the directory of name.
func ParseRig(data []byte, name string) (*RigFile, error) {
	var r RigFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&r); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errorf(CodeRigFile, nil, "%s: empty", name)
		}
		return nil, errorf(CodeRigFile, err, "%s", name)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errorf(CodeRigFile, err, "%s: one YAML document expected", name)
	}
	r.dir = filepath.Dir(name)
	if err := r.check(); err != nil {
		return nil, errorf(CodeRigFile, err, "%s", name)
	}
	return &r, nil
}

// check fills defaults and lists every problem at once.
func (r *RigFile) check() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if r.Config == "" {
		bad("config: required (the supervisor config to run)")
	}
	r.Config = r.abs(r.Config)
	if r.WorkDir == "" {
		r.WorkDir = r.dir
	}
	r.WorkDir = r.abs(r.WorkDir)
	r.TokenFile = r.abs(r.TokenFile)
	r.Agents.PasswordFile = r.abs(r.Agents.PasswordFile)
	if n := len(r.Agents.Names); n > 0 && n < MinAgentLogins {
		bad("agents.names: %d names, need at least %d (as many agents as a scenario uses)", n, MinAgentLogins)
	}
	if len(r.Agents.Names) > 0 && r.Agents.PasswordFile == "" {
		bad("agents.password_file: required with agents.names")
	}
	names := map[string]bool{}
	for _, n := range r.Agents.Names {
		switch {
		case n == "" || len(n) > 64 || strings.ContainsAny(n, "/+# ") || strings.IndexFunc(n, func(c rune) bool { return c < 0x20 || c == 0x7f }) >= 0:
			bad("agents.names: %q is not an agent name (1..64 bytes, no '/', '+', '#', spaces or control characters)", n)
		case names[n]:
			bad("agents.names: %q listed twice", n)
		}
		names[n] = true
	}
	if r.Broker != "" {
		if u, err := url.Parse(r.Broker); err != nil || u.Scheme == "" || u.Host == "" {
			bad("broker: %q is not a broker URL (tcp://host:1883)", r.Broker)
		}
	}
	if err := checkHTTPURL(r.ReadBack.URL); err != nil {
		bad("readback.url: %v", err)
	}
	switch t := r.ReadBack.Tolerance; {
	case t == 0:
		r.ReadBack.Tolerance = DefaultTolerance
	case t < 0 || math.IsNaN(t) || math.IsInf(t, 0):
		bad("readback.tolerance: %v: want a finite value >= 0", t)
	}
	switch s := r.ReadBack.Settle; {
	case s == 0:
		r.ReadBack.Settle = DefaultSettle
	case s < 0 || s > MaxSettle:
		bad("readback.settle: %v: want 0..%v", s, MaxSettle)
	}
	if r.Control.URL == "" {
		r.Control.URL = r.ReadBack.URL
	} else if err := checkHTTPURL(r.Control.URL); err != nil {
		bad("control.url: %v", err)
	}
	seen := map[Capability]bool{}
	for _, c := range r.Control.Inject {
		switch {
		case c == CapBrokerRestart || c == CapBrokerCrash:
			bad("control.inject: %q comes from broker_control, not the control URL", c)
		case !slices.Contains(Capabilities, c):
			bad("control.inject: unknown capability %q (known: nak, volts, estop, unplug)", c)
		case seen[c]:
			bad("control.inject: %q listed twice", c)
		}
		seen[c] = true
	}
	bc := r.BrokerControl
	if (len(bc.Stop) > 0 || len(bc.Kill) > 0) != (len(bc.Start) > 0) {
		bad("broker_control: start goes with stop or kill (or both), and neither without it")
	}
	for _, argv := range [][]string{bc.Stop, bc.Kill, bc.Start} {
		if len(argv) > 0 && strings.TrimSpace(argv[0]) == "" {
			bad("broker_control: a command's first word (the program) is empty")
		}
	}
	if r.Supply.Index != nil && (*r.Supply.Index < 0 || *r.Supply.Index > maxOutput) {
		bad("supply.index: %d: want 0..%d", *r.Supply.Index, maxOutput)
	}
	for _, name := range slices.Sorted(maps.Keys(r.Actuators)) {
		a := r.Actuators[name]
		if a.Output != nil && (*a.Output < 0 || *a.Output > maxOutput) {
			bad("actuators.%s.output: %d: want 0..%d", name, *a.Output, maxOutput)
		}
		for key, v := range map[string]*float64{"setup": a.Setup, "move": a.Move} {
			if v != nil && (math.IsNaN(*v) || math.IsInf(*v, 0)) {
				bad("actuators.%s.%s: not finite", name, key)
			}
		}
		if t := a.Tolerance; t != nil && (*t < 0 || math.IsNaN(*t) || math.IsInf(*t, 0)) {
			bad("actuators.%s.tolerance: %v: want a finite value >= 0", name, *t)
		}
		if a.Setup != nil && a.Move != nil && *a.Setup == *a.Move {
			bad("actuators.%s: setup and move are both %v: a saga must move it", name, *a.Setup)
		}
	}
	return errors.Join(errs...)
}

// Has reports whether the rig can make the injection c.
func (r *RigFile) Has(c Capability) bool {
	switch c {
	case CapBrokerRestart:
		return len(r.BrokerControl.Stop) > 0 && len(r.BrokerControl.Start) > 0
	case CapBrokerCrash:
		return len(r.BrokerControl.Kill) > 0 && len(r.BrokerControl.Start) > 0
	}
	return slices.Contains(r.Control.Inject, c)
}

func (r *RigFile) abs(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(r.dir, p)
}

func checkHTTPURL(s string) error {
	if s == "" {
		return errors.New("required")
	}
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q: want http://host:port", s)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q: no query or fragment", s)
	}
	return nil
}
