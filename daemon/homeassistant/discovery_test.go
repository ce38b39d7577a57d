package homeassistant

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
)

func TestConfigs(t *testing.T) {
	o := Options{Topics: mqtt.Topics{Device: "arm 1"}, User: "homeassistant", Version: "v9",
		Supplies: []string{"battery", "motor-rail"}, Actuators: []Actuator{{Name: "elbow", Unit: "°"}}}
	msgs := Configs(o)
	if len(msgs) != 3+2+1 {
		t.Fatalf("%d configs, want 6", len(msgs))
	}
	ids := map[string]bool{}
	for _, m := range msgs {
		levels := strings.Split(m.Topic, "/")
		if len(levels) != 5 || levels[0] != "homeassistant" || levels[4] != "config" || levels[2] != NodeID("arm 1") {
			t.Errorf("topic %s is not homeassistant/<component>/<node>/<object>/config", m.Topic)
		}
		for _, l := range levels[2:4] {
			if objectID(l) != l {
				t.Errorf("topic %s: level %q has bytes Home Assistant refuses", m.Topic, l)
			}
		}
		var c map[string]any
		if err := json.Unmarshal(m.Payload, &c); err != nil {
			t.Fatalf("%s: %v", m.Topic, err)
		}
		id, _ := c["unique_id"].(string)
		if id == "" || ids[id] {
			t.Errorf("%s: unique_id %q missing or used twice", m.Topic, id)
		}
		ids[id] = true
		if c["availability_topic"] != "saga/v1/arm 1/status" {
			t.Errorf("%s: availability_topic %v", m.Topic, c["availability_topic"])
		}
		if d, _ := c["device"].(map[string]any); d["model"] != "saga-supervisor" || d["sw_version"] != "v9" {
			t.Errorf("%s: device %v", m.Topic, d)
		}
	}
	if NodeID("arm 1") == NodeID("arm_1") {
		t.Error("two device names share a node id")
	}
}

func TestEval(t *testing.T) {
	payload := []byte(`{"state":"online","ready":true,"halted":false,"commanded":null,"v":12.5,"supplies":{"motor-rail":11.9,"it's":1}}`)
	for _, c := range []struct{ tmpl, want string }{
		{Template("state"), "online"},
		{Template("ready"), "True"},
		{Template("halted"), "False"},
		{Template("commanded"), "None"},
		{Template("v"), "12.5"},
		{Template("supplies", "motor-rail"), "11.9"},
		{Template("supplies", "it's"), "1"},
	} {
		got, err := Eval(c.tmpl, payload)
		if err != nil || got != c.want {
			t.Errorf("Eval(%s) = %q, %v; want %q", c.tmpl, got, err, c.want)
		}
	}
	for _, tmpl := range []string{Template("nope"), "{{ value_json.ready | int }}", Template("supplies"), "{{ value_json['x }}"} {
		if got, err := Eval(tmpl, payload); err == nil {
			t.Errorf("Eval(%s) = %q, want an error", tmpl, got)
		}
	}
}

func TestStale(t *testing.T) {
	cfg := Configs(Options{Topics: mqtt.Topics{Device: "arm1"}, User: "ha", Supplies: []string{"battery"}})
	gone := "homeassistant/sensor/arm1/supply_old/config"
	del := Stale([]string{cfg[0].Topic, gone}, cfg)
	if len(del) != 1 || del[0].Topic != gone || len(del[0].Payload) != 0 {
		t.Errorf("Stale = %v, want one empty message on %s", del, gone)
	}
}
