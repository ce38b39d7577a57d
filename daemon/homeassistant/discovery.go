// Package homeassistant builds Home Assistant's MQTT discovery configs for
// one supervisor (https://www.home-assistant.io/integrations/mqtt/,
// "MQTT Discovery"): retained JSON on
// <discovery_prefix>/<component>/<node_id>/<object_id>/config that makes
// Home Assistant show
//
//   - a halt button (button): it publishes a halt request on the
//     supervisor's e-stop topic of Home Assistant's own user,
//     <prefix>/<device>/estop/<user>, which the supervisor reads on its
//     e-stop connection like any other e-stop;
//   - readiness and halt (binary_sensor), from the retained status topic;
//   - each supply's voltage (sensor), from the retained fleet summary;
//   - each actuator's commanded position (sensor), from its retained
//     state/<actuator> topic.
//
// Every entity is available while the status topic says online: the
// supervisor's MQTT will puts offline there. There is no reset entity:
// reset needs the operator token. Templates are all {{ value_json.<key> }}
// (or ['<key>'] for a name that is not an identifier); Eval evaluates
// exactly that form, so tests check them against real payloads.
package homeassistant

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
)

// Actuator is one actuator as discovery shows it.
type Actuator struct {
	Name string
	Unit string // "" for none; "°" for a servo
}

// Options say what to announce.
type Options struct {
	DiscoveryPrefix string // default homeassistant
	Topics          mqtt.Topics
	User            string // Home Assistant's MQTT username (its e-stop topic)
	Version         string // sw_version
	Supplies        []string
	Actuators       []Actuator
}

// Message is one retained discovery config: an empty Payload deletes the
// entity (Home Assistant's convention).
type Message struct {
	Topic   string
	Payload []byte
}

// NodeID is the node_id level of a device's discovery topics: Home
// Assistant accepts only [a-zA-Z0-9_-] there, so other bytes become '_'
// and a short hash of the name keeps two such names apart.
func NodeID(device string) string { return objectID(device) }

func objectID(name string) string {
	var b strings.Builder
	clean := true
	for _, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
			b.WriteRune(c)
		default:
			b.WriteByte('_')
			clean = false
		}
	}
	if clean {
		return name
	}
	h := sha256.Sum256([]byte(name))
	return b.String() + "_" + hex.EncodeToString(h[:3])
}

// Configs returns the discovery configs, topics in a stable order.
func Configs(o Options) []Message {
	dp := o.DiscoveryPrefix
	if dp == "" {
		dp = "homeassistant"
	}
	t := o.Topics
	node := NodeID(t.Device)
	device := map[string]any{
		"identifiers":  []string{"saga-supervisor_" + node},
		"name":         t.Device,
		"model":        "saga-supervisor",
		"manufacturer": "saga-supervisor",
	}
	if o.Version != "" {
		device["sw_version"] = o.Version
	}
	var out []Message
	add := func(component, object string, cfg map[string]any) {
		id := objectID(object)
		cfg["unique_id"] = "saga_" + node + "_" + id
		cfg["object_id"] = "saga_" + node + "_" + id
		cfg["device"] = device
		cfg["availability_topic"] = t.Status()
		cfg["availability_template"] = "{{ value_json.state }}"
		cfg["payload_available"] = api.StateOnline
		cfg["payload_not_available"] = api.StateOffline
		b, err := json.Marshal(cfg)
		if err != nil {
			panic("homeassistant: encoding a config: " + err.Error())
		}
		out = append(out, Message{Topic: dp + "/" + component + "/" + node + "/" + id + "/config", Payload: b})
	}
	press, err := api.EncodeRequest(api.Request{ID: "homeassistant", Agent: o.User, Op: api.OpHalt, Reason: "Home Assistant halt button"})
	if err != nil {
		panic("homeassistant: encoding the halt request: " + err.Error())
	}
	add("button", "halt", map[string]any{
		"name": "Halt", "icon": "mdi:octagon", "command_topic": t.EstopAgent(o.User),
		"payload_press": string(press), "qos": 1, "retain": false,
	})
	add("binary_sensor", "ready", map[string]any{
		"name": "Ready", "device_class": "running", "state_topic": t.Status(),
		"value_template": Template("ready"), "payload_on": "True", "payload_off": "False",
	})
	add("binary_sensor", "halted", map[string]any{
		"name": "Halted", "device_class": "problem", "state_topic": t.Status(),
		"value_template": Template("halted"), "payload_on": "True", "payload_off": "False",
	})
	for _, s := range sorted(o.Supplies) {
		add("sensor", "supply_"+s, map[string]any{
			"name": "Supply " + s, "device_class": "voltage", "unit_of_measurement": "V", "state_class": "measurement",
			"state_topic": t.Summary(), "value_template": Template("supplies", s),
		})
	}
	for _, a := range o.Actuators {
		cfg := map[string]any{
			"name": "Position " + a.Name, "state_class": "measurement",
			"state_topic": t.State(a.Name), "value_template": Template("commanded"),
		}
		if a.Unit != "" {
			cfg["unit_of_measurement"] = a.Unit
		}
		add("sensor", "position_"+a.Name, cfg)
	}
	return out
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

// Template is the value_template reading the JSON path keys:
// {{ value_json.a.b }}, with ['k'] for a key that is not an identifier.
func Template(keys ...string) string {
	var b strings.Builder
	b.WriteString("{{ value_json")
	for _, k := range keys {
		if isIdent(k) {
			b.WriteString("." + k)
		} else {
			b.WriteString("['" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(k) + "']")
		}
	}
	b.WriteString(" }}")
	return b.String()
}

func isIdent(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for _, c := range s {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// Stale returns a deleting message (empty payload) for every retained
// discovery topic that configs no longer holds: an entity removed from
// the configuration, or one an older version announced.
func Stale(retained []string, configs []Message) []Message {
	keep := map[string]bool{}
	for _, m := range configs {
		keep[m.Topic] = true
	}
	var out []Message
	for _, t := range sorted(retained) {
		if !keep[t] {
			out = append(out, Message{Topic: t})
		}
	}
	return out
}
