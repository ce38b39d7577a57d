package prove

import (
	"context"
	"fmt"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// simDevice is one actuator's simulated device.
type simDevice struct {
	kind   actuators.Kind
	driver actuators.Driver
	faults *sim.Faults
	reader actuators.ReadBacker // nil for a pulse
	pulse  *sim.Pulse           // set for a pulse
}

// rig is the simulated robot one probe runs on: a world in memory on a
// virtual clock, with a device for every actuator and supply of the config.
// The world outlives the supervisor processes that drive it, as a robot
// outlives a crashed daemon.
type rig struct {
	cfg      *config.Config
	clock    *virtualClock
	world    *sim.World
	devices  map[string]*simDevice
	supplies map[string]*sim.Supply
}

func newRig(cfg *config.Config) (*rig, error) {
	clk := &virtualClock{base: time.Now()}
	r := &rig{cfg: cfg, clock: clk, world: sim.NewMemoryWorld(sim.WithClock(clk.Now)),
		devices: map[string]*simDevice{}, supplies: map[string]*sim.Supply{}}
	for _, name := range cfg.ActuatorNames() {
		a := cfg.Actuators[name]
		var d *simDevice
		var err error
		switch a.Kind {
		case actuators.Servo:
			slew := 0.0 // a substituted servo: the sim section is for sim drivers only
			if sa, ok := a.Section.(*config.SimActuator); ok {
				slew = sa.Slew
			}
			s := r.world.Servo(name, a.Initial, slew)
			d, err = &simDevice{driver: s, faults: &s.Faults, reader: s}, s.Err()
		case actuators.Digital:
			s := r.world.Digital(name, a.Initial)
			d, err = &simDevice{driver: s, faults: &s.Faults, reader: s}, s.Err()
		case actuators.PWM, actuators.Setpoint:
			s := r.world.Setpoint(name, a.Initial)
			d, err = &simDevice{driver: s, faults: &s.Faults, reader: s}, s.Err()
		case actuators.Pulse:
			s := r.world.Pulse(name)
			d, err = &simDevice{driver: s, faults: &s.Faults, pulse: s}, s.Err()
		default:
			err = fmt.Errorf("no simulated device for kind %q", a.Kind)
		}
		if err != nil {
			r.world.Close()
			return nil, fmt.Errorf("%s: actuators.%s: %w", cfg.Where("actuators."+name), name, err)
		}
		d.kind = a.Kind
		r.devices[name] = d
	}
	for _, name := range cfg.SupplyNames() {
		s := r.world.Supply(name, supplyVolts(cfg.Supplies[name]))
		if err := s.Err(); err != nil {
			r.world.Close()
			return nil, fmt.Errorf("%s: supplies.%s: %w", cfg.Where("supplies."+name), name, err)
		}
		r.supplies[name] = s
	}
	return r, nil
}

func (r *rig) Close() error { return r.world.Close() }

// supplyVolts is where a supply's simulated device holds: its sim voltage,
// or for a substituted hardware monitor (whose sim section is unused) the
// middle of its band, so that it permits motion as a healthy rail would.
func supplyVolts(s config.Supply) float64 {
	if ss, ok := s.Section.(*config.SimSupply); ok {
		return ss.Volts
	}
	return (s.MinVolts + s.MaxVolts) / 2
}

// deviceOf returns the device of step k (1-based).
func (r *rig) deviceOf(pr *prober, k int) *simDevice { return r.devices[pr.sc.Steps[k-1].Actuator] }

// clearFaults leaves every device healthy, as a restarted process finds
// them after reconnecting.
func (r *rig) clearFaults() {
	for _, d := range r.devices {
		d.faults.Clear()
	}
}

// readWorld reads every actuator: its position, or a pulse's kick count.
func (r *rig) readWorld() map[string]WorldView {
	out := map[string]WorldView{}
	for name, d := range r.devices {
		v := WorldView{Actuator: name, Kind: string(d.kind), Measure: "position"}
		if d.pulse != nil {
			v.Measure, v.End = "kicks", float64(d.pulse.Kicks())
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), callBound)
			pos, err := d.reader.ReadBack(ctx)
			cancel()
			v.End = pos
			if err != nil {
				v.Error = err.Error()
			}
		}
		out[name] = v
	}
	return out
}

// compareWorld lets every servo finish its move and reads the world
// against the start, in actuator name order.
func (r *rig) compareWorld(start map[string]WorldView) []WorldView {
	r.clock.Advance(settleTime)
	end := r.readWorld()
	var out []WorldView
	for _, name := range r.cfg.ActuatorNames() {
		v := end[name]
		v.Start = start[name].End
		if start[name].Error != "" {
			v.Error = "at start: " + start[name].Error
		}
		out = append(out, v)
	}
	return out
}
