package config

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Bounds of mqtt.fleet.period: a summary more often than every second is
// a flood on a shared broker; one less often than hourly is never fresh.
const (
	minFleetPeriod = time.Second
	maxFleetPeriod = time.Hour
)

// validateHomeAssistant checks mqtt.home_assistant. Its user must be able
// to log in and publish on its own e-stop topic: with agents.allow listed,
// only the agents listed can.
func (d *decoder) validateHomeAssistant(c *Config) {
	h := c.MQTT.HomeAssistant
	if d.ok("mqtt.home_assistant.discovery_prefix") {
		if err := checkTopicLevels(h.DiscoveryPrefix); err != nil {
			d.errorf("mqtt.home_assistant.discovery_prefix", "%v", err)
		}
	}
	if !d.ok("mqtt.home_assistant.user") {
		return
	}
	if err := checkName(h.User); err != nil {
		d.errorf("mqtt.home_assistant.user", "%v", err)
		return
	}
	if !h.Enabled {
		return
	}
	if d.ok("device", "mqtt.prefix") && h.DiscoveryPrefix != "" && strings.HasPrefix(c.MQTT.Prefix+"/", h.DiscoveryPrefix+"/") {
		d.errorf("mqtt.home_assistant.discovery_prefix", "%q holds the supervisor's own topics (%s): choose another", h.DiscoveryPrefix, c.MQTT.Prefix)
	}
	if u := deviceUser(c, h.User); u != "" {
		d.errorf("mqtt.home_assistant.user", "%q is also the MQTT user of actuator %s", h.User, u)
	}
	if h.User == c.MQTT.ClientID || (c.MQTT.Username != "" && h.User == c.MQTT.Username) {
		d.errorf("mqtt.home_assistant.user", "%q is the supervisor's own MQTT user", h.User)
	}
	if len(c.Agents.Allow) == 0 {
		return
	}
	p, ok := c.Agents.Allow[h.User]
	if !ok {
		d.errorf("mqtt.home_assistant.user", "%q is not under agents.allow: the broker would refuse Home Assistant's login and its halt button; add it with `%s: {actuators: [], ops: []}` (halt only)", h.User, h.User)
		return
	}
	if p.Ops == nil || len(p.Ops) > 0 || p.Actuators == nil || len(p.Actuators) > 0 {
		d.warnf("agents.allow."+h.User, "Home Assistant only halts: give it `actuators: []` and `ops: []`")
	}
}

// validateFleet checks mqtt.fleet.
func (d *decoder) validateFleet(c *Config) {
	f := c.MQTT.Fleet
	if d.ok("mqtt.fleet.period") && (f.Period < minFleetPeriod || f.Period > maxFleetPeriod) {
		d.errorf("mqtt.fleet.period", "%v is outside %v..%v", f.Period, minFleetPeriod, maxFleetPeriod)
	}
	for i, v := range f.Viewers {
		p := fmt.Sprintf("mqtt.fleet.viewers[%d]", i)
		if !d.ok(p) {
			continue
		}
		var clash string
		switch {
		case checkName(v) != nil:
			d.errorf(p, "%v", checkName(v))
			continue
		case slices.Index(f.Viewers, v) < i:
			clash = "listed twice"
		case hasKey(c.Agents.Allow, v):
			clash = "also an agent under agents.allow; a viewer only reads"
		case c.MQTT.HomeAssistant.Enabled && v == c.MQTT.HomeAssistant.User:
			clash = "also mqtt.home_assistant.user"
		case deviceUser(c, v) != "":
			clash = "also the MQTT user of actuator " + deviceUser(c, v)
		case v == c.MQTT.ClientID || v == c.MQTT.Username:
			clash = "the supervisor's own MQTT user"
		}
		if clash != "" {
			d.errorf(p, "%q is %s", v, clash)
		}
	}
}

func hasKey[V any](m map[string]V, k string) bool { _, ok := m[k]; return ok }

// checkTopicLevels checks a topic prefix outside the supervisor's own: one
// or more valid levels, no wildcards, not a broker's $-topic.
func checkTopicLevels(t string) error {
	switch {
	case t == "":
		return fmt.Errorf("must not be empty")
	case len(t) > 256:
		return fmt.Errorf("is longer than 256 bytes")
	case strings.HasPrefix(t, "$"):
		return fmt.Errorf("%q: a topic must not start with '$'", t)
	}
	for _, level := range strings.Split(t, "/") {
		if level == "" {
			return fmt.Errorf("%q has an empty topic level (a leading, trailing or double '/')", t)
		}
		if err := checkName(level); err != nil {
			return fmt.Errorf("%q: %w", t, err)
		}
	}
	return nil
}
