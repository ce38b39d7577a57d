package supervisor

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/supervisor/lease"
)

// Status is what /api/v1/status and the MQTT status op report. Ready is
// fail-closed: it is true only when Reasons is empty.
type Status struct {
	Ready     bool             `json:"ready"`
	Reasons   []string         `json:"reasons"` // why not ready; empty when ready
	Halted    bool             `json:"halted"`
	HaltWhy   string           `json:"halt_reason,omitempty"`
	Journal   JournalStatus    `json:"journal"`
	Supplies  []SupplyJSON     `json:"supplies"`
	Actuators []ActuatorStatus `json:"actuators"`
	Leases    []LeaseJSON      `json:"leases"`
	OpenSagas []uint64         `json:"open_sagas"`
	// Drain is the drain in force (nil: none); Quarantined the agents an
	// operator barred (drain.go).
	Drain       *DrainJSON       `json:"drain,omitempty"`
	Quarantined []QuarantineJSON `json:"quarantined"`
	// Zones are the configured zones (and any the journal names) with
	// their halts. A zone halt does not make the supervisor not ready:
	// the other zones keep serving.
	Zones []ZoneJSON `json:"zones"`
}

// ZoneJSON is a zone's state for status.
type ZoneJSON struct {
	Name      string   `json:"name"`
	Actuators []string `json:"actuators"`
	Halted    bool     `json:"halted"`
	HaltWhy   string   `json:"halt_reason,omitempty"`
	// Held lists what keeps the zone from being reset (a supply bound to
	// it tripped, its e-stop pressed).
	Held []string `json:"held,omitempty"`
}

// JournalStatus describes the journal.
type JournalStatus struct {
	Dir     string `json:"dir"`
	LastSeq uint64 `json:"last_seq"`
	Durable uint64 `json:"durable_seq"`
	// DurableHash is the chain hash of record Durable, hex.
	DurableHash    string `json:"durable_hash"`
	Error          string `json:"error,omitempty"`
	TailCut        string `json:"tail_cut,omitempty"` // a torn tail cut at the last start
	RebuiltRecords uint64 `json:"replayed_at_start"`  // records the state was rebuilt from at start
}

// SupplyJSON is a supply's state for status.
type SupplyJSON struct {
	Name      string  `json:"name"`
	Volts     float64 `json:"volts"`
	Known     bool    `json:"known"`
	Stale     bool    `json:"stale"`
	Tripped   bool    `json:"tripped"`
	Code      string  `json:"code,omitempty"`
	Action    string  `json:"action"`
	ReadError string  `json:"read_error,omitempty"`
}

// ActuatorStatus is an actuator's state for status.
type ActuatorStatus struct {
	Name      string   `json:"name"`
	Kind      string   `json:"kind"`
	Commanded float64  `json:"commanded"`
	ReadBack  *float64 `json:"read_back,omitempty"`
	// NotDriven: the output is not being driven (never commanded since the
	// supervisor started, or detached), so there is nothing to read back.
	// It is no fault and does not count against readiness.
	NotDriven bool   `json:"not_driven,omitempty"`
	Error     string `json:"error,omitempty"` // read-back failure, lost link: a fault
	// ApprovalsRequired is how many operators' approvals, from distinct
	// keys, a step of it needs (requires_approval); 0: none.
	ApprovalsRequired int `json:"approvals_required,omitempty"`
}

// LeaseJSON is a live lease for status. It names the agent but carries
// neither the lease id nor the epoch: status is public (the retained MQTT
// status, the status op any agent may send, the HTTP page), and an id is
// a capability only its holder should have — the holder got it in its
// hello reply.
type LeaseJSON struct {
	Agent     string  `json:"agent"`
	TTLMS     int64   `json:"ttl_ms"`
	ExpiresIn float64 `json:"expires_in_s"`
}

// Status gathers the supervisor's state and its readiness.
func (s *Supervisor) Status() Status {
	now := s.now()
	st := Status{OpenSagas: s.engine.OpenSagas()}
	if st.OpenSagas == nil {
		st.OpenSagas = []uint64{}
	}
	var reasons []string
	st.Halted, st.HaltWhy = s.engine.Halted()
	if st.Halted {
		reasons = append(reasons, "halted: "+st.HaltWhy)
	}
	dseq, dhash := s.journal.DurableHead()
	st.Journal = JournalStatus{Dir: s.journal.Dir(), LastSeq: s.journal.LastSeq(), Durable: dseq, DurableHash: hex.EncodeToString(dhash[:]), RebuiltRecords: s.rebuiltRecords, TailCut: s.tailCut}
	if err := s.engine.Err(); err != nil {
		st.Journal.Error = err.Error()
		reasons = append(reasons, "journal failed: "+err.Error())
	}
	if r := s.barrierStatus(&st); r != "" {
		reasons = append(reasons, r)
	}
	reasons = append(reasons, inputReasons(s.opt.Inputs, s.opt.InputZones)...)
	for _, sup := range s.supplies.States(now) {
		j := SupplyJSON{Name: sup.Name, Volts: sup.Volts, Known: sup.Known, Stale: sup.Stale, Tripped: sup.Tripped,
			Code: string(sup.Code), Action: sup.Action.String(), ReadError: sup.ReadError}
		st.Supplies = append(st.Supplies, j)
		zoned := s.opt.SupplyZones[sup.Name] != "" && sup.Known && !sup.Stale
		if sup.Code != limits.OK && (sup.Action >= limits.Refuse || !sup.Known || sup.Stale) && !zoned {
			reasons = append(reasons, fmt.Sprintf("supply %s: %s", sup.Name, sup.Code))
		}
	}
	for _, name := range s.reg.Names() {
		a := s.reg.Get(name)
		as := ActuatorStatus{Name: name, Kind: string(a.Kind), ApprovalsRequired: s.approve.cfg.Required[name]}
		as.Commanded, _ = s.engine.Commanded(name)
		if d, ok := a.Driver.(actuators.Drifter); ok {
			// Moved by its device (a board's restart or watchdog) and not
			// yet adopted: until it is, the next step's prior would be
			// wrong, so not ready (the poller adopts it next round). A
			// step's own answer in transit is no move (Drifting).
			if v, moved := s.engine.Drifting(name, d.Drifted); moved {
				reasons = append(reasons, fmt.Sprintf("actuator %s: its device reports %g, not the %g commanded (adopting it)", name, v, as.Commanded))
			}
		}
		if rb, ok := a.Driver.(actuators.ReadBacker); ok {
			ctx, cancel := context.WithTimeout(context.Background(), a.DriverTimeout())
			v, err := rb.ReadBack(ctx)
			cancel()
			if err != nil {
				switch {
				case errors.Is(err, actuators.ErrNoReading):
					// Not driven (never commanded, or detached): nothing
					// to compare, and nothing wrong.
					as.NotDriven = true
				case errors.Is(err, actuators.ErrLinkLost):
					as.Error = err.Error()
					reasons = append(reasons, fmt.Sprintf("actuator %s: link lost", name))
				default:
					as.Error = err.Error()
					reasons = append(reasons, fmt.Sprintf("actuator %s: cannot be read: %v", name, err))
				}
			} else {
				as.ReadBack = &v
			}
		}
		st.Actuators = append(st.Actuators, as)
	}
	for _, l := range s.leases.Snapshot() {
		st.Leases = append(st.Leases, leaseJSON(l, now))
	}
	if st.Leases == nil {
		st.Leases = []LeaseJSON{}
	}
	st.Reasons = reasons
	if st.Reasons == nil {
		st.Reasons = []string{}
	}
	st.Ready = len(reasons) == 0
	st.Zones = []ZoneJSON{}
	for _, z := range s.engine.Zones() {
		acts := z.Actuators
		if acts == nil {
			acts = []string{}
		}
		st.Zones = append(st.Zones, ZoneJSON{Name: z.Name, Actuators: acts, Halted: z.Halted, HaltWhy: z.Reason, Held: s.zoneHeld(z.Name)})
	}
	return st
}

func leaseJSON(l lease.Lease, now time.Time) LeaseJSON {
	return LeaseJSON{Agent: l.Agent, TTLMS: l.TTL.Milliseconds(), ExpiresIn: l.Expires.Sub(now).Seconds()}
}
