package supervisor

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

const bindToken = "operator-token-0123456789abcdef-test"

func zoneOf(s *Supervisor, name string) ZoneJSON {
	for _, z := range s.Status().Zones {
		if z.Name == name {
			return z
		}
	}
	return ZoneJSON{}
}

// TestSupplyBoundToZone: a supply bound to a zone (supplies.<name>.zone,
// action halt) halts that zone on a trip, not the supervisor; its trip
// holds the zone's reset, not the supervisor's readiness.
func TestSupplyBoundToZone(t *testing.T) {
	s, b := newTestSupervisorWith(t, func(c *config.Config) {
		c.Agents.Allow = nil
		c.Zones = map[string][]string{"arm": {"shoulder", "elbow", "gripper"}, "base": {"base"}}
		bat := c.Supplies["battery"]
		bat.Zone, bat.Action = "arm", limits.Halt
		c.Supplies["battery"] = bat
	})
	waitFor(t, "ready", func() bool { return s.Status().Ready })
	battery := b.World.Supply("battery", 7.4)
	if err := battery.SetVolts(5.0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the trip to halt the arm", func() bool { return zoneOf(s, "arm").Halted })
	s.Engine().WaitZoneHalts()
	if h, _ := s.Engine().Halted(); h {
		t.Fatal("a trip bound to a zone latched the full halt")
	}
	if st := s.Status(); !st.Ready || zoneOf(s, "base").Halted {
		t.Errorf("ready %v %v, base %+v", st.Ready, st.Reasons, zoneOf(s, "base"))
	}
	err := s.ResetZone(bindToken, "test", "arm")
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeNotReady {
		t.Fatalf("zone reset while its supply is tripped: %v", err)
	}
	if err := battery.SetVolts(7.4); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the trip to clear", func() bool { return len(zoneOf(s, "arm").Held) == 0 })
	if err := s.ResetZone(bindToken, "test", "arm"); err != nil {
		t.Fatalf("zone reset after the supply cleared: %v", err)
	}
	if zoneOf(s, "arm").Halted {
		t.Error("the arm is still halted")
	}
}

// pressable is an e-stop input for tests.
type pressable struct{ down atomic.Bool }

func (p *pressable) Name() string { return "estop" }
func (p *pressable) Ready() error {
	if p.down.Load() {
		return errors.New("pressed")
	}
	return nil
}

// TestEStopBoundToZone: an e-stop bound to a zone (estop.zone) halts the
// zone through the HaltLine; while pressed it holds the zone's reset and
// not the supervisor's readiness.
func TestEStopBoundToZone(t *testing.T) {
	es := &pressable{}
	s, b := newTestSupervisorWith(t, func(c *config.Config) {
		c.Agents.Allow = nil
		c.Zones = map[string][]string{"arm": {"shoulder", "elbow", "gripper"}, "base": {"base"}}
	}, func(o *Options) {
		o.Inputs = append(o.Inputs, es)
		o.HaltLine.Zones = map[string]string{"estop": "arm"}
		o.InputZones = o.HaltLine.Zones
	})
	waitFor(t, "ready", func() bool { return s.Status().Ready })
	es.down.Store(true)
	b.Options.HaltLine.Trigger("estop", "e-stop pressed")
	s.Engine().WaitZoneHalts()
	if !zoneOf(s, "arm").Halted {
		t.Fatal("the zone's e-stop did not halt the zone")
	}
	if h, _ := s.Engine().Halted(); h {
		t.Fatal("the zone's e-stop latched the full halt")
	}
	s.Refresh()
	if st := s.Status(); !st.Ready {
		t.Errorf("a zone's pressed e-stop made the supervisor not ready: %v", st.Reasons)
	}
	err := s.ResetZone(bindToken, "test", "arm")
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeNotReady {
		t.Fatalf("zone reset while its e-stop is pressed: %v", err)
	}
	es.down.Store(false)
	if err := s.ResetZone(bindToken, "test", "arm"); err != nil {
		t.Fatalf("zone reset after the release: %v", err)
	}
}
