//go:build !saga_lean

package hil

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/supervisor/wiring"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
)

// Plan is what the scenarios need to know about a rig, worked out from the
// rig file and the supervisor config it names: where to reach the
// supervisor, which actuators to drive where, and which supply to sag.
type Plan struct {
	Config *config.Config
	Token  string // the operator token
	// Agents are broker logins (agent names) and their password; none:
	// anonymous agents with made-up names.
	Agents        []string
	AgentPassword string
	Broker        string      // MQTT broker URL for agents
	HTTP          string      // host:port of the supervisor's HTTP endpoints
	Topics        mqtt.Topics // the supervisor's topics
	// Actuators under test, by read-back output. At least two.
	Actuators []PlannedActuator
	// Supply is the supply the sag scenario drives; nil if there is none.
	Supply *PlannedSupply
}

// PlannedActuator is one actuator under test.
type PlannedActuator struct {
	Name     string
	Driver   string  // its driver in the config (sim, mcu, gpio, mqtt)
	Clamp    bool    // policy clamp: over-limit values are moved inside, not refused
	Output   int     // index in the read-back's outputs; channel at the control URL
	Min, Max float64 // its limits
	Initial  float64
	Safe     actuators.SafePolicy
	// Setup is the committed pose every scenario starts from; Move is
	// where a scenario's saga drives it. Both lie in [Min, Max], differ
	// from each other and from a safe value, so "back at the prior" and
	// "at the safe value" can be told apart.
	Setup, Move float64
	// MaxStep and MaxRate are the actuator's max_step and max_rate (0:
	// none): the scenarios walk in steps no larger, paced no faster.
	MaxStep, MaxRate float64
	// Tolerance is how close its read-back must be (actuator units).
	Tolerance float64
}

// PlannedSupply is the supply under test.
type PlannedSupply struct {
	Name       string
	Index      int // at the control URL (POST /volts?supply=I)
	Min, Max   float64
	Hysteresis float64
	Debounce   time.Duration
	Action     limits.Action
}

// NewPlan works out the plan for rig file r on the loaded supervisor config
// cfg. Every problem is listed at once.
func NewPlan(r *RigFile, cfg *config.Config) (*Plan, error) {
	p := &Plan{Config: cfg, Topics: mqtt.Topics{Prefix: cfg.MQTT.Prefix, Device: cfg.Device}}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	switch {
	case r.TokenFile != "":
		b, err := os.ReadFile(r.TokenFile)
		if err != nil {
			bad("token_file: %v", err)
		}
		p.Token = strings.TrimSpace(string(b))
		if err == nil && p.Token == "" {
			bad("token_file %s: empty", r.TokenFile)
		}
	case cfg.HTTP.ResetToken.Reveal() != "":
		p.Token = cfg.HTTP.ResetToken.Reveal()
	default:
		bad("no operator token: set token_file in the rig file or http.reset_token_file in the config")
	}
	if len(r.Agents.Names) > 0 {
		p.Agents = r.Agents.Names
		b, err := os.ReadFile(r.Agents.PasswordFile)
		if err != nil {
			bad("agents.password_file: %v", err)
		}
		p.AgentPassword = strings.TrimSpace(string(b))
	}
	if cfg.HTTP.Listen == "" {
		bad("the config has no HTTP listener (http.listen): the scenarios watch /readyz and /api/v1/status")
	} else {
		p.HTTP = loopbackIfAny(cfg.HTTP.Listen)
	}
	switch {
	case r.Broker != "":
		p.Broker = r.Broker
	case cfg.MQTT.Broker == "embedded":
		p.Broker = "tcp://" + loopbackIfAny(cfg.MQTT.Listen)
	default:
		p.Broker = cfg.MQTT.Broker
	}

	names := slices.Sorted(maps.Keys(r.Actuators))
	derived := len(names) == 0
	if derived {
		for _, n := range cfg.ActuatorNames() {
			if cfg.Actuators[n].Driver == "mcu" && cfg.Actuators[n].Kind.Reversible() {
				names = append(names, n)
			}
		}
	}
	outputs := map[int]string{}
	for _, n := range names {
		a, ok := cfg.Actuators[n]
		if !ok {
			bad("actuators.%s: no such actuator in %s", n, r.Config)
			continue
		}
		if !a.Kind.Reversible() {
			bad("actuators.%s: a %s cannot be undone, so no scenario can check its unwind", n, a.Kind)
			continue
		}
		spec := r.Actuators[n]
		pa := PlannedActuator{Name: n, Driver: a.Driver, Clamp: a.Policy == limits.Clamp, Min: a.Min, Max: a.Max, Initial: a.Initial, Safe: a.Safe,
			MaxStep: a.MaxStep, MaxRate: a.MaxRate, Tolerance: r.ReadBack.Tolerance}
		if spec.Tolerance != nil {
			pa.Tolerance = *spec.Tolerance
		}
		switch {
		case spec.Output != nil:
			pa.Output = *spec.Output
		case a.Driver == "mcu":
			pa.Output = a.Section.(*wiring.MCUActuator).Channel
		default:
			bad("actuators.%s: driver %s: give its read-back output", n, a.Driver)
			continue
		}
		if other, dup := outputs[pa.Output]; dup {
			bad("actuators.%s: output %d is also %s's", n, pa.Output, other)
			continue
		}
		outputs[pa.Output] = n
		if err := pa.pickPoses(spec); err != nil {
			bad("actuators.%s: %v", n, err)
			continue
		}
		p.Actuators = append(p.Actuators, pa)
	}
	sort.Slice(p.Actuators, func(i, j int) bool { return p.Actuators[i].Output < p.Actuators[j].Output })
	if len(errs) == 0 && len(p.Actuators) < 2 {
		bad("%d actuator(s) under test, need at least two (an unwind must undo one step after another)", len(p.Actuators))
	}

	supply := r.Supply.Name
	if supply == "" {
		for _, n := range cfg.SupplyNames() {
			if cfg.Supplies[n].Driver == "mcu" {
				supply = n
				break
			}
		}
	}
	if supply != "" {
		s, ok := cfg.Supplies[supply]
		switch {
		case !ok:
			bad("supply.name: no supply %q in %s", supply, r.Config)
		case r.Supply.Index == nil && s.Driver != "mcu":
			bad("supply %s: driver %s: give supply.index, its index at the control URL", supply, s.Driver)
		default:
			ps := &PlannedSupply{Name: supply, Index: mcuSupplyIndex(s), Min: s.MinVolts, Max: s.MaxVolts,
				Hysteresis: s.HysteresisVolts, Debounce: s.Debounce, Action: s.Action}
			if r.Supply.Index != nil {
				ps.Index = *r.Supply.Index
			}
			p.Supply = ps
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, errorf(CodeRigConfig, err, "config %s", r.Config)
	}
	return p, nil
}

// pickPoses sets Setup and Move from the overrides or picks them inside the
// limits, away from the safe value, the initial value and each other.
func (a *PlannedActuator) pickPoses(spec ActuatorSpec) error {
	avoid := []float64{a.Initial}
	if a.Safe.Mode == actuators.SafeValue {
		avoid = append(avoid, a.Safe.Value)
	}
	clash := func(v float64) bool {
		for _, x := range avoid {
			if math.Abs(v-x) < 1e-9 {
				return true
			}
		}
		return false
	}
	pick := func(given *float64, what string, ok func(float64) bool, extra ...float64) (float64, error) {
		if given != nil {
			v := *given
			if v < a.Min || v > a.Max {
				return 0, fmt.Errorf("%s %v: outside [%v, %v]", what, v, a.Min, a.Max)
			}
			if clash(v) {
				return 0, fmt.Errorf("%s %v: equals the initial or safe value or the setup, so an unwind and a halt could not be told apart", what, v)
			}
			if !ok(v) {
				return 0, fmt.Errorf("%s %v: more than max_step %v from setup %v", what, v, a.MaxStep, a.Setup)
			}
			return v, nil
		}
		var cands []float64
		for _, f := range []float64{0.25, 0.5, 0.75, 0.4, 0.6, 0.15, 0.85, 0.1, 0.9} {
			cands = append(cands, roundNice(a.Min+f*(a.Max-a.Min), a.Max-a.Min))
		}
		for _, v := range append(cands, extra...) {
			if v >= a.Min && v <= a.Max && !clash(v) && ok(v) {
				return v, nil
			}
		}
		return 0, fmt.Errorf("no %s value in [%v, %v] away from its initial and safe values (and within max_step of the setup): give one in the rig file", what, a.Min, a.Max)
	}
	anywhere := func(float64) bool { return true }
	var err error
	if a.Setup, err = pick(spec.Setup, "setup", anywhere); err != nil {
		return err
	}
	avoid = append(avoid, a.Setup)
	near := func(v float64) bool { return a.MaxStep <= 0 || math.Abs(v-a.Setup) <= a.MaxStep+1e-9 }
	if a.Move, err = pick(spec.Move, "move", near, a.Setup+a.MaxStep, a.Setup-a.MaxStep, a.Setup+a.MaxStep/2, a.Setup-a.MaxStep/2); err != nil {
		return err
	}
	return nil
}

// roundNice rounds v to whole units on a wide range and to thousandths
// (what the serial link carries) on a narrow one, such as a duty cycle.
func roundNice(v, span float64) float64 {
	if span >= 10 {
		return math.Round(v)
	}
	return math.Round(v*1000) / 1000
}

// loopbackIfAny turns a wildcard listen address into one a client on this
// machine can dial.
func loopbackIfAny(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// mcuSupplyIndex is the MCU's index of a supply with driver: mcu, else 0.
func mcuSupplyIndex(s config.Supply) int {
	if m, ok := s.Section.(*wiring.MCUSupply); ok {
		return m.Supply
	}
	return 0
}
