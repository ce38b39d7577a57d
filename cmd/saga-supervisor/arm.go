package main

import (
	"fmt"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim"
	"github.com/saga-supervisor/saga-supervisor/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/supervisor"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// arm is the embedded default robot (config.Default: a small arm of four
// servos on a battery) on simulated drivers whose world persists to a
// file. demo and recover run on it.
type arm struct {
	built    *supervisor.Built
	world    *sim.World
	servos   map[string]*sim.Servo // the same devices the registry drives, for fault injection
	reg      *actuators.Registry
	supplies *supervisor.Supplies
}

// openArm builds the default robot on the world file (the arm starts at its
// initial pose if the file is new). wrap, if set, may decorate each driver.
func openArm(worldPath string, wrap func(name string, d actuators.Driver) actuators.Driver) (*arm, error) {
	cfg := config.Default()
	cfg.Sim.World = worldPath
	b, err := supervisor.FromConfig(cfg, nil)
	if err != nil {
		return nil, err
	}
	a := &arm{built: b, world: b.World, servos: map[string]*sim.Servo{}, reg: b.Options.Actuators, supplies: b.Options.Supplies}
	for _, name := range a.reg.Names() {
		act := a.reg.Get(name)
		if s, ok := act.Driver.(*sim.Servo); ok {
			a.servos[name] = s
		}
		if wrap != nil {
			act.Driver = wrap(name, act.Driver)
		}
	}
	return a, nil
}

func (a *arm) Close() error { return a.built.Close() }

// showWorld prints what the world file shows is left standing. It opens the
// file afresh, so what it prints is what a next process would find.
func showWorld(path string) error {
	w, err := sim.OpenWorld(path)
	if err != nil {
		return err
	}
	defer w.Close()
	fmt.Print(cli.Indent(w.Format()))
	return nil
}
