package config_test

import (
	"testing"

	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

func init() {
	badConfigs = append(badConfigs, []struct {
		name string
		yaml string
		want []string
	}{
		{"home assistant user not an allowed agent", `
device: arm1
agents:
  allow:
    planner: {}
mqtt:
  home_assistant:
    enabled: true
    user: hass #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`mqtt.home_assistant.user: "hass" is not under agents.allow`}},
		{"home assistant discovery prefix with a wildcard", `
device: arm1
mqtt:
  home_assistant:
    discovery_prefix: ha/+ #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`mqtt.home_assistant.discovery_prefix: "ha/+"`}},
		{"fleet period and viewers", `
device: arm1
agents:
  allow:
    planner: {}
mqtt:
  fleet:
    period: 100ms #!
    viewers:
      - planner #!
      - watch
      - watch #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`mqtt.fleet.period: 100ms is outside 1s..1h0m0s`, `mqtt.fleet.viewers[0]: "planner" is also an agent`, `mqtt.fleet.viewers[2]: "watch" is listed twice`}},
	}...)
}

func TestFleetAndHomeAssistantDefaults(t *testing.T) {
	c, err := config.Parse([]byte(minimal), "m.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h, f := c.MQTT.HomeAssistant, c.MQTT.Fleet
	if h.Enabled || f.Enabled || h.DiscoveryPrefix != "homeassistant" || h.User != "homeassistant" || f.Period.Seconds() != 5 {
		t.Errorf("defaults: home_assistant %+v, fleet %+v", h, f)
	}
	ok := minimal + `
agents:
  allow:
    hass: {actuators: [], ops: []}
mqtt:
  home_assistant: {enabled: true, user: hass}
  fleet: {enabled: true, period: 2s, viewers: [fleet]}
`
	if _, err := config.Parse([]byte(ok), "ok.yaml"); err != nil {
		t.Errorf("a halt-only Home Assistant agent and a viewer refused: %v", err)
	}
}
