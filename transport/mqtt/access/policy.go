package access

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
)

// Suffixes of the supervisor's second and third usernames (and client ids):
// S+EstopSuffix reads the e-stop topics on a connection of its own,
// S+DevicesSuffix drives MQTT-attached actuators.
const (
	EstopSuffix   = mqtt.EstopSuffix
	DevicesSuffix = mqtt.DevicesSuffix
)

// Device is an MQTT-attached actuator (drivers/mqtt) as the broker sees it:
// User subscribes SetTopic and publishes AckTopic and StateTopic (the only
// topic it may retain on); the supervisor's S-devices connection publishes
// SetTopic and subscribes AckTopic and StateTopic. Topics are exact names,
// no wildcards. StateTopic is optional ("": the device is not read back).
// Several devices may share one User.
type Device struct {
	User                           string
	SetTopic, AckTopic, StateTopic string
}

// Policy is who may do what on the broker of one supervisor.
//
// If Agents is empty, every username that is not one of the supervisor's
// three nor a device user is an agent: the password file then decides who
// the agents are (the broker checks the password before the policy). With
// Agents listed, any other user is refused at connect even with a valid
// password.
type Policy struct {
	Topics     mqtt.Topics // the supervisor's topics
	Supervisor string      // S: the supervisor's MQTT username and client id
	Agents     []string    // agent usernames (= agent names); empty: see above
	Devices    []Device
	// Summary: the supervisor retains its fleet summary (Topics.Summary),
	// which agents may read.
	Summary bool
	// Viewers are read-only users of a fleet view: they read every
	// device's summary and status under the prefix, nothing else.
	Viewers []string
	// HomeAssistant, if set, lets the supervisor retain discovery configs
	// and Home Assistant's user (an agent) read them.
	HomeAssistant *HomeAssistant
}

// HomeAssistant is Home Assistant's MQTT discovery as the broker sees it:
// the supervisor retains configs under
// <DiscoveryPrefix>/<component>/<device>/<object>/config, and User — an
// agent, so its halt button may write its own e-stop topic — reads them.
type HomeAssistant struct {
	DiscoveryPrefix string
	NodeID          string // the device's node_id level (daemon/homeassistant.NodeID)
	User            string
}

// DiscoveryFilter matches every discovery config of the device.
func (h *HomeAssistant) DiscoveryFilter(mqtt.Topics) string {
	return h.DiscoveryPrefix + "/+/" + h.NodeID + "/+/config"
}

// Errors of Connect; the error returned wraps one of them.
var (
	ErrUnknownUser = errors.New("user not allowed on this broker")
	ErrClientID    = errors.New("client id is not the username")
)

// Role is what a username is to a Policy.
type Role uint8

// Roles of a username.
const (
	RoleNone       Role = iota // not allowed
	RoleSupervisor             // S
	RoleEstop                  // S-estop
	RoleDevices                // S-devices
	RoleAgent
	RoleDevice // a device user
	RoleViewer // a read-only fleet viewer
)

var roleNames = [...]string{"none", "supervisor", "supervisor e-stop", "supervisor devices", "agent", "device", "fleet viewer"}

func (r Role) String() string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return fmt.Sprintf("Role(%d)", r)
}

// Validate reports a policy that cannot be enforced: invalid topics or
// names, a username with two roles, a device topic with wildcards or empty
// levels, or one device topic used twice.
func (p *Policy) Validate() error {
	if err := p.Topics.Validate(); err != nil {
		return fmt.Errorf("access policy: %w", err)
	}
	if err := ValidUser(p.Supervisor); err != nil {
		return fmt.Errorf("access policy: supervisor: %w", err)
	}
	seen := map[string]string{
		p.Supervisor:                 "the supervisor",
		p.Supervisor + EstopSuffix:   "the supervisor's e-stop connection",
		p.Supervisor + DevicesSuffix: "the supervisor's devices connection",
	}
	for _, a := range p.Agents {
		if err := ValidUser(a); err != nil {
			return fmt.Errorf("access policy: agent: %w", err)
		}
		if was, dup := seen[a]; dup {
			return fmt.Errorf("access policy: agent %q is also %s", a, was)
		}
		seen[a] = "an agent"
	}
	topics := map[string]string{}
	for i, d := range p.Devices {
		if err := ValidUser(d.User); err != nil {
			return fmt.Errorf("access policy: device %d: %w", i, err)
		}
		if was, dup := seen[d.User]; dup && was != "a device user" {
			return fmt.Errorf("access policy: device user %q is also %s", d.User, was)
		}
		seen[d.User] = "a device user"
		for _, t := range []struct{ name, topic string }{{"set", d.SetTopic}, {"ack", d.AckTopic}, {"state", d.StateTopic}} {
			if t.name == "state" && t.topic == "" {
				continue // optional: a device without one is not read back
			}
			if err := validTopic(t.topic); err != nil {
				return fmt.Errorf("access policy: device %q %s topic: %w", d.User, t.name, err)
			}
			if was, dup := topics[t.topic]; dup {
				return fmt.Errorf("access policy: device %q %s topic %q is also %s", d.User, t.name, t.topic, was)
			}
			topics[t.topic] = fmt.Sprintf("device %q's %s topic", d.User, t.name)
		}
	}
	for _, v := range p.Viewers {
		if err := ValidUser(v); err != nil {
			return fmt.Errorf("access policy: viewer: %w", err)
		}
		if was, dup := seen[v]; dup {
			return fmt.Errorf("access policy: viewer %q is also %s", v, was)
		}
		seen[v] = "a fleet viewer"
	}
	if h := p.HomeAssistant; h != nil {
		if err := ValidUser(h.User); err != nil {
			return fmt.Errorf("access policy: home assistant: %w", err)
		}
		if was, ok := seen[h.User]; ok && was != "an agent" {
			return fmt.Errorf("access policy: home assistant user %q is also %s", h.User, was)
		}
		if err := validTopic(h.DiscoveryPrefix + "/" + h.NodeID); err != nil {
			return fmt.Errorf("access policy: home assistant discovery prefix or node id: %w", err)
		}
	}
	return nil
}

// Role returns what user is to p (RoleNone: refused). It does not check
// the password.
func (p *Policy) Role(user string) Role {
	switch {
	case user == "" || ValidUser(user) != nil:
		return RoleNone
	case user == p.Supervisor:
		return RoleSupervisor
	case user == p.Supervisor+EstopSuffix:
		return RoleEstop
	case user == p.Supervisor+DevicesSuffix:
		return RoleDevices
	}
	for _, d := range p.Devices {
		if d.User == user {
			return RoleDevice
		}
	}
	if slices.Contains(p.Viewers, user) {
		return RoleViewer
	}
	if len(p.Agents) == 0 || slices.Contains(p.Agents, user) {
		return RoleAgent
	}
	return RoleNone
}

// Connect reports whether user may connect with clientID (after its
// password was checked): the user must have a role, and clientID must be
// user or user/<anything>. A username cannot hold '/', so a user's client
// ids are its own — no one can take over another's session, the
// supervisor's included — while one agent may hold several connections
// (a controller and a watcher, "planner" and "planner/watch"). The error
// wraps ErrUnknownUser or ErrClientID and names both.
func (p *Policy) Connect(user, clientID string) error {
	if p.Role(user) == RoleNone {
		return fmt.Errorf("mqtt user %q: %w", user, ErrUnknownUser)
	}
	if clientID != user && (!strings.HasPrefix(clientID, user+"/") || len(clientID) == len(user)+1) {
		return fmt.Errorf("mqtt user %q with client id %q: %w", user, clientID, ErrClientID)
	}
	return nil
}

// Rule grants access to the topics Filter matches (an MQTT filter: '+' and
// '#' are wildcards). Read allows subscribing (to Filter or to any filter
// that matches only topics Filter matches) and receiving; Write allows
// publishing, and retaining too if Retain.
type Rule struct {
	Filter              string
	Read, Write, Retain bool
}

// Rules returns user's rules (nil for an unknown user). CanPublish,
// CanSubscribe and MosquittoACL all derive from them.
func (p *Policy) Rules(user string) []Rule {
	t := p.Topics
	read := func(f string) Rule { return Rule{Filter: f, Read: true} }
	write := func(f string) Rule { return Rule{Filter: f, Write: true} }
	switch p.Role(user) {
	case RoleSupervisor:
		rs := []Rule{
			read(t.Cmd()), read(t.CmdFilter()), read(t.WillFilter()),
			read(t.Estop()), read(t.EstopFilter()),
			write(t.Reply("+")),
			{Filter: t.Status(), Write: true, Retain: true},
			{Filter: t.State("+"), Write: true, Retain: true},
			write(t.Events()),
		}
		if p.Summary {
			rs = append(rs, Rule{Filter: t.Summary(), Write: true, Retain: true})
		}
		if h := p.HomeAssistant; h != nil {
			// Read too: at start it compares what is retained with what
			// it publishes, and clears configs of entities gone.
			rs = append(rs, Rule{Filter: h.DiscoveryFilter(t), Read: true, Write: true, Retain: true})
		}
		return rs
	case RoleViewer:
		return []Rule{read(t.SummaryFilter()), read(t.StatusFilter())}
	case RoleEstop:
		return []Rule{read(t.Estop()), read(t.EstopFilter())}
	case RoleDevices:
		var rs []Rule
		for _, d := range p.Devices {
			rs = append(rs, write(d.SetTopic), read(d.AckTopic))
			if d.StateTopic != "" {
				rs = append(rs, read(d.StateTopic))
			}
		}
		return rs
	case RoleDevice:
		var rs []Rule
		for _, d := range p.Devices {
			if d.User == user {
				rs = append(rs, read(d.SetTopic), write(d.AckTopic))
				if d.StateTopic != "" {
					rs = append(rs, Rule{Filter: d.StateTopic, Write: true, Retain: true})
				}
			}
		}
		return rs
	case RoleAgent:
		rs := append(agentRules(t, user), p.agentExtras()...)
		if h := p.HomeAssistant; h != nil && user == h.User {
			rs = append(rs, read(h.DiscoveryFilter(t)))
		}
		return rs
	}
	return nil
}

// agentExtras are what every agent may read beyond agentRules when the
// configuration publishes it.
func (p *Policy) agentExtras() []Rule {
	if p.Summary {
		return []Rule{{Filter: p.Topics.Summary(), Read: true}}
	}
	return nil
}

func agentRules(t mqtt.Topics, user string) []Rule {
	return []Rule{
		{Filter: t.AgentCmd(user), Write: true},
		{Filter: t.EstopAgent(user), Write: true},
		{Filter: t.Will(user), Write: true},
		{Filter: t.Reply(user), Read: true},
		{Filter: t.Status(), Read: true},
		{Filter: t.State("+"), Read: true},
		{Filter: t.Events(), Read: true},
	}
}

// CanPublish reports whether user may publish on topic, retained if retain.
// A topic with a wildcard or an empty level is refused for everyone.
func (p *Policy) CanPublish(user, topic string, retain bool) bool {
	if validTopic(topic) != nil {
		return false
	}
	for _, r := range p.Rules(user) {
		if r.Write && (r.Retain || !retain) && covers(r.Filter, topic) {
			return true
		}
	}
	return false
}

// CanSubscribe reports whether user may subscribe to filter: only if every
// topic filter can match is readable by user (so "#", "$SYS/#" or
// "<base>/reply/+" are refused to an agent, "<base>/state/+" is not). A
// filter with an empty level, a misplaced wildcard or a shared-subscription
// prefix ($share/...) is refused. Receiving a message is the same check
// with its topic as the filter.
func (p *Policy) CanSubscribe(user, filter string) bool {
	if validFilter(filter) != nil {
		return false
	}
	for _, r := range p.Rules(user) {
		if r.Read && covers(r.Filter, filter) {
			return true
		}
	}
	return false
}

// validTopic refuses a topic name that is empty, longer than MQTT allows,
// holds a wildcard, a NUL or an empty level. The API's topics have none.
func validTopic(topic string) error {
	if strings.ContainsAny(topic, "+#") {
		return fmt.Errorf("topic %q holds a wildcard", topic)
	}
	return validFilter(topic)
}

func validFilter(f string) error {
	if f == "" || len(f) > 65535 {
		return fmt.Errorf("topic %q is empty or over 65535 bytes", f)
	}
	if strings.ContainsRune(f, 0) {
		return fmt.Errorf("topic %q holds a NUL", f)
	}
	levels := strings.Split(f, "/")
	for i, l := range levels {
		switch {
		case l == "":
			return fmt.Errorf("topic %q has an empty level", f)
		case l == "#" && i != len(levels)-1:
			return fmt.Errorf("topic filter %q has '#' before its last level", f)
		case l != "+" && l != "#" && strings.ContainsAny(l, "+#"):
			return fmt.Errorf("topic filter %q has a wildcard inside a level", f)
		}
	}
	return nil
}

// covers reports whether every topic filter f matches is matched by rule
// (both valid filters; a topic name is a filter without wildcards). It is
// conservative: a filter covered only by several rules together is not.
func covers(rule, f string) bool {
	r, s := strings.Split(rule, "/"), strings.Split(f, "/")
	for i, rl := range r {
		if rl == "#" {
			return true // "a/#" matches "a" and everything under it
		}
		if i >= len(s) {
			return false
		}
		switch sl := s[i]; {
		case sl == "#":
			return false // f reaches any depth, rule does not
		case rl == "+":
			// matches any one level, a wildcard one too
		case sl == "+" || sl != rl:
			return false
		}
	}
	return len(s) == len(r)
}
