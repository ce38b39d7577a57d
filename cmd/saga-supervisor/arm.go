package main

import (
	"fmt"
	"sync"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim"
	"github.com/saga-supervisor/saga-supervisor/limits"
)

// The embedded default robot: a small arm and its battery, on simulated
// drivers whose world persists to a file. Until configuration files exist,
// demo and recover run on it.

// armJoint describes one actuator of the demo arm.
type armJoint struct {
	name     string
	min, max float64
	initial  float64
	slew     float64 // degrees per second the sim servo moves at
	safe     actuators.SafePolicy
}

var armJoints = []armJoint{
	{"base", -90, 90, 0, 720, actuators.SafePolicy{Mode: actuators.SafeHold}},
	{"shoulder", 0, 120, 10, 720, actuators.SafePolicy{Mode: actuators.SafeValue, Value: 10}},
	{"elbow", 0, 135, 20, 720, actuators.SafePolicy{Mode: actuators.SafeValue, Value: 45}},
	{"gripper", 0, 60, 0, 720, actuators.SafePolicy{Mode: actuators.SafeDetach}},
}

var batterySpec = limits.SupplySpec{
	Name: "battery", MinVolts: 6.4, MaxVolts: 8.6, HysteresisVolts: 0.2,
	Debounce: 200 * time.Millisecond, StaleAfter: 2 * time.Second, Action: limits.Halt,
}

// arm is the demo arm opened on a world file.
type arm struct {
	world    *sim.World
	servos   map[string]*sim.Servo
	battery  *sim.Supply
	reg      *actuators.Registry
	supplies *supplyMonitor
}

// openArm opens the world file (creating the arm at its initial pose if the
// file is new) and builds the actuator registry. wrap, if set, may decorate
// each driver.
func openArm(worldPath string, wrap func(name string, d actuators.Driver) actuators.Driver) (*arm, error) {
	w, err := sim.OpenWorld(worldPath)
	if err != nil {
		return nil, err
	}
	a := &arm{world: w, servos: map[string]*sim.Servo{}}
	var list []*actuators.Actuator
	for _, j := range armJoints {
		s := w.Servo(j.name, j.initial, j.slew)
		if err := s.Err(); err != nil {
			w.Close()
			return nil, err
		}
		a.servos[j.name] = s
		var d actuators.Driver = s
		if wrap != nil {
			d = wrap(j.name, s)
		}
		list = append(list, &actuators.Actuator{
			Name: j.name, Kind: actuators.Servo, Initial: j.initial, Safe: j.safe, Driver: d,
			Timeout: 200 * time.Millisecond,
			Limits:  limits.Spec{Min: j.min, Max: j.max, Supply: "battery", SupplyMinVolts: 6.6},
		})
	}
	a.battery = w.Supply("battery", 7.4)
	if a.reg, err = actuators.NewRegistry(list...); err != nil {
		w.Close()
		return nil, err
	}
	mon, err := limits.NewSupply(batterySpec)
	if err != nil {
		w.Close()
		return nil, err
	}
	a.supplies = &supplyMonitor{src: map[string]*sim.Supply{"battery": a.battery}, mon: map[string]*limits.Supply{"battery": mon}}
	return a, nil
}

func (a *arm) Close() error { return a.world.Close() }

// supplyMonitor feeds supply readings into their debounced state machines
// and answers the engine's supply gate.
type supplyMonitor struct {
	mu  sync.Mutex
	src map[string]*sim.Supply
	mon map[string]*limits.Supply
}

func (m *supplyMonitor) SupplyState(name string, now time.Time) (limits.SupplyState, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	src, mon := m.src[name], m.mon[name]
	if src == nil || mon == nil {
		return limits.SupplyState{}, false
	}
	if v, at, err := src.Volts(); err == nil {
		mon.Observe(v, at)
	}
	return mon.State(now), true
}

// showWorld prints what the world file shows is left standing. It opens the
// file afresh, so what it prints is what a next process would find.
func showWorld(path string) error {
	w, err := sim.OpenWorld(path)
	if err != nil {
		return err
	}
	defer w.Close()
	fmt.Print(indent(w.Format()))
	return nil
}
