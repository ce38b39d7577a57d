package api

// Status is the retained payload of the status topic: whether the
// supervisor is there and can take commands. It is small on purpose: it is
// also the last will, fixed when the supervisor connects. The full status
// is the reply to op status.
type Status struct {
	State      string   `json:"state"`             // StateOnline or StateOffline
	Ready      bool     `json:"ready"`             // commands can be admitted
	Reasons    []string `json:"reasons,omitempty"` // why not ready
	Halted     bool     `json:"halted"`            // latched halt: an operator must reset
	HaltReason string   `json:"halt_reason,omitempty"`
	// Seq grows with every status the supervisor publishes (it starts from
	// the wall clock in microseconds, so a restarted supervisor's sort
	// after its predecessor's): of two statuses, the one with the larger
	// seq is the newer. The offline will has none (0).
	Seq uint64 `json:"seq,omitempty"`
	// HaltedZones names the zones whose halt is latched (their actuators'
	// steps refused until a zone reset; the other zones serve).
	HaltedZones []string `json:"halted_zones,omitempty"`
}

// The values of Status.State.
const (
	StateOnline  = "online"
	StateOffline = "offline" // also the supervisor's last will
)

// State is the last value the supervisor commanded an actuator to: what
// it believes the actuator holds. A transport keeps the latest one per
// actuator (MQTT: retained on state/<actuator>).
type State struct {
	Actuator  string
	Commanded float64
}

type wireState struct {
	Actuator  string   `json:"actuator"`
	Commanded *float64 `json:"commanded"` // null when not finite (an unknown position)
}

// EncodeState encodes a state payload.
func EncodeState(s State) []byte {
	return mustMarshal(wireState{Actuator: s.Actuator, Commanded: finite(s.Commanded)})
}

// EncodeStatus encodes a status payload.
func EncodeStatus(s Status) []byte { return mustMarshal(s) }
