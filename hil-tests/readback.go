//go:build !saga_lean

package hil

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Read-back bounds: a /state document larger than MaxStateBytes or with
// more than MaxOutputs outputs is refused as garbage.
const (
	MaxStateBytes = 1 << 20
	MaxOutputs    = 256
)

// State is the read-back channel's view of the outputs: the JSON that
// `saga-supervisor sim-mcu` serves at GET /state, and that a real rig's
// read-back must serve too. Only outputs is required; a real rig that
// cannot tell faults or sessions leaves them out.
type State struct {
	Outputs []Output `json:"outputs"`
	// Faults are the board's fault flags as "none" or names joined by "|"
	// (watchdog, reset, supply, output, estop); "" when not reported.
	Faults string `json:"faults"`
	// InSession is whether the board has a session with the host; nil when
	// not reported.
	InSession *bool `json:"in_session"`
	// Stats are the board's counters; nil when not reported.
	Stats *Stats `json:"stats"`
}

// Output is one output as read back: its value in the actuator's unit, and
// whether it is detached (inert, de-energised).
type Output struct {
	Value    float64 `json:"value"`
	Detached bool    `json:"detached"`
}

// Stats are the board counters the scenarios use.
type Stats struct {
	Sets          uint64 `json:"Sets"`
	Halts         uint64 `json:"Halts"`
	Sessions      uint64 `json:"Sessions"`
	WatchdogTrips uint64 `json:"WatchdogTrips"`
}

// HasFault reports whether the fault flag name is raised.
func (s State) HasFault(name string) bool {
	for _, f := range strings.Split(s.Faults, "|") {
		if f == name {
			return true
		}
	}
	return false
}

// DecodeState decodes and checks a /state document: one JSON object with
// an outputs array of at most MaxOutputs finite values. Unknown keys are
// allowed (a rig may report more), garbage is an error with CodeState.
func DecodeState(b []byte) (State, error) {
	var s State
	if len(b) > MaxStateBytes {
		return s, errorf(CodeState, nil, "state: %d bytes, over %d", len(b), MaxStateBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&s); err != nil {
		return State{}, errorf(CodeState, err, "state")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return State{}, errorf(CodeState, nil, "state: data after the JSON object")
	}
	switch {
	case s.Outputs == nil:
		return State{}, errorf(CodeState, nil, "state: no outputs array")
	case len(s.Outputs) > MaxOutputs:
		return State{}, errorf(CodeState, nil, "state: %d outputs, over %d", len(s.Outputs), MaxOutputs)
	}
	for i, o := range s.Outputs {
		if math.IsNaN(o.Value) || math.IsInf(o.Value, 0) {
			return State{}, errorf(CodeState, nil, "state: output %d is not finite", i)
		}
	}
	return s, nil
}

// ReadBack is a client of a rig's read-back and control endpoints.
type ReadBack struct {
	StateURL   string // base URL of GET /state
	ControlURL string // base URL of the injections
	Client     *http.Client
}

// NewReadBack returns a client for the rig file's endpoints.
func NewReadBack(r *RigFile) *ReadBack {
	return &ReadBack{StateURL: r.ReadBack.URL, ControlURL: r.Control.URL, Client: &http.Client{Timeout: 5 * time.Second}}
}

// State fetches and decodes the outputs.
func (rb *ReadBack) State(ctx context.Context) (State, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(rb.StateURL, "/")+"/state", nil)
	if err != nil {
		return State{}, errorf(CodeReadBack, err, "read-back")
	}
	resp, err := rb.Client.Do(req)
	if err != nil {
		return State{}, errorf(CodeReadBack, err, "read-back")
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxStateBytes+1))
	if err != nil {
		return State{}, errorf(CodeReadBack, err, "read-back %s", req.URL)
	}
	if resp.StatusCode != http.StatusOK {
		return State{}, errorf(CodeReadBack, nil, "read-back %s: %s: %s", req.URL, resp.Status, bytes.TrimSpace(b))
	}
	return DecodeState(b)
}

// Nak makes the board refuse every SET to output ch with NAK code (0
// clears it).
func (rb *ReadBack) Nak(ctx context.Context, ch, code int) error {
	return rb.post(ctx, "/nak", url.Values{"channel": {strconv.Itoa(ch)}, "code": {strconv.Itoa(code)}})
}

// Volts sets what the board reports for supply i.
func (rb *ReadBack) Volts(ctx context.Context, i int, volts float64) error {
	return rb.post(ctx, "/volts", url.Values{"supply": {strconv.Itoa(i)}, "v": {strconv.FormatFloat(volts, 'f', -1, 64)}})
}

// EStop presses (on) or releases the board's e-stop.
func (rb *ReadBack) EStop(ctx context.Context, on bool) error {
	return rb.post(ctx, "/fault", url.Values{"flag": {"estop"}, "on": {strconv.FormatBool(on)}})
}

// Unplug pulls the serial cable; Replug puts it back.
func (rb *ReadBack) Unplug(ctx context.Context) error { return rb.post(ctx, "/unplug", nil) }

// Replug puts the serial cable back.
func (rb *ReadBack) Replug(ctx context.Context) error { return rb.post(ctx, "/replug", nil) }

func (rb *ReadBack) post(ctx context.Context, path string, q url.Values) error {
	u := strings.TrimSuffix(rb.ControlURL, "/") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return errorf(CodeReadBack, err, "control")
	}
	resp, err := rb.Client.Do(req)
	if err != nil {
		return errorf(CodeReadBack, err, "control")
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return errorf(CodeReadBack, nil, "control POST %s: %s: %s", u, resp.Status, bytes.TrimSpace(b))
	}
	return nil
}

// String describes the outputs for failure messages.
func (s State) String() string {
	var b strings.Builder
	for i, o := range s.Outputs {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%d=%g", i, o.Value)
		if o.Detached {
			b.WriteString("(detached)")
		}
	}
	fmt.Fprintf(&b, " faults=%s", s.Faults)
	if s.InSession != nil {
		fmt.Fprintf(&b, " in_session=%v", *s.InSession)
	}
	return b.String()
}
