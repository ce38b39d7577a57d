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
	slew := 0.0
	if s, ok := a.Section.(*config.SimActuator); ok {
		slew = s.Slew
	}
	d, ok := w.ForKind(name, a.Kind, a.Initial, slew)
	if !ok {
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
