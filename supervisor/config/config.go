package config

import (
	"crypto/ed25519"
	_ "embed"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/recovery"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/ingress"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// DefaultYAML is the embedded default configuration: the simulated demo arm
// (base, shoulder, elbow and gripper servos on a battery), an in-process
// MQTT broker on 127.0.0.1:1883, HTTP on 127.0.0.1:8080 and the journal in
// ./saga-data. It is the file users copy to start their own.
//
//go:embed default.yaml
var DefaultYAML []byte

// DefaultName is the file name errors and Where use for DefaultYAML.
const DefaultName = "default.yaml"

// Default returns a fresh copy of the embedded default configuration. It
// would panic only if DefaultYAML did not parse, which TestDefault rules out
// for every build. It reads no file: its operator token, generated, is
// read (or created) by the daemon at start (daemon.EnsureResetToken).
func Default() *Config {
	c, err := parse(&decoder{file: DefaultName, at: map[string]place{}, bad: map[string]bool{}, claims: map[string]string{}, defaultConfig: true}, DefaultYAML)
	if err != nil {
		panic("config: the embedded default does not parse: " + err.Error())
	}
	return c
}

// Config is the whole configuration of one supervisor. Every field is filled:
// omitted keys hold their defaults after Parse.
type Config struct {
	// Device names this robot; it is the MQTT topic level after the prefix
	// (saga/v1/<device>) and part of the default client id. Required.
	Device string `yaml:"device"`
	// Board is the computer the supervisor runs on, for checking the pins
	// the file names (see Board): raspberry-pi (the default: any model),
	// raspberry-pi-3, raspberry-pi-4, raspberry-pi-zero-2, raspberry-pi-5
	// or generic.
	Board string `yaml:"board"`
	// StateDir is the directory every relative file path of the config
	// (the journal, the broker's password file and credentials, the sim
	// world, secret, TLS and key files) is relative to; itself relative to
	// the process's working directory. Default ".": the working directory.
	// The packaged config sets it to /var/lib/saga-supervisor, the unit's
	// StateDirectory, so that a tool given the file (ctl --config,
	// credentials, mosquitto-config) finds the daemon's files from any
	// directory. Parse resolves the paths (ResolvePath).
	StateDir  string              `yaml:"state_dir"`
	Journal   Journal             `yaml:"journal"`
	Unwind    Unwind              `yaml:"unwind"`
	Leases    Leases              `yaml:"leases"`
	Agents    Agents              `yaml:"agents"`
	MQTT      MQTT                `yaml:"mqtt"`
	HTTP      HTTP                `yaml:"http"`
	Sim       Sim                 `yaml:"sim"`
	Supplies  map[string]Supply   `yaml:"supplies"`
	Actuators map[string]Actuator `yaml:"actuators"` // at least one
	// EStop is an emergency-stop input; none by default.
	EStop EStop `yaml:"estop"`
	// MCUs are microcontroller boards on serial links (docs/SERIAL.md), by
	// name; actuators and supplies with driver: mcu name their board.
	MCUs map[string]MCU `yaml:"mcus"`
	// Approvals configures operator approvals for actuators marked
	// requires_approval (package approval).
	Approvals Approvals `yaml:"approvals"`
	// Zones group actuators for scoped halts: zone name to its actuators
	// (zones: {arm: [shoulder, elbow], base: [base]}). An actuator is in
	// at most one zone, or in none. A zone halt stops only its zone's
	// actuators; the full halt stops every zone. None by default.
	Zones map[string][]string `yaml:"zones"`

	file     string
	at       map[string]place // dotted path → where it was written
	warnings []string
}

// Approvals configures operator approvals: the public keys whose
// signatures the supervisor accepts, and the longest validity an approval
// may claim.
type Approvals struct {
	// PublicKeys are files, each holding one Ed25519 public key in the
	// format of package approval ("ed25519 <base64>"). Not secret: their
	// mode is not checked. Required as soon as an actuator sets
	// requires_approval.
	PublicKeys []string `yaml:"public_keys"`
	// MaxTTL is the longest not_after - not_before an approval may claim
	// (default 5m, 1s..1h).
	MaxTTL time.Duration `yaml:"max_ttl"`
	// Keys are the keys read from PublicKeys by Parse and Load, in order.
	Keys []ed25519.PublicKey `yaml:"-"`
}

// Journal configures the write-ahead journal.
type Journal struct {
	// Dir is the journal directory. A relative path is relative to the
	// process's working directory (systemd: WorkingDirectory=), not to the
	// config file, so the embedded default and a copied file behave alike.
	Dir string `yaml:"dir"`
	// Durability: every-step (default) fsyncs every INTENT before its
	// effect; first-touch only a saga's first INTENT on each actuator.
	Durability rollback.Durability `yaml:"durability"`
	// SegmentSize is the preallocated size of new segments (default 16MiB).
	SegmentSize Size `yaml:"segment_size"`
	// CheckpointRecords: a checkpoint is written once this many records
	// are durable after the last one (default 16384), so a restart
	// rebuilds from at most about that many.
	CheckpointRecords int `yaml:"checkpoint_records"`
	// CheckpointInterval: a checkpoint is written at least this often
	// while anything is journaled (default 5m).
	CheckpointInterval time.Duration `yaml:"checkpoint_interval"`
	// Retention bounds the segments kept behind the oldest checkpoint.
	Retention Retention `yaml:"retention"`
}

// Retention bounds the journal's disk use (see wal.Retention): segments
// wholly behind the oldest checkpoint kept go, oldest first, while the
// journal is over MaxSize or they are older than MaxAge.
type Retention struct {
	MaxSize Size          `yaml:"max_size"` // default 256MiB; 0: no bound by size
	MaxAge  time.Duration `yaml:"max_age"`  // default 0: no bound by age
	// ArchiveDir, if set, keeps each deleted segment gzip-compressed
	// there; that directory is not bounded.
	ArchiveDir string `yaml:"archive_dir"`
}

// Unwind configures how sagas are unwound.
type Unwind struct {
	Order                 rollback.Order                 `yaml:"order"`                   // retrace (default) or direct
	Retries               int                            `yaml:"retries"`                 // after the first attempt: 1..10, default 2
	RetryBackoff          time.Duration                  `yaml:"retry_backoff"`           // first backoff, doubled each retry; default 10ms
	OnCompensationFailure rollback.OnCompensationFailure `yaml:"on_compensation_failure"` // halt (default) or continue
	MaxSagaCommands       int                            `yaml:"max_saga_commands"`       // default 10000
}

// Leases bounds the leases granted to agents (DESIGN §6). Heartbeat is
// DefaultTTL/4.
type Leases struct {
	DefaultTTL time.Duration `yaml:"default_ttl"` // granted when an agent asks for none; default 1s
	MinTTL     time.Duration `yaml:"min_ttl"`     // default 50ms
	MaxTTL     time.Duration `yaml:"max_ttl"`     // default 60s
}

// Agents bounds what each controller may ask of the supervisor. Every
// agent has its own lane (a queue and a rate limit), so one agent over its
// bounds is refused (RATE_LIMITED, BUSY) without delaying any other.
type Agents struct {
	Max      int     `yaml:"max"`       // agents served at once; default 16
	Queue    int     `yaml:"queue"`     // requests waiting per agent; default 32
	Rate     float64 `yaml:"rate"`      // requests admitted per second per agent; default 1000
	Burst    int     `yaml:"burst"`     // requests admitted at once after a pause; default 200
	MaxSagas int     `yaml:"max_sagas"` // open sagas per lease; default 8
	// Allow names the agents that may act and what each may do; an agent
	// not named may only halt (FORBIDDEN otherwise). The agent is the
	// MQTT username that alone may write cmd/<agent>. Empty: every agent
	// the broker lets in may do everything — only for an external
	// broker that authorises on its own. The embedded broker lets in
	// exactly these agents (and generates their credentials).
	Allow map[string]Permission `yaml:"allow"`
	// Quarantine, if after_refusals is set, quarantines an agent whose
	// requests were refused that often within window (its own faults
	// only: a malformed, forbidden or out-of-limit request, a flood), as
	// an operator's quarantine does, until an operator releases it.
	Quarantine AutoQuarantine `yaml:"quarantine"`
}

// AutoQuarantine configures automatic quarantine (agents.quarantine).
type AutoQuarantine struct {
	AfterRefusals int           `yaml:"after_refusals"` // 0 (default): never
	Window        time.Duration `yaml:"window"`         // default 10s, 1s..1h
}

// Permission is what one agent may do.
type Permission struct {
	// Actuators it may step. Omitted: every actuator; [] none.
	Actuators []string `yaml:"actuators"`
	// Ops it may send. Omitted: every op but reset; [] only halt (halt is
	// never forbidden).
	Ops []string `yaml:"ops"`
}

// IngressOptions returns the lanes' options.
func (a Agents) IngressOptions() ingress.Options {
	return ingress.Options{MaxAgents: a.Max, QueueLen: a.Queue, Rate: a.Rate, Burst: a.Burst}
}

// MQTT configures the command API's broker connection.
type MQTT struct {
	// Broker is "embedded" (an in-process broker listening on Listen) or
	// the URL of an external broker: tcp:// or mqtt:// (plain), ssl://,
	// tls:// or mqtts:// (TLS), ws:// or wss:// (websocket).
	Broker string `yaml:"broker"`
	// Listen is the embedded broker's address (default 127.0.0.1:1883);
	// empty for an external broker.
	Listen string `yaml:"listen"`
	// Prefix leads every topic: <prefix>/<device>/cmd ... (default saga/v1).
	Prefix string `yaml:"prefix"`
	// ClientID defaults to saga-supervisor-<device>.
	ClientID string `yaml:"client_id"`
	Username string `yaml:"username"`
	// Password is written inline (discouraged) or, after Load, read from
	// PasswordFile.
	Password     Secret `yaml:"password"`
	PasswordFile string `yaml:"password_file"`
	TLS          TLS    `yaml:"tls"`
	// MaxPayload bounds one MQTT message payload, both ways (default
	// 64KiB): larger requests are refused, larger replies and events are
	// summarised to fit. Set it no higher than the broker's limit.
	MaxPayload Size `yaml:"max_payload"`
	// Auth is how the embedded broker checks who connects (external
	// brokers authenticate on their own: see mosquitto-config).
	Auth Auth `yaml:"auth"`
	// AllowReset lets an agent given the reset op reset a halt over MQTT
	// with the operator token. Off by default: the token would cross the
	// broker; only allowed when the link is TLS.
	AllowReset bool `yaml:"allow_reset"`
	// HomeAssistant publishes Home Assistant MQTT discovery configs (off
	// by default).
	HomeAssistant HomeAssistant `yaml:"home_assistant"`
	// Fleet publishes a compact retained summary for fleet views (off by
	// default).
	Fleet Fleet `yaml:"fleet"`
}

// HomeAssistant configures Home Assistant MQTT discovery: retained configs
// under <discovery_prefix>/<component>/<device>/<object>/config for a halt
// button, a readiness sensor, supply voltages and actuator positions. The
// halt button publishes on estop/<user>: User must be allowed to log in
// (listed under agents.allow when that is not empty); it never needs more
// than halt. There is no reset entity: reset needs the operator token.
type HomeAssistant struct {
	Enabled bool `yaml:"enabled"`
	// DiscoveryPrefix is Home Assistant's discovery prefix (default
	// homeassistant).
	DiscoveryPrefix string `yaml:"discovery_prefix"`
	// User is the MQTT username Home Assistant logs in as (default
	// homeassistant): its halt button publishes on estop/<user>.
	User string `yaml:"user"`
}

// Fleet configures the fleet summary: a small retained JSON document on
// <prefix>/<device>/summary, so one subscription to <prefix>/+/summary
// (and <prefix>/+/status, the will) shows every robot on a broker.
type Fleet struct {
	Enabled bool `yaml:"enabled"`
	// Period is how often the summary is published even when nothing
	// changed (default 5s, 1s..1h); a change of readiness, halt or open
	// sagas is published at the next poll.
	Period time.Duration `yaml:"period"`
	// Viewers are read-only MQTT users: they may read every robot's
	// summary and status under the prefix, and nothing else.
	Viewers []string `yaml:"viewers"`
}

// Auth configures the embedded broker's authentication. Every client
// logs in with a username and password, and its client id must equal its
// username; the ACL comes from the config (agents.allow, the supervisor's
// own topics, MQTT-attached actuators' topics).
type Auth struct {
	// PasswordFile holds the broker's users, hashed (mosquitto_passwd's
	// format, so it can be shared with mosquitto). Default
	// ./saga-data/mqtt/passwd. A user the config needs (the supervisor,
	// each agent under agents.allow, each MQTT-attached actuator's
	// device user) that is missing from it is added at start with a
	// fresh random password, written in clear to CredentialsDir/<user>
	// (mode 0600) for the local tools: ctl, client and the demo read it.
	PasswordFile string `yaml:"password_file"`
	// CredentialsDir is where generated passwords are written. Default
	// ./saga-data/mqtt/credentials. For an external broker too: there
	// mosquitto-config writes them, and ctl and `credentials` read them.
	CredentialsDir string `yaml:"credentials_dir"`
	// Anonymous turns authentication and the ACL off: any local process
	// may then move any actuator. Only for a bench, and only on a
	// loopback listener.
	Anonymous bool `yaml:"anonymous"`
}

// TLS configures TLS to an external broker (ssl, tls, mqtts or wss URLs).
// The files are named here and read by the composer.
type TLS struct {
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"` // client certificate; with KeyFile
	KeyFile            string `yaml:"key_file"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// HTTP configures the status, metrics and operator endpoints.
type HTTP struct {
	// Listen is host:port (default 127.0.0.1:8080); "" disables HTTP.
	Listen string `yaml:"listen"`
	// ResetToken authorises an operator's reset. Written inline
	// (discouraged) or, after Load, read from ResetTokenFile. Empty: reset
	// over HTTP is not possible.
	ResetToken     Secret `yaml:"reset_token"`
	ResetTokenFile string `yaml:"reset_token_file"`
	// AllowedHosts are the names, besides the listener's own address and
	// localhost, 127.0.0.1 and [::1], that requests may carry in their Host
	// and Origin headers (see NormalizeHost): a name alone allows it on any
	// port, host:port on that port only. Anything else is refused, so a web
	// page cannot rebind its own DNS name to this address and speak to the
	// supervisor as if it were its own origin.
	AllowedHosts []string `yaml:"allowed_hosts"`
	// GenerateResetToken: the token in ResetTokenFile is the supervisor's
	// own. `run` creates the file at start when it is missing (a random
	// token, mode 0600) and uses the one it finds otherwise, never
	// replacing it; Parse and Load leave ResetToken empty for it (see
	// daemon.EnsureResetToken). Default true; false: a named file must exist.
	GenerateResetToken bool `yaml:"generate_reset_token"`
	// TLS serves HTTPS instead of plain HTTP. Required on a listener other
	// machines can reach, where the tokens and the session cookie would
	// otherwise cross the network in clear.
	TLS HTTPTLS `yaml:"tls"`
	// Login: every request but the login page's own (GET /login, its
	// script and style, POST /login, POST /logout), /healthz and /readyz
	// needs a session cookie (set by POST /login) or a bearer token, the
	// operator's or the viewer's. Default: on when Listen is beyond
	// loopback, off on loopback (ctl, curl and the dashboard on the robot
	// need none, as before). Off beyond loopback is refused.
	Login bool `yaml:"login"`
	// ViewerTokenFile holds the viewer token: a login that may read the
	// status, the events, the dashboard and the metrics, and halt, but
	// never reset. "" (default): no viewer token. Relative to state_dir.
	ViewerTokenFile string `yaml:"viewer_token_file"`
	// GenerateViewerToken: as GenerateResetToken, for ViewerTokenFile
	// (default false: a named file must exist).
	GenerateViewerToken bool `yaml:"generate_viewer_token"`
	// ViewerToken is the viewer token, read from ViewerTokenFile by Load
	// (or created by the daemon at start: daemon.EnsureViewerToken).
	ViewerToken Secret `yaml:"-"`
	// SessionTTL is how long a login lasts before the session cookie is
	// refused and the page asks for the token again (default 12h,
	// 1s..168h).
	SessionTTL time.Duration `yaml:"session_ttl"`
}

// HTTPTLS configures the HTTP listener's TLS: a certificate and key of
// the operator's (cert_file, key_file), or a self-signed pair the daemon
// generates at its first start (self_signed). Go's crypto/tls defaults
// apply, with TLS 1.2 at least.
type HTTPTLS struct {
	// CertFile and KeyFile are PEM files: the certificate (chain) and its
	// private key (mode 0600 or 0400). With SelfSigned their defaults are
	// DefaultHTTPCertFile and DefaultHTTPKeyFile.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// SelfSigned: when neither file exists, the daemon writes a
	// self-signed ECDSA P-256 certificate and key there at start (mode
	// 0600), naming http.listen's host, this machine's host name (and
	// <name>.local), localhost, 127.0.0.1, ::1 and http.allowed_hosts, and
	// uses them from then on; the banner and the log print its SHA-256
	// fingerprint for the operator to compare with the browser's.
	SelfSigned bool `yaml:"self_signed"`
	// HSTS sends Strict-Transport-Security (one year): for a certificate
	// browsers trust. Off by default: on a self-signed one a browser would
	// refuse the click-through that accepts it.
	HSTS bool `yaml:"hsts"`
}

// Enabled reports whether the listener serves TLS (after Parse, a
// self-signed pair has its file names).
func (t HTTPTLS) Enabled() bool { return t.CertFile != "" || t.SelfSigned }

// Default file names of a self-signed HTTP certificate and key (relative
// to state_dir, like every path).
const (
	DefaultHTTPCertFile = "./saga-data/http/tls.crt"
	DefaultHTTPKeyFile  = "./saga-data/http/tls.key"
)

// Default and bounds of http.session_ttl.
const (
	DefaultSessionTTL = 12 * time.Hour
	MinSessionTTL     = time.Second
	MaxSessionTTL     = 7 * 24 * time.Hour
)

// OperatorTokenFile is where the operator token is kept: the file the
// daemon reads it from (and, with generate_reset_token, creates), which
// `ctl reset` reads when given no token, and which the banner and the
// dashboard name. "" when there is none: an inline reset_token, or no
// token at all. A relative path was resolved against state_dir by Parse,
// as every path of the config is.
func (h HTTP) OperatorTokenFile() string { return h.ResetTokenFile }

// Sim configures the simulated world.
type Sim struct {
	// World is the file the simulated devices persist to ("" keeps them in
	// memory). Default ./saga-data/world.
	World string `yaml:"world"`
}

// Supply is one watched power rail.
type Supply struct {
	// Driver reads the voltage: sim, or a registered driver kind
	// (ina219, ina226, mcu; see DriverNames).
	Driver string `yaml:"driver"`
	// Section is the driver's own settings (sim: *SimSupply), written
	// under the driver's key: its defaults when the file wrote none.
	Section  any `yaml:"-"`
	sections sections
	// MinVolts and MaxVolts bound the rail; required.
	MinVolts float64 `yaml:"min_volts"`
	MaxVolts float64 `yaml:"max_volts"`
	// HysteresisVolts narrows the band a tripped rail must return to before
	// it clears (default 0).
	HysteresisVolts float64 `yaml:"hysteresis_volts"`
	// Debounce is how long a violation must last to trip, and how long good
	// readings must last to clear (default 200ms).
	Debounce time.Duration `yaml:"debounce"`
	// StaleAfter is how old the last reading may be (default 2s).
	StaleAfter time.Duration `yaml:"stale_after"`
	// Action is taken on a trip: warn, refuse, unwind or halt (default halt,
	// the safe end: a rail that trips with no action configured stops the
	// robot rather than only logging).
	Action limits.Action `yaml:"action"`
	// Zone, if set, scopes the halt action to that zone (zones): a trip
	// halts the zone, not the supervisor. Only with action: halt.
	Zone string `yaml:"zone"`
}

// MCU is a microcontroller board on a serial link. Exactly one of Port and
// USB finds it.
type MCU struct {
	// Port is the device, e.g. /dev/ttyACM0 or, better, a stable
	// /dev/serial/by-id/... link.
	Port string `yaml:"port"`
	// USB finds the board by its USB ids at every (re)connect, under
	// whatever name the kernel gave it.
	USB USBID `yaml:"usb"`
	// Baud is the line speed (default 115200, 8N1).
	Baud int `yaml:"baud"`
	// LinkTimeout: no valid frame from the board for this long and the link
	// is lost: steps in flight are in doubt and the supervisor is not ready
	// (default 500ms).
	LinkTimeout time.Duration `yaml:"link_timeout"`
	// AckTimeout is how long a request waits for its answer before it is
	// sent again (default 50ms); Retries how often (default 3).
	AckTimeout time.Duration `yaml:"ack_timeout"`
	Retries    int           `yaml:"retries"`
}

// USBID identifies a USB serial board.
type USBID struct {
	VID          string `yaml:"vid"`           // vendor id, hex: "2e8a"
	PID          string `yaml:"pid"`           // product id, hex: "000a"
	SerialNumber string `yaml:"serial_number"` // tells boards of one kind apart
}

// SimSupply configures a simulated supply.
type SimSupply struct {
	// Volts is the voltage a new simulated supply starts at (default: the
	// middle of [min_volts, max_volts]).
	Volts float64 `yaml:"volts"`
}

// Actuator is one named output. Its name is its key under actuators.
type Actuator struct {
	Kind actuators.Kind `yaml:"kind"` // servo, pwm, digital, setpoint or pulse; required
	// Driver sets the output: "sim" (a simulated output), "mqtt" (a
	// device that takes setpoints over MQTT; see MQTTActuator) or a
	// registered driver kind (gpio, mcu, pca9685; see DriverNames).
	Driver string `yaml:"driver"`
	// Section is the driver's own settings (sim: *SimActuator, mqtt:
	// *MQTTActuator), written under the driver's name; its defaults when
	// the file wrote none. A section of another driver is refused.
	Section  any `yaml:"-"`
	sections sections
	// Min and Max bound every command; required, except for pwm and digital
	// where they default to 0 and 1 (and must lie within [0, 1]).
	Min float64 `yaml:"min"`
	Max float64 `yaml:"max"`
	// MaxStep bounds the change from the previous command; MaxRate the
	// change per second. 0 (the default) means no such limit.
	MaxStep float64       `yaml:"max_step"`
	MaxRate float64       `yaml:"max_rate"`
	Policy  limits.Policy `yaml:"policy"` // reject (default) or clamp
	// Initial is the commanded value assumed at power-up, before any
	// journaled command (default 0). It must lie in [Min, Max]: it is never
	// clamped.
	Initial float64 `yaml:"initial"`
	// Safe is the safe policy: hold (default), detach or {value: X} with X
	// in [Min, Max]. A pulse cannot have a safe value: it has no position.
	Safe actuators.SafePolicy `yaml:"safe"`
	// Supply names the supply this actuator draws from ("" for none), and
	// SupplyMinVolts/SupplyMaxVolts its own bounds on it (0: the supply's).
	Supply         string  `yaml:"supply"`
	SupplyMinVolts float64 `yaml:"supply_min_volts"`
	SupplyMaxVolts float64 `yaml:"supply_max_volts"`
	// Timeout bounds one driver call (default actuators.DefaultTimeout).
	Timeout time.Duration `yaml:"timeout"`
	// RequiresApproval: a step moves this actuator only with operators'
	// signed, single-use approvals naming it, the value and the saga, from
	// this many distinct keys (approvals: must list at least as many).
	// Written true (1), false (0, the default) or a count, 0..8: 2 is
	// two-person approval.
	RequiresApproval Approvers `yaml:"requires_approval"`
}

// Approvers is how many operators' approvals, from distinct keys, a step
// of an actuator needs: 0 none, 1 one (YAML true), 2 two, and so on.
type Approvers int

// SimActuator configures a simulated actuator.
type SimActuator struct {
	// Slew is how fast a simulated servo moves, in degrees per second
	// (default 720; 0 reaches any angle at once). Servos only.
	Slew float64 `yaml:"slew"`
}

// MQTTActuator configures an MQTT-attached actuator (driver: mqtt): a device
// that takes {"seq":N,"value":V} on SetTopic and acknowledges on AckTopic
// (docs/API.md, "MQTT-attached actuators"). The device is reached through
// the supervisor's own broker — the mqtt section: the embedded broker at its
// listen address, or the external broker with the same login and TLS — on a
// connection of its own, client id <mqtt.client_id>-devices, shared by all
// MQTT actuators. Topics are exact topic names (no wildcards) outside the
// supervisor's own <prefix>/<device>/ tree, and no two actuators share one.
type MQTTActuator struct {
	SetTopic   string `yaml:"set_topic"`   // required: where setpoints and halts are published
	AckTopic   string `yaml:"ack_topic"`   // required: where the device acknowledges them
	StateTopic string `yaml:"state_topic"` // optional: the device's retained {"value":V}, read back
	// User is the device's MQTT username on the embedded broker, whose ACL
	// lets it read its set topic and write its ack and state topics (and
	// nothing else). Default: the actuator's name. Devices sharing one
	// board may share a user.
	User string `yaml:"user"`
}

// EStop configures an emergency-stop input. Pressing it halts the
// supervisor (every actuator to its safe policy, every command refused
// until an operator resets); while it is pressed, or cannot be read, the
// supervisor is not ready, so a reset is refused too. Found pressed at
// start, it halts before crash recovery moves anything.
type EStop struct {
	// Driver is "" (no e-stop, the default) or gpio.
	Driver string `yaml:"driver"`
	// Pin names the input pin as periph does ("GPIO27"). Required.
	Pin string `yaml:"pin"`
	// ActiveHigh: pressed reads high. The default, active-low (pressed
	// reads low), suits a normally-open button to ground; a normally-closed
	// contact to ground with active_high also stops on a cut wire.
	ActiveHigh bool `yaml:"active_high"`
	// Pull is the input's pull resistor: up, down or float (default: pulled
	// towards released).
	Pull string `yaml:"pull"`
	// Debounce is how long the line must be quiet before a change counts
	// (default 20ms).
	Debounce time.Duration `yaml:"debounce"`
	// Poll is how often the pin is read even without an edge (default
	// 50ms).
	Poll time.Duration `yaml:"poll"`
	// Zone, if set, makes the e-stop a zone's (zones): a press halts the
	// zone, not the supervisor, and while pressed the zone cannot be
	// reset. Default: the e-stop halts everything.
	Zone string `yaml:"zone"`
}

// ApprovalRequired returns the names of the actuators marked
// requires_approval, sorted.
func (c *Config) ApprovalRequired() []string {
	var names []string
	for _, n := range c.ActuatorNames() {
		if c.Actuators[n].RequiresApproval > 0 {
			names = append(names, n)
		}
	}
	return names
}

// ZoneNames returns the zone names, sorted.
func (c *Config) ZoneNames() []string { return sortedKeys(c.Zones) }

// ActuatorNames returns the actuator names, sorted.
func (c *Config) ActuatorNames() []string { return sortedKeys(c.Actuators) }

// MCUNames returns the MCU board names, sorted.
func (c *Config) MCUNames() []string { return sortedKeys(c.MCUs) }

// SupplyNames returns the supply names, sorted.
func (c *Config) SupplyNames() []string { return sortedKeys(c.Supplies) }

func sortedKeys[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// File returns the name the config was loaded or parsed under.
func (c *Config) File() string { return c.file }

// Where returns where a dotted path (e.g. "actuators.elbow.max") was written,
// as "file:line:col", so that the composer can point at the config when a
// driver refuses what it says. For a path that was not written it names the
// nearest enclosing one that was; at worst, the file.
func (c *Config) Where(path string) string {
	for p := path; ; p = parent(p) {
		if at, ok := c.at[p]; ok {
			return fmt.Sprintf("%s:%d:%d", c.file, at.line, at.col)
		}
		if p == "" {
			return c.file
		}
	}
}

// Warnings lists what is allowed but discouraged (inline secrets, a listener
// reachable from the network, TLS without verification), each located like
// an error, for the daemon to log at start-up.
func (c *Config) Warnings() []string { return append([]string(nil), c.warnings...) }

// Topic returns the topic root of this device's MQTT API: <prefix>/<device>.
func (c *Config) Topic() string { return c.MQTT.Prefix + "/" + c.Device }

// RollbackConfig returns the engine settings of the config. The composer
// adds what only it has: the journal, the actuator registry, the supplies,
// a clock and a logger.
func (c *Config) RollbackConfig() rollback.Config {
	return rollback.Config{
		Durability:            c.Journal.Durability,
		Order:                 c.Unwind.Order,
		OnCompensationFailure: c.Unwind.OnCompensationFailure,
		Retries:               c.Unwind.Retries,
		RetryBackoff:          c.Unwind.RetryBackoff,
		MaxSagaCommands:       c.Unwind.MaxSagaCommands,
		MaxSagasPerLease:      c.Agents.MaxSagas,
		Zones:                 c.Zones,
	}
}

// WALOptions returns the journal's options (FS and FlushDelay left at
// their defaults).
func (j Journal) WALOptions() wal.Options {
	return wal.Options{SegmentSize: int64(j.SegmentSize), Retention: wal.Retention{
		MaxBytes: int64(j.Retention.MaxSize), MaxAge: j.Retention.MaxAge, ArchiveDir: j.Retention.ArchiveDir}}
}

// CheckpointOptions returns the checkpointer's options: it catches up with
// the journal four times a second (a catch-up with nothing new costs an
// atomic load).
func (j Journal) CheckpointOptions() recovery.CheckpointOptions {
	return recovery.CheckpointOptions{Every: 250 * time.Millisecond, Records: uint64(j.CheckpointRecords), Interval: j.CheckpointInterval}
}

// DefaultRetentionSize is journal.retention.max_size's default: sixteen
// default segments, months of a busy robot's commands, a small part of an
// SD card.
const DefaultRetentionSize = 256 << 20

// Heartbeat is how often an agent should renew a lease of the default TTL.
func (l Leases) Heartbeat() time.Duration { return l.DefaultTTL / 4 }

// Embedded reports whether the supervisor runs its own broker.
func (m MQTT) Embedded() bool { return m.Broker == brokerEmbedded }

// UsesTLS reports whether the broker URL's scheme is a TLS one.
func (m MQTT) UsesTLS() bool {
	u, err := url.Parse(m.Broker)
	return err == nil && tlsSchemes[strings.ToLower(u.Scheme)]
}

// LimitsSpec returns the actuator's limits for the gate.
func (a Actuator) LimitsSpec() limits.Spec {
	return limits.Spec{
		Min: a.Min, Max: a.Max, MaxStep: a.MaxStep, MaxRate: a.MaxRate, Policy: a.Policy,
		Supply: a.Supply, SupplyMinVolts: a.SupplyMinVolts, SupplyMaxVolts: a.SupplyMaxVolts,
	}
}

// Actuator returns the actuators.Actuator this config describes, named
// name and driven by d. Drivers are built by the composer, never here.
func (a Actuator) Actuator(name string, d actuators.Driver) *actuators.Actuator {
	return &actuators.Actuator{
		Name: name, Kind: a.Kind, Limits: a.LimitsSpec(), Safe: a.Safe,
		Timeout: a.Timeout, Initial: a.Initial, Driver: d,
	}
}

// Spec returns the supply's spec for limits.NewSupply.
func (s Supply) Spec(name string) limits.SupplySpec {
	return limits.SupplySpec{
		Name: name, MinVolts: s.MinVolts, MaxVolts: s.MaxVolts, HysteresisVolts: s.HysteresisVolts,
		Debounce: s.Debounce, StaleAfter: s.StaleAfter, Action: s.Action,
	}
}
