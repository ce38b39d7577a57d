package config

import (
	"strings"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/internal/mqtttopic"
)

// The two driver kinds whose sections this package knows itself: sim,
// which the embedded default uses, and mqtt, whose topics and users the
// broker's ACL and logins are made from. Package supervisor/wiring opens
// their drivers like every other kind's.
func init() {
	all := []actuators.Kind{actuators.Servo, actuators.PWM, actuators.Digital, actuators.Setpoint, actuators.Pulse}
	Register(Driver{
		Name: driverSim, Kinds: all,
		Section: func() any { return &SimActuator{Slew: 720} }, Check: checkSimActuator,
		Supply: true, SupplySection: func() any { return &SimSupply{} }, CheckSupply: checkSimSupply,
	})
	Register(Driver{Name: driverMQTT, Kinds: all, Section: func() any { return &MQTTActuator{} }, Check: checkMQTTActuator})
}

func checkSimActuator(c *Check) {
	s := c.Section.(*SimActuator)
	if !c.Set("sim.slew") {
		if c.Actuator.Kind != actuators.Servo {
			s.Slew = 0
		}
		return
	}
	if !c.OK("sim.slew", "kind") {
		return
	}
	if c.Actuator.Kind != actuators.Servo {
		c.Errorf("sim.slew", "slew applies to servos only, not %s", c.Actuator.Kind)
	} else if s.Slew < 0 {
		c.Errorf("sim.slew", "must not be negative (0: no slew limit)")
	}
}

func checkSimSupply(c *Check) {
	if s := c.Section.(*SimSupply); !c.Set("sim.volts") {
		s.Volts = (c.Supply.MinVolts + c.Supply.MaxVolts) / 2
	}
}

// checkMQTTActuator checks an MQTT-attached actuator: its device user and
// its topics, which must be its own — a set topic shared by two actuators
// would move both, and an ack or state topic could not tell whose it is.
func checkMQTTActuator(c *Check) {
	if !c.Set("mqtt") {
		c.Errorf("driver", "driver: mqtt needs an mqtt section with set_topic and ack_topic")
		return
	}
	if !c.OK("mqtt") {
		return
	}
	m, cfg := c.Section.(*MQTTActuator), c.Config
	if c.Set("mqtt.user") && c.OK("mqtt.user") {
		if err := checkName(m.User); err != nil {
			c.Errorf("mqtt.user", "%v", err)
		} else if m.User == cfg.MQTT.ClientID || strings.HasPrefix(m.User, cfg.MQTT.ClientID+"-") {
			c.Errorf("mqtt.user", "%q is the supervisor's own MQTT user", m.User)
		}
	}
	own := cfg.Topic() + "/"
	topics := []struct {
		key, topic string
		required   bool
	}{{"set_topic", m.SetTopic, true}, {"ack_topic", m.AckTopic, true}, {"state_topic", m.StateTopic, false}}
	for i, t := range topics {
		rel := "mqtt." + t.key
		if !c.OK(rel) {
			continue
		}
		if !c.Set(rel) {
			if t.required {
				c.Errorf(rel, "required with driver: mqtt")
			}
			continue
		}
		if err := mqtttopic.CheckPublish(t.topic); err != nil {
			c.Errorf(rel, "%v", err)
			continue
		}
		if c.d.ok("mqtt.prefix", "device") && (t.topic+"/" == own || strings.HasPrefix(t.topic, own)) {
			c.Errorf(rel, "%.60q lies under %s, which the supervisor's own API uses", t.topic, own)
			continue
		}
		for _, u := range topics[:i] {
			if u.topic == t.topic && c.Set("mqtt."+u.key) {
				c.Errorf(rel, "is the same topic as %s: set, ack and state topics must differ", u.key)
			}
		}
		if by, ok := c.Claim("mqtt topic "+t.topic, rel); !ok {
			c.Errorf(rel, "%.60q is already used by %s; every MQTT actuator needs topics of its own", t.topic, by)
		}
	}
}
