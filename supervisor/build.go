package supervisor

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/drivers/mqtt"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/supervisor/lease"
)

// Built is what FromConfig made: the Supervisor's options and the
// simulated world its sim drivers live in (closed after the Supervisor).
type Built struct {
	Options Options
	World   *sim.World
}

// Close releases what FromConfig opened.
func (b *Built) Close() error { return b.World.Close() }

// FromConfig builds actuators and supplies with their drivers, and every
// other option, from a configuration.
func FromConfig(cfg *config.Config, lg *slog.Logger) (*Built, error) {
	if dir := filepath.Dir(cfg.Sim.World); cfg.Sim.World != "" && dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
	}
	world, err := sim.OpenWorld(cfg.Sim.World)
	if err != nil {
		return nil, err
	}
	b := &Built{World: world}
	var list []*actuators.Actuator
	for _, name := range cfg.ActuatorNames() {
		a := cfg.Actuators[name]
		var d actuators.Driver
		var derr error
		switch a.Driver {
		case "sim":
			switch a.Kind {
			case actuators.Servo:
				s := world.Servo(name, a.Initial, a.Sim.Slew)
				d, derr = s, s.Err()
			case actuators.Digital:
				s := world.Digital(name, a.Initial)
				d, derr = s, s.Err()
			case actuators.PWM, actuators.Setpoint:
				s := world.Setpoint(name, a.Initial)
				d, derr = s, s.Err()
			case actuators.Pulse:
				s := world.Pulse(name)
				d, derr = s, s.Err()
			}
		default:
			derr = fmt.Errorf("driver %q is not available in this build", a.Driver)
		}
		if derr == nil && d == nil {
			derr = fmt.Errorf("no %s driver for kind %s", a.Driver, a.Kind)
		}
		if derr != nil {
			world.Close()
			return nil, fmt.Errorf("%s: actuators.%s: %w", cfg.Where("actuators."+name), name, derr)
		}
		list = append(list, a.Actuator(name, d))
	}
	reg, err := actuators.NewRegistry(list...)
	if err != nil {
		world.Close()
		return nil, err
	}
	supplies := NewSupplies()
	for _, name := range cfg.SupplyNames() {
		sc := cfg.Supplies[name]
		if sc.Driver != "sim" {
			world.Close()
			return nil, fmt.Errorf("%s: supplies.%s: driver %q is not available in this build", cfg.Where("supplies."+name), name, sc.Driver)
		}
		if err := supplies.Add(sc.Spec(name), world.Supply(name, sc.Sim.Volts)); err != nil {
			world.Close()
			return nil, err
		}
	}
	b.Options = Options{
		Actuators:  reg,
		Supplies:   supplies,
		JournalDir: cfg.Journal.Dir,
		WAL:        cfg.Journal.WALOptions(),
		Engine:     cfg.RollbackConfig(),
		Leases:     lease.Options{DefaultTTL: cfg.Leases.DefaultTTL, MinTTL: cfg.Leases.MinTTL, MaxTTL: cfg.Leases.MaxTTL},
		ResetToken: cfg.HTTP.ResetToken.Reveal(),
		Topics:     mqtt.Topics{Prefix: cfg.MQTT.Prefix, Device: cfg.Device},
		Logger:     lg,
	}
	return b, nil
}
