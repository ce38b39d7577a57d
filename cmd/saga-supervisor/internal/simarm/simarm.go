// Package simarm is the embedded default robot (config.Default: a small
// arm of four servos on a battery) on simulated drivers whose world
// persists to a file, so that what one process leaves the next one finds.
// The demo and recover run on it.
package simarm

import (
	"fmt"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim"
	"github.com/saga-supervisor/saga-supervisor/supervisor"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// Arm is the embedded default robot on simulated drivers whose world
// persists to a file.
type Arm struct {
	Built    *supervisor.Built
	World    *sim.World
	Servos   map[string]*sim.Servo // the same devices the registry drives, for fault injection
	Registry *actuators.Registry
	Supplies *supervisor.Supplies
}

// Open builds the default robot on the world file (the arm starts at its
// initial pose if the file is new). wrap, if set, may decorate each driver.
func Open(worldPath string, wrap func(name string, d actuators.Driver) actuators.Driver) (*Arm, error) {
	cfg := config.Default()
	cfg.Sim.World = worldPath
	b, err := supervisor.FromConfig(cfg, nil)
	if err != nil {
		return nil, err
	}
	a := &Arm{Built: b, World: b.World, Servos: map[string]*sim.Servo{}, Registry: b.Options.Actuators, Supplies: b.Options.Supplies}
	for _, name := range a.Registry.Names() {
		act := a.Registry.Get(name)
		if s, ok := act.Driver.(*sim.Servo); ok {
			a.Servos[name] = s
		}
		if wrap != nil {
			act.Driver = wrap(name, act.Driver)
		}
	}
	return a, nil
}

// Close closes the drivers and the world file.
func (a *Arm) Close() error { return a.Built.Close() }

// ShowWorld prints on standard output what the world file shows is left standing. It opens the
// file afresh, so what it prints is what a next process would find.
func ShowWorld(path string) error {
	w, err := sim.OpenWorld(path)
	if err != nil {
		return err
	}
	defer w.Close()
	fmt.Print(cli.Indent(w.Format()))
	return nil
}
