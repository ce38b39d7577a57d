package wiring

import (
	"os"
	"path/filepath"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// sim: simulated actuators and supplies in the world file sim.world.
func init() {
	Register(Kind{Name: "sim", OpenActuator: openSimActuator, OpenSupply: openSimSupply})
}

// World returns the simulated world of sim.world, opening it on first use
// (creating its directory): the sim drivers' shared state.
func World(e *Env) (*sim.World, error) {
	return Shared(e, "sim world", func() (*sim.World, error) {
		path := e.Config.Sim.World
		if dir := filepath.Dir(path); path != "" && dir != "" {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, err
			}
		}
		return sim.OpenWorld(path)
	})
}

func openSimActuator(e *Env, name string, a *config.Actuator) (actuators.Driver, error) {
	w, err := World(e)
	if err != nil {
		return nil, err
	}
	var d interface {
		actuators.Driver
		Err() error
	}
	switch a.Kind {
	case actuators.Servo:
		d = w.Servo(name, a.Initial, a.Section.(*config.SimActuator).Slew)
	case actuators.Digital:
		d = w.Digital(name, a.Initial)
	case actuators.PWM, actuators.Setpoint:
		d = w.Setpoint(name, a.Initial)
	case actuators.Pulse:
		d = w.Pulse(name)
	default:
		return nil, nil
	}
	return d, d.Err()
}

func openSimSupply(e *Env, name string, s *config.Supply) (VoltSource, error) {
	w, err := World(e)
	if err != nil {
		return nil, err
	}
	return w.Supply(name, s.Section.(*config.SimSupply).Volts), nil
}
