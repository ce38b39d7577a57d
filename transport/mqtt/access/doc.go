// Package access decides who may use an MQTT broker serving one supervisor,
// and how: a password file (the format mosquitto_passwd writes) says who a
// client is, and a Policy says what that identity may publish, retain and
// subscribe to. It does no networking: the embedded broker
// (transport/mqtt/embedded) consults it on every connect, publish and
// subscribe, and MosquittoACL renders the same rules as a mosquitto
// acl_file, so an external mosquitto enforces what the embedded broker does.
//
// Identities. Every client's MQTT client id must equal its username, so no
// client can take over another's session (mosquitto:
// use_username_as_clientid true). The supervisor is one principal with three
// usernames: S (commands, wills, replies, status, state, events), S-estop
// (its own e-stop connection) and S-devices (its connection to MQTT-attached
// actuators). An agent's username is its agent name: it writes only its own
// command, e-stop and will topics and reads only its own replies, status,
// state and events. A device user reads its set topics and writes its ack
// and state topics. Only the supervisor (status, state) and a device (its
// state topic) may retain. Any other user is refused at connect.
package access
