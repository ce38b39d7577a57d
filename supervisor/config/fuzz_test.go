package config_test

import (
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// FuzzParse checks that Parse never panics, that every error it returns
// names the file, and that whatever it accepts is enforceable: the specs it
// yields pass the checks of the packages that enforce them, and start-up
// and safe values lie within bounds.
func FuzzParse(f *testing.F) {
	f.Add(config.DefaultYAML)
	f.Add([]byte(minimal))
	// Hardware taken twice and pins a board lacks (the drivers' claims).
	f.Add([]byte("device: a\nboard: raspberry-pi-4\nestop: {driver: gpio, pin: \"17\"}\nsupplies:\n  s: {driver: ina219, i2c: {bus: I2C1}, min_volts: 1, max_volts: 2}\n" +
		"actuators:\n  p: {kind: digital, driver: gpio, gpio: {pin: GPIO17}}\n  q: {kind: pwm, driver: pca9685, pca9685: {bus: \"1\", channel: 0}}\n" +
		"  r: {kind: digital, driver: gpio, gpio: {pin: P1_3}}\n"))
	for _, tc := range badConfigs {
		f.Add([]byte(tc.yaml))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.Parse(data, "fuzz.yaml")
		if err != nil {
			if c != nil {
				t.Fatal("config returned with an error")
			}
			for _, e := range errorList(err) {
				if !strings.HasPrefix(e.Error(), "fuzz.yaml") {
					t.Fatalf("error does not name the file: %q", e)
				}
			}
			return
		}
		if len(c.ActuatorNames()) == 0 || c.Device == "" {
			t.Fatal("accepted a config with no device or no actuator")
		}
		for _, name := range c.SupplyNames() {
			if err := c.Supplies[name].Spec(name).Validate(); err != nil {
				t.Fatalf("supply %s accepted but invalid: %v", name, err)
			}
		}
		for _, name := range c.ActuatorNames() {
			a := c.Actuators[name]
			s := a.LimitsSpec()
			if err := s.Validate(); err != nil {
				t.Fatalf("actuator %s accepted but invalid: %v", name, err)
			}
			if !a.Kind.Valid() || a.Initial < s.Min || a.Initial > s.Max || a.Timeout <= 0 {
				t.Fatalf("actuator %s accepted: %+v", name, a)
			}
			if a.Safe.Mode == actuators.SafeValue && (a.Safe.Value < s.Min || a.Safe.Value > s.Max || a.Kind == actuators.Pulse) {
				t.Fatalf("actuator %s: safe value accepted: %+v", name, a)
			}
			if _, ok := c.Supplies[s.Supply]; s.Supply != "" && !ok {
				t.Fatalf("actuator %s: unknown supply accepted", name)
			}
		}
		l := c.Leases
		if l.MinTTL < config.MinLeaseTTL || l.MaxTTL > config.MaxLeaseTTL || l.DefaultTTL < l.MinTTL || l.DefaultTTL > l.MaxTTL {
			t.Fatalf("leases accepted: %+v", l)
		}
	})
}
