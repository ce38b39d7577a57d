package access

import (
	"strings"
	"testing"
)

func fleetPolicy() *Policy {
	p := testPolicy()
	p.Agents = append(p.Agents, "homeassistant")
	p.Summary = true
	p.Viewers = []string{"fleet"}
	p.HomeAssistant = &HomeAssistant{DiscoveryPrefix: "homeassistant", NodeID: "arm1", User: "homeassistant"}
	return p
}

func TestFleetAndHomeAssistantRules(t *testing.T) {
	p := fleetPolicy()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	disc := "homeassistant/button/arm1/halt/config"
	for _, c := range []struct {
		user, topic  string
		retain, want bool
	}{
		{sup, base + "summary", true, true},
		{sup, disc, true, true},
		{sup, "homeassistant/button/arm2/halt/config", true, false}, // another device's
		{"fleet", base + "summary", false, false},                   // a viewer only reads
		{"fleet", base + "estop", false, false},
		{"fleet", base + "estop/fleet", false, false},
		{"homeassistant", base + "estop/homeassistant", false, true}, // its halt button
		{"homeassistant", base + "estop", false, false},
		{"homeassistant", disc, true, false}, // it cannot forge a config
		{"a", base + "summary", true, false},
	} {
		if got := p.CanPublish(c.user, c.topic, c.retain); got != c.want {
			t.Errorf("CanPublish(%s, %s, retain %v) = %v, want %v", c.user, c.topic, c.retain, got, c.want)
		}
	}
	for _, c := range []struct {
		user, filter string
		want         bool
	}{
		{"fleet", "saga/v1/+/summary", true},
		{"fleet", "saga/v1/+/status", true},
		{"fleet", "saga/v1/arm1/summary", true},
		{"fleet", "saga/v1/+/state/+", false},
		{"fleet", "saga/v1/#", false},
		{"fleet", base + "reply/a", false},
		{"homeassistant", "homeassistant/+/arm1/+/config", true},
		{"homeassistant", base + "summary", true},
		{"homeassistant", base + "state/+", true},
		{"a", "homeassistant/+/arm1/+/config", false},
		{"a", base + "summary", true},
		{sup, "homeassistant/+/arm1/+/config", true},
	} {
		if got := p.CanSubscribe(c.user, c.filter); got != c.want {
			t.Errorf("CanSubscribe(%s, %s) = %v, want %v", c.user, c.filter, got, c.want)
		}
	}
	// Off: nobody gets those topics.
	off := testPolicy()
	if off.CanPublish(sup, base+"summary", true) || off.CanPublish(sup, disc, true) || off.Role("fleet") != RoleNone {
		t.Error("summary, discovery or viewer rights without the configuration asking for them")
	}
}

func TestFleetPolicyInvalid(t *testing.T) {
	bad := map[string]func(p *Policy){
		"viewer is an agent":       func(p *Policy) { p.Viewers = []string{"a"} },
		"viewer is the supervisor": func(p *Policy) { p.Viewers = []string{sup} },
		"viewer with slash":        func(p *Policy) { p.Viewers = []string{"x/y"} },
		"ha user is a device":      func(p *Policy) { p.HomeAssistant.User = "grip" },
		"ha user is a viewer":      func(p *Policy) { p.HomeAssistant.User = "fleet" },
		"ha prefix wildcard":       func(p *Policy) { p.HomeAssistant.DiscoveryPrefix = "ha/+" },
	}
	for name, f := range bad {
		p := fleetPolicy()
		f(p)
		if err := p.Validate(); err == nil {
			t.Errorf("%s: Validate accepted it", name)
		}
	}
}

func TestMosquittoACLFleet(t *testing.T) {
	for _, listed := range []bool{true, false} {
		p := fleetPolicy()
		if !listed {
			p.Agents = nil
		}
		acl := p.MosquittoACL()
		for _, want := range []string{
			"user fleet\ntopic read saga/v1/+/summary\ntopic read saga/v1/+/status\n",
			"topic write saga/v1/arm1/summary\n",
			"topic readwrite homeassistant/+/arm1/+/config\n",
		} {
			if !strings.Contains(acl, want) {
				t.Errorf("agents listed %v: the ACL lacks %q:\n%s", listed, want, acl)
			}
		}
		if !strings.Contains(acl, "user homeassistant\n") || !strings.Contains(acl, "topic read homeassistant/+/arm1/+/config\n") {
			t.Errorf("agents listed %v: Home Assistant cannot read the discovery configs:\n%s", listed, acl)
		}
	}
}
