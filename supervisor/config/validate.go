package config

import (
	"crypto/ed25519"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/approval"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/ingress"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// Bounds a config must stay within, each with its reason.
const (
	// Lease TTL bounds of DESIGN §6: below 50ms a heartbeat (TTL/4) is
	// faster than an MQTT round trip on a Pi; above 60s a dead controller
	// holds its actuators for too long.
	MinLeaseTTL = 50 * time.Millisecond
	MaxLeaseTTL = 60 * time.Second

	// maxRetries and maxRetryWait bound an unwind's retrying: with a doubling
	// backoff a typo (retries: 20) would otherwise leave an arm half unwound
	// for hours.
	maxRetries   = 10
	maxRetryWait = time.Minute

	// maxSagaCommands bounds a saga's memory (its steps and command ids).
	maxSagaCommands = 1_000_000

	// maxTimeout bounds a driver call: a halt waits for effects in flight,
	// so a long timeout is a slow e-stop.
	maxTimeout = 10 * time.Second

	// maxSupplyTime bounds debounce and stale_after: a rail that may be out
	// of range or unread for longer than this is not being watched.
	maxSupplyTime = time.Minute

	// An MQTT message must hold a reply or a rollback report (minimum) and
	// fit MQTT's remaining-length field (maximum).
	minMaxPayload = 1 << 10
	maxMaxPayload = 268_435_455

	// maxNameLen bounds names of actuators, supplies and the device: they are
	// topic levels, log fields and (simulated) world-file slot names.
	maxNameLen = 64
)

const (
	brokerEmbedded = "embedded"
	driverSim      = "sim"
	driverMQTT     = "mqtt"
)

// Broker URL schemes, as paho.mqtt.golang dials them.
var (
	plainSchemes = map[string]bool{"tcp": true, "mqtt": true, "ws": true}
	tlsSchemes   = map[string]bool{"ssl": true, "tls": true, "mqtts": true, "wss": true}
)

// defaults returns a Config holding every default; decoding overwrites what
// the file sets.
func defaults() *Config {
	return &Config{
		StateDir: DefaultStateDir,
		Journal: Journal{
			Dir:                "./saga-data/journal",
			Durability:         rollback.EveryStep,
			SegmentSize:        wal.DefaultSegmentSize,
			CheckpointRecords:  16384,
			CheckpointInterval: 5 * time.Minute,
			Retention:          Retention{MaxSize: DefaultRetentionSize},
		},
		Unwind: Unwind{
			Order:                 rollback.Retrace,
			Retries:               2,
			RetryBackoff:          10 * time.Millisecond,
			OnCompensationFailure: rollback.HaltOnFailure,
			MaxSagaCommands:       rollback.DefaultMaxSagaCommands,
		},
		Leases: Leases{DefaultTTL: time.Second, MinTTL: MinLeaseTTL, MaxTTL: MaxLeaseTTL},
		Agents: Agents{Max: ingress.DefaultMaxAgents, Queue: ingress.DefaultQueueLen, Rate: ingress.DefaultRate,
			Burst: ingress.DefaultBurst, MaxSagas: rollback.DefaultMaxSagasPerLease,
			Quarantine: AutoQuarantine{Window: 10 * time.Second}},
		MQTT: MQTT{
			Broker:        brokerEmbedded,
			Listen:        "127.0.0.1:1883",
			Prefix:        "saga/v1",
			MaxPayload:    64 << 10,
			Auth:          Auth{PasswordFile: "./saga-data/mqtt/passwd", CredentialsDir: "./saga-data/mqtt/credentials"},
			HomeAssistant: HomeAssistant{DiscoveryPrefix: "homeassistant", User: "homeassistant"},
			Fleet:         Fleet{Period: 5 * time.Second},
		},
		HTTP:      HTTP{Listen: "127.0.0.1:8080", ResetTokenFile: DefaultResetTokenFile, GenerateResetToken: true, SessionTTL: DefaultSessionTTL},
		Sim:       Sim{World: "./saga-data/world"},
		Approvals: Approvals{MaxTTL: approval.DefaultMaxTTL},
	}
}

func (s *Supply) setDefaults() {
	*s = Supply{Debounce: 200 * time.Millisecond, StaleAfter: 2 * time.Second, Action: limits.Halt}
}

func (m *MCU) setDefaults() {
	*m = MCU{Baud: 115200, LinkTimeout: 500 * time.Millisecond, AckTimeout: 50 * time.Millisecond, Retries: 3}
}

func (a *Actuator) setDefaults() {
	*a = Actuator{
		Policy:  limits.Reject,
		Safe:    actuators.SafePolicy{Mode: actuators.SafeHold},
		Timeout: actuators.DefaultTimeout,
	}
}

// DefaultResetTokenFile is http.reset_token_file's default: the operator
// token beside the journal and the MQTT credentials, generated at the
// first start (http.generate_reset_token).
const DefaultResetTokenFile = "./saga-data/operator-token"

// complete fills the defaults that depend on other settings.
func (d *decoder) complete(c *Config) {
	if c.HTTP.ResetToken != "" && !d.set("http.reset_token_file") {
		// An inline token is the operator's: no file to read or generate.
		c.HTTP.ResetTokenFile = ""
	}
	if !d.set("http.login") {
		// A login wherever other machines can reach the listener; none
		// on loopback, where ctl, curl and the dashboard work as before.
		c.HTTP.Login = c.HTTP.Listen != "" && !listenLoopback(c.HTTP.Listen)
	}
	if t := &c.HTTP.TLS; t.SelfSigned && !d.set("http.tls.cert_file") && !d.set("http.tls.key_file") {
		t.CertFile, t.KeyFile = DefaultHTTPCertFile, DefaultHTTPKeyFile
	}
	if !c.MQTT.Embedded() && !d.set("mqtt.listen") {
		c.MQTT.Listen = ""
	}
	if !d.set("mqtt.client_id") {
		c.MQTT.ClientID = "saga-supervisor-" + c.Device
	}
	for name, a := range c.Actuators {
		a.Section = setSection(a.Driver, false, a.sections)
		if m, ok := a.Section.(*MQTTActuator); ok && m.User == "" {
			m.User = name
		}
		if unitRange(a.Kind) {
			if !d.set("actuators." + name + ".min") {
				a.Min = 0
			}
			if !d.set("actuators." + name + ".max") {
				a.Max = 1
			}
		}
		c.Actuators[name] = a
	}
	for name, s := range c.Supplies {
		s.Section = setSection(s.Driver, true, s.sections)
		c.Supplies[name] = s
	}
}

// unitRange reports kinds whose values lie in [0, 1]: a duty cycle, on/off.
func unitRange(k actuators.Kind) bool { return k == actuators.PWM || k == actuators.Digital }

// validate checks everything that decoding alone cannot.
func (d *decoder) validate(c *Config) {
	if !d.set("device") {
		d.errorf("device", "required: the robot's name, used in its MQTT topics (%s/<device>)", c.MQTT.Prefix)
	} else if d.ok("device") {
		if err := checkName(c.Device); err != nil {
			d.errorf("device", "%v", err)
		}
	}
	d.checkBoard(c)
	d.validateJournal(c.Journal)
	d.validateUnwind(c.Unwind)
	d.validateLeases(c.Leases)
	d.validateAgents(c.Agents)
	d.validateAllow(c)
	d.validateMQTT(c.MQTT)
	d.validateHomeAssistant(c)
	d.validateFleet(c)
	d.validateHTTP(c.HTTP)
	d.validateAllowedHosts(c.HTTP)
	for _, name := range c.SupplyNames() {
		d.validateSupply(c, name)
	}
	if len(c.Actuators) == 0 && d.ok("actuators") {
		d.errorf("actuators", "at least one actuator is required")
	}
	for _, name := range c.ActuatorNames() {
		d.validateActuator(c, name)
	}
	d.validateEStop(c.EStop)
	d.claimEStop(c)
	d.validateMCUs(c)
	d.claimMCUs(c)
	d.checkClaims()
	d.validateApprovals(c)
	d.validateZones(c)
	// Backstop: the packages that enforce these specs must accept them. The
	// checks above should already have said why in the file's terms.
	if len(d.errs) == 0 {
		for _, name := range c.SupplyNames() {
			if err := c.Supplies[name].Spec(name).Validate(); err != nil {
				d.errorf("supplies."+name, "%v", err)
			}
		}
		for _, name := range c.ActuatorNames() {
			if err := c.Actuators[name].LimitsSpec().Validate(); err != nil {
				d.errorf("actuators."+name, "%v", err)
			}
		}
	}
}

// validateZones checks that every zone names existing actuators, each in
// one zone at most, and that the e-stop and supplies bound to a zone name
// one that exists.
func (d *decoder) validateZones(c *Config) {
	in := map[string]string{}
	for _, z := range c.ZoneNames() {
		p := "zones." + z
		if !d.ok(p) {
			continue
		}
		if len(c.Zones[z]) == 0 {
			d.errorf(p, "lists no actuator: a zone halt would stop nothing")
		}
		for i, a := range c.Zones[z] {
			ip := fmt.Sprintf("%s[%d]", p, i)
			if _, ok := c.Actuators[a]; !ok {
				d.errorf(ip, "no actuator %.40q (known: %s)", a, strings.Join(c.ActuatorNames(), ", "))
				continue
			}
			if other, dup := in[a]; dup {
				d.errorf(ip, "actuator %s is already in zone %s: an actuator may be in one zone", a, other)
				continue
			}
			in[a] = z
		}
	}
	zoneRef := func(p, zone string) {
		if zone == "" || !d.ok(p) {
			return
		}
		if _, ok := c.Zones[zone]; !ok {
			d.errorf(p, "no zone %.40q (known: %s)", zone, strings.Join(c.ZoneNames(), ", "))
		}
	}
	if d.set("estop") {
		zoneRef("estop.zone", c.EStop.Zone)
	}
	for _, name := range c.SupplyNames() {
		s := c.Supplies[name]
		p := "supplies." + name + ".zone"
		zoneRef(p, s.Zone)
		if s.Zone != "" && s.Action != limits.Halt && d.ok(p) {
			d.errorf(p, "a zone scopes the halt action only; action is %s", s.Action)
		}
	}
}

// Bounds of approvals.max_ttl: under a second an approval would expire
// on its way; over an hour a leaked one stays dangerous too long (and the
// memory of spent nonces grows with it).
const minApprovalTTL = time.Second

func (d *decoder) validateApprovals(c *Config) {
	a := c.Approvals
	if d.ok("approvals.max_ttl") && (a.MaxTTL < minApprovalTTL || a.MaxTTL > approval.MaxTTLLimit) {
		d.errorf("approvals.max_ttl", "%v is outside %v..%v", a.MaxTTL, minApprovalTTL, approval.MaxTTLLimit)
	}
	seen := map[string]int{}
	for i, f := range a.PublicKeys {
		p := fmt.Sprintf("approvals.public_keys[%d]", i)
		if f == "" {
			d.errorf(p, "must not be empty: a public key file")
			d.bad[p] = true
		} else if j, dup := seen[f]; dup {
			d.errorf(p, "%s is listed twice (also item %d)", f, j+1)
			d.bad[p] = true
		}
		seen[f] = i
	}
	if !d.ok("approvals.public_keys") {
		return
	}
	for _, name := range c.ApprovalRequired() {
		p := "actuators." + name + ".requires_approval"
		switch need := int(c.Actuators[name].RequiresApproval); {
		case len(a.PublicKeys) == 0:
			d.errorf(p, "%s requires approval but approvals.public_keys lists no key: nothing could ever approve it", name)
		case need > len(a.PublicKeys):
			d.errorf(p, "%s requires %d approvals from distinct keys but approvals.public_keys lists %d: nothing could ever approve it", name, need, len(a.PublicKeys))
		}
	}
}

// readApprovalKeys reads the public key files approvals names.
func (d *decoder) readApprovalKeys(c *Config) {
	for i, f := range c.Approvals.PublicKeys {
		p := fmt.Sprintf("approvals.public_keys[%d]", i)
		if !d.ok(p, "approvals.public_keys") {
			continue
		}
		k, err := approval.LoadPublicKey(f)
		if err != nil {
			d.errorf(p, "%v", err)
			continue
		}
		if slices.ContainsFunc(c.Approvals.Keys, func(o ed25519.PublicKey) bool { return o.Equal(k) }) {
			// Two files, one key: it would count as two operators.
			d.errorf(p, "holds key %s, which an earlier file of approvals.public_keys holds too: each key must be another operator's", approval.KeyID(k))
			continue
		}
		c.Approvals.Keys = append(c.Approvals.Keys, k)
	}
}

func (d *decoder) validateJournal(j Journal) {
	if j.Dir == "" && d.ok("journal.dir") {
		d.errorf("journal.dir", "must not be empty")
	}
	if s := j.SegmentSize; d.ok("journal.segment_size") && (s < wal.MinSegmentSize || s > wal.MaxSegmentSize) {
		d.errorf("journal.segment_size", "%s is outside %s..%s", s, Size(wal.MinSegmentSize), Size(wal.MaxSegmentSize))
	}
	if n := j.CheckpointRecords; d.ok("journal.checkpoint_records") && (n < 1 || n > 1<<24) {
		d.errorf("journal.checkpoint_records", "%d is outside 1..%d", n, 1<<24)
	}
	if v := j.CheckpointInterval; d.ok("journal.checkpoint_interval") && (v < time.Second || v > 24*time.Hour) {
		d.errorf("journal.checkpoint_interval", "%v is outside 1s..24h", v)
	}
	if r := j.Retention; d.ok("journal.retention.max_size") && r.MaxSize != 0 && r.MaxSize < 2*j.SegmentSize {
		d.errorf("journal.retention.max_size", "%s is less than two segments (%s each): the journal could never get under it", r.MaxSize, j.SegmentSize)
	}
	if r := j.Retention; d.ok("journal.retention.max_age") && r.MaxAge < 0 {
		d.errorf("journal.retention.max_age", "must not be negative")
	}
}

func (d *decoder) validateUnwind(u Unwind) {
	if d.ok("unwind.retries") {
		switch {
		case u.Retries == 0:
			// rollback.Config reads Retries 0 as "use the default (2)", so
			// a 0 here could not be honoured; say so rather than retry twice.
			d.errorf("unwind.retries", "must be 1..%d: the engine has no zero-retry setting", maxRetries)
		case u.Retries < 0 || u.Retries > maxRetries:
			d.errorf("unwind.retries", "%d is outside 1..%d", u.Retries, maxRetries)
		}
	}
	if d.ok("unwind.retry_backoff") {
		switch {
		case u.RetryBackoff <= 0:
			d.errorf("unwind.retry_backoff", "must be positive")
		case d.ok("unwind.retries") && u.Retries >= 1 && u.Retries <= maxRetries &&
			u.RetryBackoff > maxRetryWait/time.Duration(1<<u.Retries-1):
			d.errorf("unwind.retry_backoff", "%v doubled over %d retries waits %v in all; at most %v",
				u.RetryBackoff, u.Retries, u.RetryBackoff*time.Duration(1<<u.Retries-1), maxRetryWait)
		}
	}
	if n := u.MaxSagaCommands; d.ok("unwind.max_saga_commands") && (n < 1 || n > maxSagaCommands) {
		d.errorf("unwind.max_saga_commands", "%d is outside 1..%d", n, maxSagaCommands)
	}
}

// Bounds of agents: settings. Above them a Pi would be promising what it
// cannot keep (a lane's queue and its replies are memory; a rate is CPU).
const (
	maxAgents       = 1024
	maxAgentQueue   = 4096
	maxAgentRate    = 100000
	maxAgentSagas   = 1024
	maxAgentBurstTo = 100000
)

func (d *decoder) validateAgents(a Agents) {
	for _, f := range []struct {
		key    string
		v, max float64
	}{{"max", float64(a.Max), maxAgents}, {"queue", float64(a.Queue), maxAgentQueue}, {"rate", a.Rate, maxAgentRate},
		{"burst", float64(a.Burst), maxAgentBurstTo}, {"max_sagas", float64(a.MaxSagas), maxAgentSagas}} {
		p := "agents." + f.key
		if d.ok(p) && !(f.v >= 1 && f.v <= f.max) { // also refuses NaN
			d.errorf(p, "%v is outside 1..%v", f.v, f.max)
		}
	}
	q := a.Quarantine
	if d.ok("agents.quarantine.after_refusals") && (q.AfterRefusals < 0 || q.AfterRefusals > maxAutoRefusals) {
		d.errorf("agents.quarantine.after_refusals", "%d is outside 0..%d (0: never)", q.AfterRefusals, maxAutoRefusals)
	}
	if d.ok("agents.quarantine.window") && (q.Window < time.Second || q.Window > time.Hour) {
		d.errorf("agents.quarantine.window", "%v is outside 1s..1h", q.Window)
	}
}

// maxAutoRefusals bounds agents.quarantine.after_refusals.
const maxAutoRefusals = 1000000

func (d *decoder) validateLeases(l Leases) {
	inBounds := true
	for _, f := range []struct {
		key string
		v   time.Duration
	}{{"default_ttl", l.DefaultTTL}, {"min_ttl", l.MinTTL}, {"max_ttl", l.MaxTTL}} {
		p := "leases." + f.key
		if !d.ok(p) {
			inBounds = false
		} else if f.v < MinLeaseTTL || f.v > MaxLeaseTTL {
			d.errorf(p, "%v is outside %v..%v", f.v, MinLeaseTTL, MaxLeaseTTL)
			inBounds = false
		}
	}
	if !inBounds {
		return
	}
	switch {
	case l.MinTTL > l.MaxTTL:
		d.errorf("leases.min_ttl", "%v is above max_ttl %v", l.MinTTL, l.MaxTTL)
	case l.DefaultTTL < l.MinTTL || l.DefaultTTL > l.MaxTTL:
		d.errorf("leases.default_ttl", "%v is outside min_ttl..max_ttl = %v..%v", l.DefaultTTL, l.MinTTL, l.MaxTTL)
	}
}

func (d *decoder) validateMQTT(m MQTT) {
	if d.ok("mqtt.broker") {
		d.validateBroker(m)
	}
	if d.ok("mqtt.prefix") {
		if err := checkPrefix(m.Prefix); err != nil {
			d.errorf("mqtt.prefix", "%v", err)
		}
	}
	if d.ok("mqtt.client_id") && d.set("mqtt.client_id") {
		switch id := m.ClientID; {
		case id == "":
			d.errorf("mqtt.client_id", "must not be empty (omit it for saga-supervisor-<device>)")
		case len(id) > 128 || !utf8.ValidString(id) || strings.IndexFunc(id, unicode.IsControl) >= 0:
			d.errorf("mqtt.client_id", "must be at most 128 bytes of UTF-8 without control characters")
		}
	}
	d.validateSecret("mqtt.password", m.Password, "mqtt.password_file", m.PasswordFile)
	if (m.Password != "" || m.PasswordFile != "") && m.Username == "" && d.ok("mqtt.username") {
		// MQTT carries a password only together with a user name.
		d.errorf(pick(d, "mqtt.password_file", "mqtt.password"), "a password needs a username")
	}
	if s := m.MaxPayload; d.ok("mqtt.max_payload") && (s < minMaxPayload || s > maxMaxPayload) {
		d.errorf("mqtt.max_payload", "%s is outside %s..%d bytes", s, Size(minMaxPayload), maxMaxPayload)
	}
}

// validateEmbeddedAuth refuses an embedded broker that others could reach
// without both authentication and TLS: its listener would hand any
// machine on the network the robot's actuators, or the passwords.
func (d *decoder) validateEmbeddedAuth(m MQTT) {
	if !d.ok("mqtt.listen") || m.Listen == "" {
		return
	}
	loopback := listenLoopback(m.Listen)
	switch {
	case m.Auth.Anonymous && !loopback:
		d.errorf("mqtt.auth.anonymous", "anonymous clients on %s, which other machines can reach: anyone could move the robot; listen on 127.0.0.1 or turn anonymous off", m.Listen)
	case m.Auth.Anonymous:
		d.warnf("mqtt.auth.anonymous", "the embedded broker lets in any local process, and any of them may move any actuator")
	case !loopback && m.TLS.CertFile == "":
		d.errorf("mqtt.listen", "%s can be reached from other machines: the embedded broker needs TLS there (mqtt.tls.cert_file and key_file), or listen on 127.0.0.1", m.Listen)
	}
	if !m.Auth.Anonymous {
		for _, k := range []struct {
			key, v string
		}{{"password_file", m.Auth.PasswordFile}, {"credentials_dir", m.Auth.CredentialsDir}} {
			if p := "mqtt.auth." + k.key; d.ok(p) && k.v == "" {
				d.errorf(p, "must not be empty (omit it for the default)")
			}
		}
	}
}

// listenLoopback reports whether a host:port only this machine can reach.
func listenLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// validateAllow checks agents.allow against the actuators and the ops.
func (d *decoder) validateAllow(c *Config) {
	for _, name := range sortedKeys(c.Agents.Allow) {
		p := c.Agents.Allow[name]
		base := "agents.allow." + name
		for i, a := range p.Actuators {
			if _, ok := c.Actuators[a]; !ok && d.ok(fmt.Sprintf("%s.actuators[%d]", base, i)) {
				d.errorf(fmt.Sprintf("%s.actuators[%d]", base, i), "no actuator %q (actuators: %s)", a, strings.Join(c.ActuatorNames(), ", "))
			}
		}
		for i, op := range p.Ops {
			if !slices.Contains(allowOps, op) && d.ok(fmt.Sprintf("%s.ops[%d]", base, i)) {
				d.errorf(fmt.Sprintf("%s.ops[%d]", base, i), "unknown op %q (ops: %s)", op, strings.Join(allowOps, ", "))
			}
		}
		if u := deviceUser(c, name); u != "" {
			d.errorf(base, "%q is also the MQTT user of actuator %s: an agent and a device need users of their own", name, u)
		}
		if slices.Contains(p.Ops, "reset") && !c.MQTT.AllowReset && d.ok(base+".ops") {
			d.warnf(base+".ops", "reset is listed but mqtt.allow_reset is off: the agent's resets are refused")
		}
	}
	if c.MQTT.AllowReset && d.ok("mqtt.allow_reset") {
		tls := c.MQTT.UsesTLS() || (c.MQTT.Embedded() && c.MQTT.TLS.CertFile != "")
		if !tls {
			d.errorf("mqtt.allow_reset", "a reset over MQTT carries the operator token: only over TLS (an ssl://, mqtts:// or wss:// broker, or the embedded broker with mqtt.tls)")
		}
	}
}

// deviceUser returns the MQTT actuator whose device logs in as user, or "".
func deviceUser(c *Config, user string) string {
	for _, name := range c.ActuatorNames() {
		if m, ok := c.Actuators[name].Section.(*MQTTActuator); ok && m.User == user {
			return name
		}
	}
	return ""
}

// allowOps are the ops agents.allow may name. Halt is among them but is
// never forbidden.
var allowOps = []string{"hello", "heartbeat", "bye", "begin", "step", "commit", "abort", "status", "reset", "halt"}

// pick returns the first of paths that was written.
func pick(d *decoder, paths ...string) string {
	for _, p := range paths {
		if d.set(p) {
			return p
		}
	}
	return paths[len(paths)-1]
}

func (d *decoder) validateBroker(m MQTT) {
	tlsKeys := []struct {
		key string
		set bool
	}{
		{"ca_file", m.TLS.CAFile != ""},
		{"cert_file", m.TLS.CertFile != ""},
		{"key_file", m.TLS.KeyFile != ""},
		{"insecure_skip_verify", m.TLS.InsecureSkipVerify},
	}
	if m.Embedded() {
		if d.ok("mqtt.listen") {
			if m.Listen == "" {
				d.errorf("mqtt.listen", "the embedded broker needs an address to listen on, e.g. 127.0.0.1:1883")
			} else if err := d.checkListen("mqtt.listen", m.Listen); err != nil {
				d.errorf("mqtt.listen", "%v", err)
			}
		}
		for _, k := range tlsKeys {
			if k.set && (k.key == "ca_file" || k.key == "insecure_skip_verify") {
				d.errorf("mqtt.tls."+k.key, "the embedded broker takes only cert_file and key_file (its listener's certificate); %s is for an external broker", k.key)
			}
		}
		if (m.TLS.CertFile == "") != (m.TLS.KeyFile == "") {
			d.errorf(pick(d, "mqtt.tls.cert_file", "mqtt.tls.key_file"), "cert_file and key_file go together")
		}
		d.validateEmbeddedAuth(m)
		return
	}
	// credentials_dir stays: mosquitto-config writes the logins' clear
	// passwords there, and ctl and `credentials` read them from it.
	for _, k := range []string{"password_file", "anonymous"} {
		if d.set("mqtt.auth." + k) {
			d.warnf("mqtt.auth."+k, "ignored: auth is the embedded broker's; an external broker authenticates on its own (saga-supervisor mosquitto-config writes its password file and ACL)")
		}
	}
	if err := checkBrokerURL(m.Broker); err != nil {
		d.errorf("mqtt.broker", "%v", err)
		return
	}
	if m.Listen != "" && d.ok("mqtt.listen") {
		d.errorf("mqtt.listen", "listen is only for the embedded broker; remove it for an external one")
	}
	if !m.UsesTLS() {
		for _, k := range tlsKeys {
			if k.set {
				d.errorf("mqtt.tls."+k.key, "TLS settings need an ssl://, tls://, mqtts:// or wss:// broker, not %.60s", m.Broker)
			}
		}
		return
	}
	if (m.TLS.CertFile == "") != (m.TLS.KeyFile == "") {
		d.errorf(pick(d, "mqtt.tls.cert_file", "mqtt.tls.key_file"), "cert_file and key_file go together")
	}
	if m.TLS.InsecureSkipVerify {
		d.warnf("mqtt.tls.insecure_skip_verify", "the broker's certificate is not verified: anyone on the path can impersonate it")
	}
}

// checkBrokerURL accepts the URLs paho.mqtt.golang dials: scheme, host and
// port, a path only for websockets.
func checkBrokerURL(s string) error {
	const want = `want "embedded" or a URL such as tcp://host:1883, ssl://host:8883 or wss://host/mqtt`
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || u.Opaque != "" || u.Host == "" {
		return fmt.Errorf("bad broker %.60q: %s", s, want)
	}
	scheme := strings.ToLower(u.Scheme)
	if !plainSchemes[scheme] && !tlsSchemes[scheme] {
		return fmt.Errorf("unsupported scheme %q: want tcp, mqtt, ssl, tls, mqtts, ws or wss", u.Scheme)
	}
	if u.User != nil {
		// Credentials in the URL would escape password_file's mode check
		// and show up wherever the broker is logged.
		return fmt.Errorf("the broker URL must not hold credentials: use username and password_file")
	}
	if u.Hostname() == "" {
		return fmt.Errorf("bad broker %.60q: no host", s)
	}
	if p, err := strconv.Atoi(u.Port()); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("broker %.60q needs a port, e.g. :1883 (:8883 for TLS)", s)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("broker %.60q: a query or fragment is not used; remove it", s)
	}
	if u.Path != "" && u.Path != "/" && scheme != "ws" && scheme != "wss" {
		return fmt.Errorf("broker %.60q: only ws:// and wss:// URLs have a path", s)
	}
	return nil
}

// checkListen checks a host:port to listen on, and warns when it is
// reachable from other machines (http.listen's own rules are
// validateHTTP's: it calls parseListen).
func (d *decoder) checkListen(path, addr string) error {
	loopback, port, err := parseListen(addr)
	if err != nil {
		return err
	}
	if !loopback {
		d.warnf(path, "%s", d.beyondLoopback(path, addr, port))
	}
	return nil
}

// parseListen checks a host:port to listen on and says whether only this
// machine can reach it.
func parseListen(addr string) (loopback bool, port string, err error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false, "", fmt.Errorf("bad address %.60q: want host:port, e.g. 127.0.0.1:8080", addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return false, "", fmt.Errorf("bad port %.20q in %.60q: want a number 0..65535", port, addr)
	}
	loopback = host == "localhost"
	if ip, err := netip.ParseAddr(host); err == nil {
		loopback = ip.IsLoopback()
	} else if host != "" && !validHostname(host) {
		return false, "", fmt.Errorf("bad host %.60q in %.60q", host, addr)
	}
	return loopback, port, nil
}

// unitIPRules are the IP rules of the shipped systemd unit
// (configs/saga-supervisor.service), which drop every packet from other
// machines whatever the config listens on; cmd/saga-supervisor's
// TestShippedFilesAgree keeps this text and the unit in step.
const unitIPRules = "IPAddressDeny=any and IPAddressAllow=localhost"

// dropinCommand is the command that writes the unit's drop-in letting
// other machines reach the listeners of this config (cmd/saga-supervisor's
// systemd-dropin), as the operator types it.
func (d *decoder) dropinCommand() string {
	return "sudo saga-supervisor systemd-dropin --config " + shellWord(d.file)
}

// shellWord is s as one word of a POSIX shell: as it is when that is
// safe, else single-quoted.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./,:=+@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// beyondLoopback is the warning for a listener at addr other machines
// could reach: what the shipped unit does to their packets, and the
// command whose drop-in lets them through. For HTTP (which by then has
// TLS and a login: validateHTTP refuses it otherwise) it also gives the
// SSH tunnel to the loopback port, the way in that needs neither (the
// same command in docs/HARDWARE.md and docs/SECURITY.md).
func (d *decoder) beyondLoopback(path, addr, port string) string {
	if path == "http.listen" {
		return fmt.Sprintf("%s is reachable from other machines (the default is 127.0.0.1), but the shipped systemd unit's %s drop their packets: "+
			"write the drop-in that lets them in (%s), or keep 127.0.0.1:%s and reach it over SSH: "+
			"ssh -N -L %s:127.0.0.1:%s USER@ROBOT, then open https://127.0.0.1:%s/ (docs/HARDWARE.md)", addr, unitIPRules, d.dropinCommand(), port, port, port, port)
	}
	return fmt.Sprintf("%s is reachable from other machines (the default is 127.0.0.1), but the shipped systemd unit's %s drop their packets: "+
		"write the drop-in that lets them in (%s), or allow their addresses yourself (systemctl edit saga-supervisor: IPAddressAllow=192.168.1.0/24, say)", addr, unitIPRules, d.dropinCommand())
}

func validHostname(h string) bool {
	if len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				return false
			}
		}
	}
	return true
}

func (d *decoder) validateHTTP(h HTTP) {
	d.validateHTTPListener(h)
	d.validateSecret("http.reset_token", h.ResetToken, "http.reset_token_file", h.ResetTokenFile)
	if h.ResetToken != "" && h.ResetTokenFile == "" && d.ok("http.reset_token") {
		if err := CheckResetToken(h.ResetToken.Reveal()); err != nil {
			d.errorf("http.reset_token", "%v", err)
		}
	}
	if h.GenerateViewerToken && h.ViewerTokenFile == "" && d.ok("http.viewer_token_file") {
		d.errorf("http.generate_viewer_token", "needs viewer_token_file: the file the generated token is kept in (e.g. ./saga-data/viewer-token)")
	}
	if h.SessionTTL < MinSessionTTL || h.SessionTTL > MaxSessionTTL {
		if d.ok("http.session_ttl") {
			d.errorf("http.session_ttl", "%v is outside %v..%v", h.SessionTTL, MinSessionTTL, MaxSessionTTL)
		}
	}
	if h.ResetToken != "" || h.ResetTokenFile != "" || !d.ok("http.reset_token_file") {
		return
	}
	// No token at all: a halt could never be reset.
	if d.set("http.generate_reset_token") && h.GenerateResetToken {
		d.errorf("http.generate_reset_token", "needs reset_token_file: the file the generated token is kept in (e.g. %s)", DefaultResetTokenFile)
		return
	}
	d.warnf("http.reset_token_file", "no operator token: a halt can never be reset (NO_OPERATOR_TOKEN); set reset_token_file (e.g. %s, generated at start)", DefaultResetTokenFile)
}

// validateHTTPListener applies the rules of a listener other machines can
// reach, as validateEmbeddedAuth does for the embedded broker: there the
// tokens and the session cookie would cross the network, so it needs TLS
// and a login, and a login needs a token to log in with. On loopback
// neither is needed (and both are allowed).
func (d *decoder) validateHTTPListener(h HTTP) {
	t := h.TLS
	if t.CertFile != "" || t.KeyFile != "" {
		if (t.CertFile == "") != (t.KeyFile == "") {
			d.errorf(pick(d, "http.tls.cert_file", "http.tls.key_file"), "cert_file and key_file go together")
		}
	}
	if t.HSTS && !t.Enabled() && d.ok("http.tls.hsts") {
		d.errorf("http.tls.hsts", "Strict-Transport-Security needs TLS: set http.tls.self_signed: true, or cert_file and key_file")
	}
	if t.HSTS && t.SelfSigned && d.ok("http.tls.hsts") {
		d.warnf("http.tls.hsts", "with a self-signed certificate a browser that has not imported it refuses the page outright, HSTS forbidding the click-through; keep hsts for a certificate browsers trust")
	}
	if h.Login && h.ResetToken == "" && h.ResetTokenFile == "" && h.ViewerTokenFile == "" && d.ok("http.reset_token_file", "http.viewer_token_file") {
		d.errorf(pick(d, "http.login", "http.listen"), "the login needs a token to log in with, and none is configured: set http.reset_token_file "+
			"(the operator's: %s, generated, by default) or http.viewer_token_file", DefaultResetTokenFile)
	}
	if h.Listen == "" || !d.ok("http.listen") {
		return
	}
	loopback, port, err := parseListen(h.Listen)
	if err != nil {
		d.errorf("http.listen", "%v", err)
		return
	}
	switch {
	case loopback:
	case !t.Enabled():
		d.errorf("http.listen", "%s is reachable from other machines (the default is 127.0.0.1), and HTTP there needs TLS and a login, "+
			"or the tokens and the session cookie would cross the network in clear: add http.tls.self_signed: true (or http.tls.cert_file and key_file; "+
			"the login is then on by default) and write the drop-in that lets their packets through the shipped systemd unit's %s (%s); "+
			"or keep 127.0.0.1:%s and reach it over SSH: ssh -N -L %s:127.0.0.1:%s USER@ROBOT, then open http://127.0.0.1:%s/ (docs/HARDWARE.md)",
			h.Listen, unitIPRules, d.dropinCommand(), port, port, port, port)
	case !h.Login:
		d.errorf("http.login", "off on %s, which other machines can reach: anyone there could read the robot's state and halt it; "+
			"remove login: false (a login is the default beyond loopback), or listen on 127.0.0.1", h.Listen)
	default:
		d.warnf("http.listen", "%s", d.beyondLoopback("http.listen", h.Listen, port))
	}
}

// MinResetTokenLen is the shortest operator token accepted: 32 bytes, so
// that guessing it is hopeless even without the HTTP rate limit (over MQTT
// an agent's request rate is the only limit).
const MinResetTokenLen = 32

// CheckResetToken refuses a token too short to resist guessing, or one an
// "Authorization: Bearer <token>" header cannot carry as it is: the rule
// for a token in a file, inline, or generated.
func CheckResetToken(t string) error {
	if len(t) < MinResetTokenLen {
		return fmt.Errorf("the reset token is %d bytes: it must be at least %d (e.g. openssl rand -hex 32)", len(t), MinResetTokenLen)
	}
	if strings.IndexFunc(t, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return fmt.Errorf("the reset token must not hold spaces or control characters (HTTP carries it as Authorization: Bearer <token>)")
	}
	return nil
}

// validateSecret checks an inline secret against its file alternative.
func (d *decoder) validateSecret(inlinePath string, inline Secret, filePath, file string) {
	switch {
	case inline != "" && file != "":
		d.errorf(inlinePath, "set either %s or %s, not both", lastKey(inlinePath), lastKey(filePath))
		d.bad[filePath] = true // not read: which one was meant is unclear
	case inline != "":
		d.warnf(inlinePath, "an inline secret is readable by whoever can read this file; prefer %s (mode 0600)", lastKey(filePath))
	}
}

func lastKey(path string) string { return path[strings.LastIndexByte(path, '.')+1:] }

// readSecrets reads the secret files named, replacing the inline values
// (which validateSecret made sure are empty).
func (d *decoder) readSecrets(c *Config) {
	for _, s := range []struct {
		path string
		file string
		into *Secret
	}{
		{"mqtt.password_file", c.MQTT.PasswordFile, &c.MQTT.Password},
		{"http.reset_token_file", c.HTTP.ResetTokenFile, &c.HTTP.ResetToken},
	} {
		if s.file == "" || !d.ok(s.path) {
			continue
		}
		if s.into == &c.HTTP.ResetToken && c.HTTP.GenerateResetToken {
			// A generated token that is not there yet is created at start
			// (daemon.EnsureResetToken); one that is there is checked now.
			// The embedded default's is left to the daemon: Default reads
			// nothing from the working directory.
			if d.defaultConfig || missing(s.file) {
				continue
			}
		}
		v, err := readSecret(s.file)
		if err == nil && s.into == &c.HTTP.ResetToken {
			if err = CheckResetToken(v.Reveal()); err != nil {
				err = fmt.Errorf("%s: %w", s.file, err)
			}
		}
		if err != nil {
			d.errorf(s.path, "%v", err)
			continue
		}
		*s.into = v
	}
	d.readViewerToken(c)
	d.checkHTTPTLS(c)
	// The TLS client key is a secret too: refused if group or others may
	// read it. Only its mode is checked here; the MQTT transport loads it.
	if k := c.MQTT.TLS.KeyFile; k != "" && !c.MQTT.Embedded() && c.MQTT.UsesTLS() && d.ok("mqtt.tls.key_file") {
		if err := checkSecretFile(k); err != nil {
			d.errorf("mqtt.tls.key_file", "%v", err)
		}
	}
}

// readViewerToken reads http.viewer_token_file — unless it is to be
// generated and is not there yet (daemon.EnsureViewerToken) — with the
// operator token's rules; the two tokens must differ, or a login could not
// tell the roles apart.
func (d *decoder) readViewerToken(c *Config) {
	h := &c.HTTP
	if h.ViewerTokenFile == "" || !d.ok("http.viewer_token_file") {
		return
	}
	if h.GenerateViewerToken && missing(h.ViewerTokenFile) {
		return
	}
	v, err := readSecret(h.ViewerTokenFile)
	if err == nil {
		if err = CheckResetToken(v.Reveal()); err != nil {
			err = fmt.Errorf("%s: %s", h.ViewerTokenFile, strings.Replace(err.Error(), "the reset token", "the viewer token", 1))
		}
	}
	if err != nil {
		d.errorf("http.viewer_token_file", "%v", err)
		return
	}
	if h.ResetToken != "" && v == h.ResetToken {
		d.errorf("http.viewer_token_file", "%s holds the operator token: the viewer token must be another, or a viewer could reset", h.ViewerTokenFile)
		return
	}
	h.ViewerToken = v
}

// checkHTTPTLS checks the HTTP listener's certificate and key when they
// are there: the key private to its owner, and the pair one that loads. A
// self-signed pair not written yet is the daemon's to create
// (daemon.EnsureHTTPCert).
func (d *decoder) checkHTTPTLS(c *Config) {
	t := c.HTTP.TLS
	if t.CertFile == "" || t.KeyFile == "" || !d.ok("http.tls.cert_file", "http.tls.key_file") {
		return
	}
	if t.SelfSigned && missing(t.CertFile) && missing(t.KeyFile) {
		return
	}
	if err := checkSecretFile(t.KeyFile); err != nil {
		d.errorf(pick(d, "http.tls.key_file", "http.tls.self_signed"), "%v", err)
		return
	}
	if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
		hint := ""
		if t.SelfSigned {
			hint = " (to have a new self-signed pair generated, delete both files and restart)"
		}
		d.errorf(pick(d, "http.tls.cert_file", "http.tls.self_signed"), "%s and %s: %v%s", t.CertFile, t.KeyFile, err, hint)
	}
}

func (d *decoder) validateSupply(c *Config, name string) {
	p, s := "supplies."+name, c.Supplies[name]
	d.checkDriver(c, p, name, nil, &s)
	for _, k := range []string{"min_volts", "max_volts"} {
		if !d.set(p+"."+k) && d.ok(p+"."+k) {
			d.errorf(p+"."+k, "required")
		}
	}
	ok := d.set(p+".min_volts") && d.set(p+".max_volts") && d.ok(p+".min_volts", p+".max_volts", p+".hysteresis_volts")
	switch {
	case !ok:
	case s.MinVolts >= s.MaxVolts:
		d.errorf(p+".min_volts", "%g V is not below max_volts %g V", s.MinVolts, s.MaxVolts)
	case s.HysteresisVolts < 0:
		d.errorf(p+".hysteresis_volts", "must not be negative")
	case !(s.MinVolts+s.HysteresisVolts < s.MaxVolts-s.HysteresisVolts):
		// A tripped rail clears only inside the band narrowed by the
		// hysteresis at both ends; an empty band would latch it forever.
		d.errorf(p+".hysteresis_volts", "%g V leaves no band to clear in: [%g+%g, %g-%g] V is empty",
			s.HysteresisVolts, s.MinVolts, s.HysteresisVolts, s.MaxVolts, s.HysteresisVolts)
	}
	if d.ok(p+".debounce") && (s.Debounce < 0 || s.Debounce > maxSupplyTime) {
		d.errorf(p+".debounce", "%v is outside 0..%v", s.Debounce, maxSupplyTime)
	}
	if d.ok(p+".stale_after") && (s.StaleAfter <= 0 || s.StaleAfter > maxSupplyTime) {
		d.errorf(p+".stale_after", "%v is outside (0, %v]: a rail that stops reporting must go stale", s.StaleAfter, maxSupplyTime)
	}
}

// validateDriver checks that a driver is named and one of known, and
// reports whether it is.
func (d *decoder) validateDriver(p, driver string, known []string) bool {
	if !d.ok(p + ".driver") {
		return false
	}
	switch {
	case !d.set(p + ".driver"):
		d.errorf(p+".driver", "required (known drivers: %s)", strings.Join(known, ", "))
		return false
	case !slices.Contains(known, driver):
		d.errorf(p+".driver", "unknown driver %.40q (known drivers: %s)", driver, strings.Join(known, ", "))
		return false
	}
	return true
}

// validateMCUs checks the serial boards (the mcu driver checks the
// actuators and supplies on them).
func (d *decoder) validateMCUs(c *Config) {
	for _, name := range c.MCUNames() {
		p, m := "mcus."+name, c.MCUs[name]
		if err := checkName(name); err != nil {
			d.errorf(p, "%v", err)
		}
		usb := d.set(p + ".usb")
		switch {
		case m.Port != "" && usb:
			d.errorf(p+".usb", "give port or usb, not both")
		case m.Port == "" && !usb:
			d.errorf(p, "port or usb is required: how to find the board")
		case usb && (m.USB.VID == "" || m.USB.PID == ""):
			d.errorf(p+".usb", "vid and pid are both required")
		}
		for _, k := range []struct {
			key string
			v   time.Duration
		}{{"link_timeout", m.LinkTimeout}, {"ack_timeout", m.AckTimeout}} {
			if d.ok(p+"."+k.key) && (k.v <= 0 || k.v > 10*time.Second) {
				d.errorf(p+"."+k.key, "%v is outside (0, 10s]", k.v)
			}
		}
		if d.ok(p+".ack_timeout", p+".link_timeout") && m.AckTimeout >= m.LinkTimeout {
			d.errorf(p+".ack_timeout", "%v must be shorter than link_timeout %v", m.AckTimeout, m.LinkTimeout)
		}
		if m.Baud <= 0 && d.ok(p+".baud") {
			d.errorf(p+".baud", "must be positive")
		}
		if m.Retries < 0 || m.Retries > 10 {
			d.errorf(p+".retries", "%d is outside 0..10", m.Retries)
		}
	}
}

// validateEStop checks the e-stop input.
func (d *decoder) validateEStop(e EStop) {
	if !d.ok("estop") || !d.set("estop") {
		return
	}
	switch e.Driver {
	case "gpio":
	case "":
		d.errorf("estop.driver", "required with an estop section (gpio)")
		return
	default:
		d.errorf("estop.driver", "unknown driver %.40q (known: gpio)", e.Driver)
		return
	}
	if e.Pin == "" {
		d.errorf("estop.pin", "required: the input's pin, e.g. GPIO27")
	}
	switch e.Pull {
	case "", "up", "down", "float":
	default:
		d.errorf("estop.pull", "unknown %.20q (up, down or float)", e.Pull)
	}
	if e.Debounce < 0 || e.Debounce > time.Second {
		d.errorf("estop.debounce", "%v is outside 0..1s", e.Debounce)
	}
	if e.Poll < 0 || e.Poll > time.Second {
		d.errorf("estop.poll", "%v is outside 0..1s: the pin must be read at least every second", e.Poll)
	}
}

func (d *decoder) validateActuator(c *Config, name string) {
	p := "actuators." + name
	a := c.Actuators[name]
	if _, clash := c.Supplies[name]; clash {
		// Both live in the simulated world and under the status topics by
		// name, so one name must mean one thing.
		d.errorf(p, "%q is also the name of a supply; names must be unique across actuators and supplies", name)
	}
	kindOK := d.ok(p + ".kind")
	if !d.set(p+".kind") && kindOK {
		d.errorf(p+".kind", "required (servo, pwm, digital, setpoint or pulse)")
		kindOK = false
	}
	d.checkDriver(c, p, name, &a, nil)

	// Bounds.
	boundsOK := kindOK && d.ok(p+".min", p+".max")
	for _, k := range []string{"min", "max"} {
		if kindOK && !unitRange(a.Kind) && !d.set(p+"."+k) && d.ok(p+"."+k) {
			d.errorf(p+"."+k, "required for a %s", a.Kind)
			boundsOK = false
		}
	}
	if boundsOK {
		switch {
		case a.Min > a.Max:
			d.errorf(p+".min", "%g is above max %g", a.Min, a.Max)
			boundsOK = false
		case unitRange(a.Kind) && (a.Min < 0 || a.Max > 1):
			at := p + ".max"
			if a.Min < 0 {
				at = p + ".min"
			}
			d.errorf(at, "a %s's values lie in [0, 1]; [%g, %g] does not", a.Kind, a.Min, a.Max)
			boundsOK = false
		}
	}
	for _, k := range []struct {
		key string
		v   float64
	}{{"max_step", a.MaxStep}, {"max_rate", a.MaxRate}} {
		if k.v < 0 && d.ok(p+"."+k.key) {
			d.errorf(p+"."+k.key, "must not be negative (0: no limit)")
		}
	}

	// Start-up value and safe policy: both must be values the gate would
	// allow. They are never clamped: a config that says the arm starts
	// outside its limits is wrong, and guessing where it is would be worse.
	inRange := func(v float64) string {
		if v < a.Min || v > a.Max {
			return fmt.Sprintf("%g is outside [min, max] = [%g, %g]", v, a.Min, a.Max)
		}
		if a.Kind == actuators.Digital && v != 0 && v != 1 {
			return fmt.Sprintf("%g is neither 0 (off) nor 1 (on)", v)
		}
		return ""
	}
	if boundsOK && d.ok(p+".initial") {
		if msg := inRange(a.Initial); msg != "" {
			if !d.set(p + ".initial") {
				msg = "the default initial value " + msg + "; set initial"
			}
			d.errorf(p+".initial", "%s", msg)
		}
	}
	if a.Safe.Mode == actuators.SafeValue && d.ok(p+".safe") && kindOK {
		switch {
		case a.Kind == actuators.Pulse:
			d.errorf(p+".safe.value", "a pulse has no position to go to: use hold or detach")
		case boundsOK:
			if msg := inRange(a.Safe.Value); msg != "" {
				d.errorf(p+".safe.value", "%s", msg)
			}
		}
	}

	// Supply.
	if a.Supply != "" && d.ok(p+".supply") {
		if _, ok := c.Supplies[a.Supply]; !ok {
			known := "none are configured under supplies"
			if len(c.Supplies) > 0 {
				known = "known: " + strings.Join(c.SupplyNames(), ", ")
			}
			d.errorf(p+".supply", "unknown supply %.40q (%s)", a.Supply, known)
		}
	}
	d.validateSupplyBounds(c, p, a)

	if d.ok(p+".timeout") && (a.Timeout <= 0 || a.Timeout > maxTimeout) {
		d.errorf(p+".timeout", "%v is outside (0, %v]", a.Timeout, maxTimeout)
	}
}

// validateSupplyBounds checks an actuator's own voltage bounds on its supply.
func (d *decoder) validateSupplyBounds(c *Config, p string, a Actuator) {
	minP, maxP := p+".supply_min_volts", p+".supply_max_volts"
	if !d.ok(minP, maxP) {
		return
	}
	if a.SupplyMinVolts < 0 || a.SupplyMaxVolts < 0 {
		d.errorf(pick(d, minP, maxP), "must not be negative (0: the supply's own bound)")
		return
	}
	if a.SupplyMinVolts == 0 && a.SupplyMaxVolts == 0 {
		return
	}
	if a.Supply == "" {
		// The gate only checks the supply an actuator names; bounds without
		// one would be silently ignored.
		d.errorf(pick(d, minP, maxP), "voltage bounds need a supply: set supply")
		return
	}
	if a.SupplyMaxVolts != 0 && a.SupplyMinVolts > a.SupplyMaxVolts {
		d.errorf(minP, "%g V is above supply_max_volts %g V", a.SupplyMinVolts, a.SupplyMaxVolts)
		return
	}
	s, ok := c.Supplies[a.Supply]
	if !ok || !d.ok("supplies."+a.Supply+".min_volts", "supplies."+a.Supply+".max_volts") {
		return
	}
	// Bounds the supply itself can never reach would refuse every command.
	if a.SupplyMinVolts > s.MaxVolts {
		d.errorf(minP, "%g V is above %s's max_volts %g V: the actuator could never move", a.SupplyMinVolts, a.Supply, s.MaxVolts)
	}
	if a.SupplyMaxVolts != 0 && a.SupplyMaxVolts < s.MinVolts {
		d.errorf(maxP, "%g V is below %s's min_volts %g V: the actuator could never move", a.SupplyMaxVolts, a.Supply, s.MinVolts)
	}
}

// checkName checks a device, actuator or supply name: it is an MQTT topic
// level (no '/', '+', '#', NUL), a log field and a world-file slot name, and
// something people type on a command line (no spaces or control characters).
func checkName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("a name must not be empty")
	case len(name) > maxNameLen:
		return fmt.Errorf("name %.20q... is longer than %d bytes", name, maxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("name %q is not valid UTF-8", name)
	case strings.ContainsAny(name, "/+#"):
		return fmt.Errorf("name %q holds '/', '+' or '#', which MQTT topics reserve", name)
	}
	for _, r := range name {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return fmt.Errorf("name %q holds a space or control character", name)
		}
	}
	return nil
}

// checkPrefix checks the topic prefix: one or more topic levels.
func checkPrefix(prefix string) error {
	if prefix == "" {
		return fmt.Errorf("must not be empty (default saga/v1)")
	}
	if len(prefix) > 256 {
		return fmt.Errorf("is longer than 256 bytes")
	}
	if strings.HasPrefix(prefix, "$") {
		// Topics starting with $ are the broker's own ($SYS) and are not
		// matched by wildcard subscriptions.
		return fmt.Errorf("%q: a topic must not start with '$'", prefix)
	}
	for _, level := range strings.Split(prefix, "/") {
		if level == "" {
			return fmt.Errorf("%q has an empty topic level (a leading, trailing or double '/')", prefix)
		}
		if err := checkName(level); err != nil {
			return fmt.Errorf("%q: %v", prefix, err)
		}
	}
	return nil
}
