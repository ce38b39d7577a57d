package supervisor

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/approval"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/supervisor/lease"
	"github.com/saga-supervisor/saga-supervisor/supervisor/wiring"
)

// Built is what FromConfig made: the Supervisor's options, and the drivers'
// shared resources — the simulated world, serial links, I2C buses, the MQTT
// device link — closed after the Supervisor.
type Built struct {
	Options Options
	World   *sim.World
	env     *wiring.Env
}

// Close releases what FromConfig opened.
func (b *Built) Close() error { return b.env.Close() }

// PendingBoards names the serial boards WaitBoards is still to wait for.
func (b *Built) PendingBoards() []string { return b.env.PendingBoards() }

// WaitBoards waits for the serial boards FromConfigWith opened with
// BuildOptions.DeferBoardWait (wiring.Env.WaitBoards): at most about 3 s,
// all boards at once. Its error — a board whose channel table the
// configuration contradicts — means the supervisor must not start.
func (b *Built) WaitBoards() error { return b.env.WaitBoards() }

// FromConfig builds actuators and supplies with their drivers (package
// supervisor/wiring opens each kind), and every other option, from a
// configuration.
func FromConfig(cfg *config.Config, lg *slog.Logger) (*Built, error) {
	return FromConfigWith(cfg, lg, BuildOptions{})
}

// BuildOptions are what FromConfigWith takes beyond the configuration.
type BuildOptions struct {
	// BrokerUp, if set, is closed once the embedded broker listens on its
	// address (embedded.Broker.Up): MQTT-attached actuators dial it only
	// then, never a stranger's broker holding the port meanwhile.
	BrokerUp <-chan struct{}
	// DeferBoardWait leaves the wait for the serial boards to answer to
	// Built.WaitBoards, which the caller must call before recovery (the
	// daemon: once the journal is open and HTTP serves).
	DeferBoardWait bool
}

// FromConfigWith is FromConfig with bo.
func FromConfigWith(cfg *config.Config, lg *slog.Logger, bo BuildOptions) (*Built, error) {
	line := &HaltLine{}
	if cfg.EStop.Zone != "" {
		line.Zones = map[string]string{"estop": cfg.EStop.Zone}
	}
	env := wiring.NewEnv(cfg, lg, line.Trigger)
	env.BrokerUp = bo.BrokerUp
	env.DeferBoardWait = bo.DeferBoardWait
	b := &Built{env: env}
	fail := func(err error) (*Built, error) {
		b.Close()
		return nil, err
	}
	// The world is opened whatever the drivers: the demo and the tests
	// reach into it.
	world, err := wiring.World(env)
	if err != nil {
		return fail(err)
	}
	b.World = world
	var list []*actuators.Actuator
	for _, name := range cfg.ActuatorNames() {
		a := cfg.Actuators[name]
		d, err := wiring.OpenActuator(env, name, &a)
		if err != nil {
			return fail(fmt.Errorf("%s: actuators.%s: %w", cfg.Where("actuators."+name), name, err))
		}
		list = append(list, a.Actuator(name, d))
	}
	reg, err := actuators.NewRegistry(list...)
	if err != nil {
		return fail(err)
	}
	supplies := NewSupplies()
	for _, name := range cfg.SupplyNames() {
		sc := cfg.Supplies[name]
		src, err := wiring.OpenSupply(env, name, &sc)
		if err != nil {
			return fail(fmt.Errorf("%s: supplies.%s: %w", cfg.Where("supplies."+name), name, err))
		}
		if err := supplies.Add(sc.Spec(name), src); err != nil {
			return fail(err)
		}
	}
	es, err := wiring.OpenEStop(env)
	if es != nil {
		// Even a pin that failed to open is watched: it reports not
		// ready (fail closed) rather than stopping the daemon, so
		// status shows why.
		env.Watch(es)
	}
	if err != nil {
		if es == nil {
			return fail(fmt.Errorf("%s: estop: %w", cfg.Where("estop"), err))
		}
		env.Logger.Error("e-stop", "pin", cfg.EStop.Pin, "err", err)
	}
	var inputs []Input
	for _, in := range env.Inputs() {
		inputs = append(inputs, in)
	}
	b.Options = Options{
		Actuators:      reg,
		Supplies:       supplies,
		JournalDir:     cfg.Journal.Dir,
		WAL:            cfg.Journal.WALOptions(),
		Checkpoint:     cfg.Journal.CheckpointOptions(),
		Engine:         cfg.RollbackConfig(),
		Leases:         lease.Options{DefaultTTL: cfg.Leases.DefaultTTL, MinTTL: cfg.Leases.MinTTL, MaxTTL: cfg.Leases.MaxTTL},
		Ingress:        cfg.Agents.IngressOptions(),
		ResetToken:     cfg.HTTP.ResetToken.Reveal(),
		ResetTokenFile: tokenFile(cfg.HTTP),
		RemoteReset:    cfg.MQTT.AllowReset,
		Permissions:    permissionsOf(cfg.Agents.Allow),
		AutoQuarantine: AutoQuarantine{AfterRefusals: cfg.Agents.Quarantine.AfterRefusals, Window: cfg.Agents.Quarantine.Window},
		Logger:         lg,
		Inputs:         inputs,
		HaltLine:       line,
		SupplyZones:    supplyZones(cfg),
		InputZones:     line.Zones,
	}
	if len(cfg.Approvals.Keys) > 0 || len(cfg.ApprovalRequired()) > 0 {
		a := &Approvals{Device: cfg.Device, Required: map[string]int{}}
		for _, n := range cfg.ApprovalRequired() {
			a.Required[n] = int(cfg.Actuators[n].RequiresApproval)
		}
		if len(cfg.Approvals.Keys) > 0 {
			v, err := approval.NewVerifier(cfg.Approvals.Keys, cfg.Approvals.MaxTTL)
			if err != nil {
				return fail(fmt.Errorf("%s: %w", cfg.Where("approvals"), err))
			}
			a.Verifier = v
		}
		b.Options.Approvals = a
	}
	return b, nil
}

// supplyZones is supplies.<name>.zone, by supply.
func supplyZones(cfg *config.Config) map[string]string {
	out := map[string]string{}
	for _, name := range cfg.SupplyNames() {
		if z := cfg.Supplies[name].Zone; z != "" {
			out[name] = z
		}
	}
	return out
}

// permissionsOf turns agents.allow into the supervisor's table, keeping
// omitted lists nil (everything) apart from empty ones (nothing).
func permissionsOf(allow map[string]config.Permission) map[string]Permission {
	if len(allow) == 0 {
		return nil
	}
	out := make(map[string]Permission, len(allow))
	for name, p := range allow {
		var ops []api.Op
		if p.Ops != nil {
			ops = make([]api.Op, len(p.Ops))
			for i, op := range p.Ops {
				ops[i] = api.Op(op)
			}
		}
		out[name] = Permission{Actuators: p.Actuators, Ops: ops}
	}
	return out
}

// tokenFile is where the operator token in effect is kept, as an absolute
// path (a relative one means nothing to a browser), or "" when the token
// in effect is not from a file.
func tokenFile(h config.HTTP) string {
	p := h.OperatorTokenFile()
	if p == "" || h.ResetToken == "" {
		return ""
	}
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}
