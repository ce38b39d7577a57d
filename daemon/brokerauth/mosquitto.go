package brokerauth

import (
	"fmt"
	"strings"

	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// MosquittoConf is the mosquitto.conf that enforces the policy with the
// password file passwd and the ACL file acl (as `mosquitto-config` writes
// them): a plain listener on listen (host:port; "" for none) and, with
// tlsPort set, a TLS listener with the certificate and key files cert and
// key. mosquitto reads the password file and ACL as the user it drops to
// (mosquitto on Debian): `mosquitto-config` run as root gives them to it.
// The same text serves as a conf.d snippet: Debian's mosquitto.conf loads
// /etc/mosquitto/conf.d/*.conf after its own settings, so these win.
func MosquittoConf(cfg *config.Config, passwd, acl, listen string, tlsPort int, cert, key string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# mosquitto for saga-supervisor %s (device %s), written by\n", Supervisor(cfg), cfg.Device)
	b.WriteString("# `saga-supervisor mosquitto-config`. The files it names are the robot's\n")
	b.WriteString("# secrets: mode 0600, owned by the user mosquitto runs as.\n")
	b.WriteString("per_listener_settings false\n")
	if listen != "" {
		if host, port, ok := strings.Cut(listen, ":"); ok && !strings.Contains(port, ":") {
			fmt.Fprintf(&b, "# Plain MQTT on %s only: passwords cross this listener in clear.\nlistener %s %s\n", host, port, host)
		}
	}
	if tlsPort != 0 {
		fmt.Fprintf(&b, "# MQTT over TLS, for controllers on other machines.\nlistener %d\ncertfile %s\nkeyfile %s\ntls_version tlsv1.2\n", tlsPort, cert, key)
	} else {
		b.WriteString("# For controllers on other machines, add a TLS listener (and give them\n")
		b.WriteString("# ssl://host:8883), e.g.:\n#   listener 8883\n#   certfile /etc/mosquitto/certs/robot.crt\n")
		b.WriteString("#   keyfile /etc/mosquitto/certs/robot.key\n#   tls_version tlsv1.2\n")
	}
	b.WriteString("# Every client logs in; its client id is its username, so no one can\n")
	b.WriteString("# take over another's session (or the supervisor's).\n")
	b.WriteString("allow_anonymous false\nuse_username_as_clientid true\n")
	fmt.Fprintf(&b, "password_file %s\nacl_file %s\n", passwd, acl)
	b.WriteString("# Replies go out at once (no Nagle delay).\nset_tcp_nodelay true\n")
	fmt.Fprintf(&b, "# No packet larger than the supervisor's max_payload and a header.\nmax_packet_size %d\n", int(cfg.MQTT.MaxPayload)+1024)
	b.WriteString("# Bounded queues per client: a flood cannot grow the broker without end.\n")
	b.WriteString("max_queued_messages 10000\nmax_inflight_messages 1024\n")
	b.WriteString("# Sessions of clients that left are dropped after a day.\npersistent_client_expiration 1d\n")
	b.WriteString("# Nothing retained outlives a restart: the supervisor publishes its status\n")
	b.WriteString("# and states again on connecting (this overrides Debian's persistence true).\n")
	b.WriteString("persistence false\n")
	return b.String()
}
