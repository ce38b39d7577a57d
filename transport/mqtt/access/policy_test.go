package access

import (
	"errors"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
)

const sup = "saga-supervisor-arm1"

func testPolicy() *Policy {
	return &Policy{
		Topics:     mqtt.Topics{Device: "arm1"},
		Supervisor: sup,
		Agents:     []string{"a", "b"},
		Devices: []Device{
			{User: "grip", SetTopic: "dev/grip/set", AckTopic: "dev/grip/ack", StateTopic: "dev/grip/state"},
			{User: "grip", SetTopic: "dev/grip2/set", AckTopic: "dev/grip2/ack", StateTopic: "dev/grip2/state"},
			{User: "lamp", SetTopic: "dev/lamp/set", AckTopic: "dev/lamp/ack", StateTopic: "dev/lamp/state"},
		},
	}
}

func TestPolicyValid(t *testing.T) {
	if err := testPolicy().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := map[string]func(p *Policy){
		"no supervisor":           func(p *Policy) { p.Supervisor = "" },
		"agent is supervisor":     func(p *Policy) { p.Agents = append(p.Agents, sup+"-estop") },
		"agent with slash":        func(p *Policy) { p.Agents = append(p.Agents, "x/y") },
		"agent wildcard":          func(p *Policy) { p.Agents = append(p.Agents, "+") },
		"device user is an agent": func(p *Policy) { p.Devices[0].User = "a" },
		"device wildcard topic":   func(p *Policy) { p.Devices[0].SetTopic = "dev/+/set" },
		"device empty level":      func(p *Policy) { p.Devices[0].AckTopic = "dev//ack" },
		"device topic twice":      func(p *Policy) { p.Devices[1].SetTopic = "dev/grip/set" },
		"bad device name":         func(p *Policy) { p.Topics.Device = "a/b" },
	}
	for name, f := range bad {
		p := testPolicy()
		f(p)
		if err := p.Validate(); err == nil {
			t.Errorf("%s: Validate accepted it", name)
		}
	}
}

func TestConnect(t *testing.T) {
	p := testPolicy()
	for _, c := range []struct {
		user, id string
		want     error
	}{
		{sup, sup, nil},
		{sup + "-estop", sup + "-estop", nil},
		{sup + "-devices", sup + "-devices", nil},
		{"a", "a", nil},
		{"grip", "grip", nil},
		{"lamp", "lamp", nil},
		{"mallory", "mallory", ErrUnknownUser}, // valid password, not in policy
		{"", "", ErrUnknownUser},               // anonymous
		{"a", sup, ErrClientID},                // takeover of the supervisor's session
		{"a", "b", ErrClientID},                // takeover of another agent's
		{"a", "", ErrClientID},                 // server-assigned id
		{sup, sup + "-estop", ErrClientID},     // even the supervisor
		{"a/b", "a/b", ErrUnknownUser},         // not a valid name
		{sup + "-other", sup + "-other", ErrUnknownUser},
		{"a", "a/watch", nil},          // a second connection of its own
		{"a", "a/", ErrClientID},       // an empty tag
		{"a", sup + "/x", ErrClientID}, // under another's name
		{"a", "b/a", ErrClientID},      //
		{sup, sup + "/x", nil},         // the supervisor's own tag
		{"a", "ab", ErrClientID},       // a longer name is another user's
	} {
		err := p.Connect(c.user, c.id)
		if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("Connect(%q, %q) = %v, want %v", c.user, c.id, err, c.want)
		}
		if err != nil && !strings.Contains(err.Error(), c.user) {
			t.Errorf("Connect(%q, %q): error %q does not name the user", c.user, c.id, err)
		}
	}
	// With no agents listed, any user that is not the supervisor's nor a
	// device's is an agent.
	p.Agents = nil
	if err := p.Connect("mallory", "mallory"); err != nil {
		t.Errorf("no agents listed: %v", err)
	}
	if r := p.Role("grip"); r != RoleDevice {
		t.Errorf("no agents listed: grip is %v", r)
	}
}

const base = "saga/v1/arm1/"

func TestCanPublish(t *testing.T) {
	p := testPolicy()
	for _, c := range []struct {
		user, topic string
		retain, ok  bool
	}{
		// supervisor
		{sup, base + "reply/a", false, true},
		{sup, base + "reply/anyone", false, true},
		{sup, base + "status", true, true},
		{sup, base + "status", false, true},
		{sup, base + "state/joint1", true, true},
		{sup, base + "events", false, true},
		{sup, base + "events", true, false}, // only status and state retain
		{sup, base + "reply/a", true, false},
		{sup, base + "cmd", false, false},
		{sup, base + "cmd/a", false, false},
		{sup, base + "estop", false, false},
		{sup, "dev/grip/set", false, false}, // the devices connection's
		{sup, base + "state/a/b", false, false},
		{sup, base + "reply/+", false, false}, // a wildcard is no topic
		{sup, base + "state/#", true, false},
		{sup + "-estop", base + "status", false, false},
		{sup + "-estop", base + "estop", false, false},
		{sup + "-devices", "dev/grip/set", false, true},
		{sup + "-devices", "dev/lamp/set", false, true},
		{sup + "-devices", "dev/grip/set", true, false},
		{sup + "-devices", "dev/grip/state", false, false},
		{sup + "-devices", base + "status", false, false},
		// agent a
		{"a", base + "cmd/a", false, true},
		{"a", base + "estop/a", false, true},
		{"a", base + "will/a", false, true},
		{"a", base + "cmd/a", true, false}, // never retained
		{"a", base + "will/a", true, false},
		{"a", base + "estop/a", true, false},
		{"a", base + "cmd/b", false, false}, // another's command
		{"a", base + "estop/b", false, false},
		{"a", base + "will/b", false, false}, // would end b's lease
		{"a", base + "cmd", false, false},    // the shared topic
		{"a", base + "estop", false, false},
		{"a", base + "reply/a", false, false},
		{"a", base + "status", true, false},
		{"a", base + "status", false, false},
		{"a", base + "state/j", true, false},
		{"a", base + "events", false, false},
		{"a", base + "cmd/+", false, false},
		{"a", base + "cmd/#", false, false},
		{"a", base + "cmd/a/", false, false},
		{"a", base + "cmd//a", false, false},
		{"a", "saga/v1//arm1/cmd/a", false, false},
		{"a", "/" + base + "cmd/a", false, false},
		{"a", "", false, false},
		{"a", "dev/grip/set", false, false},
		{"a", "$SYS/x", false, false},
		{"b", base + "cmd/b", false, true},
		{"b", base + "cmd/a", false, false},
		// devices
		{"grip", "dev/grip/ack", false, true},
		{"grip", "dev/grip/state", true, true},
		{"grip", "dev/grip2/state", true, true},
		{"grip", "dev/grip/ack", true, false},
		{"grip", "dev/grip/set", false, false},
		{"grip", "dev/lamp/state", false, false}, // another device user's
		{"grip", base + "status", false, false},
		{"lamp", "dev/lamp/state", true, true},
		{"lamp", "dev/grip/ack", false, false},
		// unknown
		{"mallory", base + "cmd/mallory", false, false},
		{"", base + "cmd/", false, false},
	} {
		if got := p.CanPublish(c.user, c.topic, c.retain); got != c.ok {
			t.Errorf("CanPublish(%q, %q, retain %v) = %v, want %v", c.user, c.topic, c.retain, got, c.ok)
		}
	}
}

func TestCanSubscribe(t *testing.T) {
	p := testPolicy()
	for _, c := range []struct {
		user, filter string
		ok           bool
	}{
		{sup, base + "cmd", true},
		{sup, base + "cmd/+", true},
		{sup, base + "cmd/a", true},
		{sup, base + "will/+", true},
		{sup, base + "estop", true},
		{sup, base + "estop/+", true},
		{sup, base + "cmd/#", false}, // deeper than cmd/+
		{sup, base + "#", false},
		{sup, base + "reply/+", false},
		{sup, base + "status", false},
		{sup, "dev/grip/ack", false},
		{sup, "#", false},
		{sup + "-estop", base + "estop", true},
		{sup + "-estop", base + "estop/+", true},
		{sup + "-estop", base + "estop/a", true},
		{sup + "-estop", base + "cmd/+", false},
		{sup + "-estop", base + "estop/#", false},
		{sup + "-devices", "dev/grip/ack", true},
		{sup + "-devices", "dev/lamp/state", true},
		{sup + "-devices", "dev/grip/set", false},
		{sup + "-devices", "dev/+/ack", false}, // matches topics beyond the devices'
		{sup + "-devices", "dev/#", false},
		// agent a
		{"a", base + "reply/a", true},
		{"a", base + "status", true},
		{"a", base + "state/+", true},
		{"a", base + "state/joint1", true},
		{"a", base + "events", true},
		{"a", base + "reply/b", false}, // another's replies
		{"a", base + "reply/+", false},
		{"a", base + "reply/#", false},
		{"a", "saga/v1/+/reply/a", false}, // other devices' replies
		{"a", "saga/v1/+/reply/x", false},
		{"a", "saga/+/arm1/reply/a", false},
		{"a", "saga/v1/#", false},
		{"a", base + "#", false},
		{"a", "#", false},
		{"a", "+", false},
		{"a", "+/+/+/+/+", false},
		{"a", "$SYS/#", false},
		{"a", "$SYS/broker/clients/connected", false},
		{"a", "$share/g/" + base + "status", false},
		{"a", base + "state/#", false}, // state/x/y is not a state topic
		{"a", base + "state/+/+", false},
		{"a", base + "+", false},
		{"a", base + "cmd/a", false}, // writes only
		{"a", base + "cmd/+", false},
		{"a", base + "will/+", false},
		{"a", base + "estop/+", false},
		{"a", base + "state/", false}, // empty level
		{"a", base + "status/", false},
		{"a", base + "reply/a/#", false},
		{"a", base + "reply/a#", false}, // malformed
		{"a", base + "re+ply/a", false},
		{"a", base + "#/reply", false},
		{"a", "", false},
		{"a", "dev/grip/state", false},
		// devices
		{"grip", "dev/grip/set", true},
		{"grip", "dev/grip2/set", true},
		{"grip", "dev/lamp/set", false},
		{"grip", "dev/grip/ack", false},
		{"grip", "dev/+/set", false},
		{"lamp", "dev/lamp/set", true},
		// unknown
		{"mallory", base + "status", false},
		{"", base + "status", false},
	} {
		if got := p.CanSubscribe(c.user, c.filter); got != c.ok {
			t.Errorf("CanSubscribe(%q, %q) = %v, want %v", c.user, c.filter, got, c.ok)
		}
	}
}

// With no agents listed, an unlisted user gets an agent's rights over its
// own topics, and no one else's.
func TestUnlistedAgents(t *testing.T) {
	p := testPolicy()
	p.Agents = nil
	if !p.CanPublish("zed", base+"cmd/zed", false) || p.CanPublish("zed", base+"cmd/a", false) {
		t.Error("zed's commands")
	}
	if !p.CanSubscribe("zed", base+"reply/zed") || p.CanSubscribe("zed", base+"reply/a") {
		t.Error("zed's replies")
	}
	if p.CanPublish(sup, base+"cmd/"+sup, false) || p.CanSubscribe("grip", base+"reply/grip") {
		t.Error("the supervisor or a device user got an agent's rights")
	}
}

func TestCovers(t *testing.T) {
	for _, c := range []struct {
		rule, f string
		ok      bool
	}{
		{"a/#", "a", true},
		{"a/#", "a/b/c", true},
		{"a/#", "a/#", true},
		{"a/#", "a/+/c", true},
		{"a/#", "#", false},
		{"a/+", "a/+", true},
		{"a/+", "a/b", true},
		{"a/+", "a/b/c", false},
		{"a/+", "a", false},
		{"a/+", "a/#", false},
		{"a/b", "a/+", false},
		{"a/b", "a/b", true},
		{"a/b", "a/b/c", false},
		{"#", "$SYS/x", true}, // covers is about levels; no rule is "#"
	} {
		if got := covers(c.rule, c.f); got != c.ok {
			t.Errorf("covers(%q, %q) = %v, want %v", c.rule, c.f, got, c.ok)
		}
	}
}

func TestMosquittoACLText(t *testing.T) {
	p := testPolicy()
	acl := p.MosquittoACL()
	for _, want := range []string{
		"user " + sup + "\n",
		"topic read " + base + "cmd/+\n",
		"topic write " + base + "status\n",
		"user " + sup + "-estop\ntopic read " + base + "estop\ntopic read " + base + "estop/+\n",
		"user " + sup + "-devices\ntopic write dev/grip/set\ntopic read dev/grip/ack\n",
		"user grip\ntopic read dev/grip/set\ntopic write dev/grip/ack\ntopic write dev/grip/state\ntopic read dev/grip2/set\n",
		"user a\ntopic write " + base + "cmd/a\n",
		"topic read " + base + "reply/b\n",
	} {
		if !strings.Contains(acl, want) {
			t.Errorf("ACL lacks %q:\n%s", want, acl)
		}
	}
	if strings.Contains(acl, "pattern") {
		t.Errorf("agents listed, yet pattern lines:\n%s", acl)
	}
	if strings.Count(acl, "user grip\n") != 1 {
		t.Errorf("device user grip has more than one block:\n%s", acl)
	}
	p.Agents = nil
	acl = p.MosquittoACL()
	for _, want := range []string{
		"pattern write " + base + "cmd/%u\n",
		"pattern write " + base + "estop/%u\n",
		"pattern write " + base + "will/%u\n",
		"pattern read " + base + "reply/%u\n",
		"pattern read " + base + "state/+\n",
	} {
		if !strings.Contains(acl, want) {
			t.Errorf("ACL lacks %q:\n%s", want, acl)
		}
	}
}

// TestDeviceWithoutStateTopic: the state topic is optional in the config
// (an actuator without one is not read back), and check-config accepts it;
// the policy must too. It refused it ("device state topic: topic "" is
// empty"), so run failed on a configuration check-config had passed.
func TestDeviceWithoutStateTopic(t *testing.T) {
	p := testPolicy()
	p.Devices[2].StateTopic = ""
	if err := p.Validate(); err != nil {
		t.Fatalf("a device without a state topic: %v", err)
	}
	for _, user := range []string{"lamp", sup + DevicesSuffix} {
		for _, r := range p.Rules(user) {
			if r.Filter == "" {
				t.Errorf("%s has a rule on the empty topic: %+v", user, r)
			}
		}
	}
	if !p.CanPublish("lamp", "dev/lamp/ack", false) || p.CanPublish("lamp", "dev/lamp/state", true) {
		t.Error("lamp: want its ack topic writable and no state topic granted")
	}
	if !p.CanSubscribe(sup+DevicesSuffix, "dev/lamp/ack") {
		t.Error("the supervisor's device connection cannot read lamp's ack topic")
	}
	if acl := p.MosquittoACL(); strings.Contains(acl, "topic write \n") || strings.Contains(acl, "topic read \n") || strings.Contains(acl, "topic readwrite \n") {
		t.Errorf("the mosquitto ACL names an empty topic:\n%s", acl)
	}
}
