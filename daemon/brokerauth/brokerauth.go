// Package brokerauth turns a configuration into the MQTT broker's access
// control: the policy (who may read and write which topic), the logins
// that need passwords, and the embedded broker started locked by both.
// The same policy renders the mosquitto password file and ACL of
// `saga-supervisor mosquitto-config`, so the embedded broker and an
// external mosquitto enforce one set of rules.
package brokerauth

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"

	"github.com/saga-supervisor/saga-supervisor/daemon/homeassistant"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt/access"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt/embedded"
)

// Supervisor is the supervisor's MQTT username: its client id on the
// embedded broker (which binds the two), mqtt.username (or else the
// client id) on an external one.
func Supervisor(cfg *config.Config) string {
	if !cfg.MQTT.Embedded() && cfg.MQTT.Username != "" {
		return cfg.MQTT.Username
	}
	return cfg.MQTT.ClientID
}

// Policy is the access policy cfg implies: the supervisor's three logins,
// the agents of agents.allow (none listed: every user of the password file
// is an agent) and the device user of each MQTT-attached actuator.
func Policy(cfg *config.Config) *access.Policy {
	p := &access.Policy{
		Topics:     mqtt.Topics{Prefix: cfg.MQTT.Prefix, Device: cfg.Device},
		Supervisor: Supervisor(cfg),
	}
	for name := range cfg.Agents.Allow {
		p.Agents = append(p.Agents, name)
	}
	slices.Sort(p.Agents)
	for _, name := range cfg.ActuatorNames() {
		if m, ok := cfg.Actuators[name].Section.(*config.MQTTActuator); ok {
			p.Devices = append(p.Devices, access.Device{User: m.User, SetTopic: m.SetTopic, AckTopic: m.AckTopic, StateTopic: m.StateTopic})
		}
	}
	if f := cfg.MQTT.Fleet; f.Enabled || cfg.MQTT.HomeAssistant.Enabled {
		p.Summary = true // Home Assistant's supply sensors read it too
		p.Viewers = slices.Clone(f.Viewers)
	}
	if h := cfg.MQTT.HomeAssistant; h.Enabled {
		p.HomeAssistant = &access.HomeAssistant{DiscoveryPrefix: h.DiscoveryPrefix, NodeID: homeassistant.NodeID(cfg.Device), User: h.User}
	}
	return p
}

// Logins are the identities cfg needs passwords for: the supervisor (one
// password, three usernames), each agent of agents.allow and each device
// user.
func Logins(cfg *config.Config) []access.Login {
	p := Policy(cfg)
	s := p.Supervisor
	out := []access.Login{{Name: s, Users: []string{s, s + access.EstopSuffix, s + access.DevicesSuffix}}}
	for _, a := range p.Agents {
		out = append(out, access.Login{Name: a, Users: []string{a}})
	}
	for _, v := range p.Viewers {
		out = append(out, access.Login{Name: v, Users: []string{v}})
	}
	seen := map[string]bool{}
	for _, d := range p.Devices {
		if !seen[d.User] {
			seen[d.User] = true
			out = append(out, access.Login{Name: d.User, Users: []string{d.User}})
		}
	}
	return out
}

// Started is the embedded broker as StartEmbedded left it.
type Started struct {
	Broker *embedded.Broker
	// Added are the usernames given a fresh password at this start (their
	// passwords are in CredentialsDir); none on later starts.
	Added          []string
	CredentialsDir string
	Anonymous      bool
}

// StartEmbedded starts the embedded broker as cfg says: locked by the
// password file and the policy (adding the logins it lacks), or anonymous
// on loopback if mqtt.auth.anonymous. On a locked broker it sets
// cfg.MQTT.Username and Password to the supervisor's own login, so that
// every connection the supervisor opens (commands, e-stop, devices) logs
// in; with TLS (mqtt.tls.cert_file and key_file) it also sets the TLS the
// supervisor's connections trust: exactly the listener's certificate.
// maxPacket bounds a packet (max_payload and its header).
func StartEmbedded(cfg *config.Config, lg *slog.Logger) (*Started, error) {
	if !cfg.MQTT.Embedded() {
		return nil, errors.New("brokerauth: not the embedded broker")
	}
	topics := mqtt.Topics{Prefix: cfg.MQTT.Prefix, Device: cfg.Device}
	opt := embedded.Options{Addr: cfg.MQTT.Listen, MaxPacket: uint32(cfg.MQTT.MaxPayload) + 1024, Log: lg,
		// Another broker on the port (Debian's mosquitto on 1883) leaves
		// the daemon up, its listen retried: the daemon starts MQTT once
		// the port is ours (Broker.Up).
		WaitForPort: true,
		// Commands wait for a congested supervisor rather than be dropped,
		// so one agent's flood cannot crowd out another's heartbeats. A
		// halt never waits.
		Paced: topics.CommandFilters(), PacedFor: []string{cfg.MQTT.ClientID}, Urgent: mqtt.IsHalt,
		// And each agent to the rate its lane admits: a flooder's excess
		// waits unread in its socket rather than costing the CPU the halt
		// path needs.
		PaceRate: cfg.Agents.Rate, PaceBurst: cfg.Agents.Burst,
		// A halt request on an agent's command topic goes to its e-stop
		// topic: read on the supervisor's e-stop connection, it is not
		// queued behind the commands waiting for the command connection.
		Reroute: mqtt.EstopRoute(topics)}
	st := &Started{Anonymous: cfg.MQTT.Auth.Anonymous, CredentialsDir: cfg.MQTT.Auth.CredentialsDir}
	if !st.Anonymous {
		pol := Policy(cfg)
		if err := pol.Validate(); err != nil {
			return nil, err
		}
		added, err := access.EnsureLogins(cfg.MQTT.Auth.PasswordFile, cfg.MQTT.Auth.CredentialsDir, Logins(cfg))
		if err != nil {
			return nil, fmt.Errorf("embedded broker: %w", err)
		}
		st.Added = added
		pw, err := access.LoadPasswords(cfg.MQTT.Auth.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("embedded broker: %w", err)
		}
		own, err := access.ReadSecret(cfg.MQTT.Auth.CredentialsDir + "/" + pol.Supervisor)
		if err != nil {
			return nil, fmt.Errorf("embedded broker: the supervisor's own password: %w", err)
		}
		if !pw.Check(pol.Supervisor, own) {
			return nil, fmt.Errorf("embedded broker: the password in %s/%s is not %s's in %s (rotate both together)",
				cfg.MQTT.Auth.CredentialsDir, pol.Supervisor, pol.Supervisor, cfg.MQTT.Auth.PasswordFile)
		}
		opt.Passwords, opt.Policy = pw, pol
		cfg.MQTT.Username, cfg.MQTT.Password = pol.Supervisor, config.Secret(own)
	}
	if cfg.MQTT.TLS.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.MQTT.TLS.CertFile, cfg.MQTT.TLS.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("embedded broker: %w", err)
		}
		opt.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	b, err := embedded.StartOptions(opt)
	if err != nil {
		return nil, err
	}
	st.Broker = b
	return st, nil
}

// LocalURL is the URL the supervisor's own connections dial: the
// listener's port on loopback (it may listen on every address).
func LocalURL(b *embedded.Broker) string {
	addr := b.Addr()
	host, port, err := net.SplitHostPort(addr)
	if err == nil {
		if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
			host = "127.0.0.1"
			if ip.Is6() {
				host = "::1"
			}
		}
		addr = net.JoinHostPort(host, port)
	}
	if u := b.URL(); len(u) > 6 && u[:6] == "ssl://" {
		return "ssl://" + addr
	}
	return "tcp://" + addr
}
