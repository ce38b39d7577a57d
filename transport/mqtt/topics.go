package mqtt

import (
	"github.com/saga-supervisor/saga-supervisor/api"

	"fmt"
	"strings"
)

// DefaultPrefix is the topic prefix of API v1. The version is in the topic,
// so a v2 can run beside v1 on the same broker.
const DefaultPrefix = "saga/v1"

// Topics lays out one supervisor's topics: <prefix>/<device>/... A zero
// Prefix means DefaultPrefix. Every topic of the API is built here, so no
// caller assembles one by hand from a name that could hold a '/'.
type Topics struct {
	Prefix string // e.g. "saga/v1", or "site3/saga/v1" on a shared broker
	Device string // this robot's name, one topic level
}

func (t Topics) base() string { return t.prefix() + "/" + t.Device }

// Validate reports a layout that would make topics ambiguous or unroutable:
// a prefix with empty levels, wildcards, or a leading '$' (brokers reserve
// $-topics, and '#' subscriptions do not see them), or an invalid device.
func (t Topics) Validate() error {
	if t.Prefix != "" {
		if strings.HasPrefix(t.Prefix, "$") {
			return fmt.Errorf("mqtt: topic prefix %q starts with '$', which brokers reserve", t.Prefix)
		}
		for _, level := range strings.Split(t.Prefix, "/") {
			if err := api.ValidName(level); err != nil {
				return fmt.Errorf("mqtt: topic prefix %q: %w", t.Prefix, err)
			}
		}
	}
	if err := api.ValidName(t.Device); err != nil {
		return fmt.Errorf("mqtt: device: %w", err)
	}
	return nil
}

// The supervisor's connections to its broker: the main one logs in as
// its client id (or username) S, the e-stop topics' own connection as
// S+EstopSuffix, and the connection to MQTT-attached actuators as
// S+DevicesSuffix. Each login is its own broker identity, so a broker
// that binds client ids to usernames (the embedded one, mosquitto with
// use_username_as_clientid) lets none of them take over another.
const (
	EstopSuffix   = "-estop"
	DevicesSuffix = "-devices"
)

// Cmd is where agents publish requests (QoS 1, never retained). The
// supervisor ignores a retained message here: it would replay a stale
// command to every new subscription.
func (t Topics) Cmd() string { return t.base() + "/cmd" }

// AgentCmd is an agent's own request topic, cmd/<agent>. The supervisor
// refuses a request on it whose "agent" is not <agent>, so a broker ACL
// that lets each user write only cmd/<its username> binds agent names to
// broker identities: no agent can speak for another. The shared Cmd topic
// stays for brokers without ACLs. agent must pass ValidLevel.
func (t Topics) AgentCmd(agent string) string { return t.Cmd() + "/" + agent }

// CmdFilter is the subscription that receives every agent's own requests.
func (t Topics) CmdFilter() string { return t.Cmd() + "/+" }

// CommandFilters are the filters of every command topic: the shared one
// and each agent's. The embedded broker paces them (embedded.Options.Paced).
func (t Topics) CommandFilters() []string { return []string{t.Cmd(), t.CmdFilter()} }

// Reply is where the supervisor answers agent (QoS 1, not retained). agent
// must pass ValidLevel; DecodeRequest only yields agents that do.
func (t Topics) Reply(agent string) string { return t.base() + "/reply/" + agent }

// Status carries the retained Status; the supervisor's last will puts
// {"state":"offline",...} there when it vanishes.
func (t Topics) Status() string { return t.base() + "/status" }

// State is the retained state of one actuator (payload defined with the
// transport). actuator must pass ValidLevel.
func (t Topics) State(actuator string) string { return t.base() + "/state/" + actuator }

// Events carries Event messages (not retained).
func (t Topics) Events() string { return t.base() + "/events" }

// Estop is the e-stop topic: any message published there (QoS 1, not
// retained) halts the supervisor, whatever its payload. The supervisor
// reads it on a connection of its own, so a halt there never waits at the
// broker behind a flood of commands. EstopAgent is an agent's own e-stop
// topic (a broker ACL can grant each agent its own); a halt request there
// is answered on the agent's reply topic.
func (t Topics) Estop() string { return t.base() + "/estop" }

// EstopAgent is agent's own e-stop topic. agent must pass api.ValidName.
func (t Topics) EstopAgent(agent string) string { return t.Estop() + "/" + agent }

// EstopFilter is the subscription that receives every agent's e-stop topic.
func (t Topics) EstopFilter() string { return t.Estop() + "/+" }

// Will is where an agent points its MQTT last will (any payload, QoS 1,
// not retained): when the broker publishes it, the supervisor ends the
// agent's lease and unwinds its sagas. A topic per agent, rather than a
// request on Cmd, because the will is fixed at connect time, before the
// agent has a lease to name, and because a broker ACL can then allow each
// agent only its own will topic. agent must pass ValidLevel.
func (t Topics) Will(agent string) string { return t.base() + "/will/" + agent }

// WillFilter is the subscription that receives every agent's will.
func (t Topics) WillFilter() string { return t.base() + "/will/+" }

// Summary carries the retained fleet summary (package daemon/fleet):
// a small JSON document, so that one subscription to SummaryFilter shows
// every supervisor sharing a broker and prefix.
func (t Topics) Summary() string { return t.base() + "/summary" }

// SummaryFilter is the subscription that receives the summary of every
// device under t's prefix (t.Device is not used).
func (t Topics) SummaryFilter() string { return t.prefix() + "/+/summary" }

// StatusFilter is the subscription that receives the status of every
// device under t's prefix, the offline will included (t.Device is not
// used).
func (t Topics) StatusFilter() string { return t.prefix() + "/+/status" }

func (t Topics) prefix() string {
	if t.Prefix == "" {
		return DefaultPrefix
	}
	return t.Prefix
}
