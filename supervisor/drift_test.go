package supervisor

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// drifting is a driver whose device moved the output to at (armed), as a
// board's restart or watchdog does.
type drifting struct {
	actuators.Driver
	armed atomic.Bool
	at    float64
}

func (d *drifting) Drifted(commanded float64) (float64, bool) {
	if !d.armed.Load() || commanded == d.at {
		return 0, false
	}
	return d.at, true
}

// A supervisor whose device moved an output is not ready until it has
// adopted the device's value: a board's report can arrive between the
// poller's adoption and its readiness check, and until the next round the
// supervisor said ready while it believed the output elsewhere (the AVR
// rig's TestAVRResetMidSaga saw it after an MCU reset).
func TestNotReadyWhileADriftIsNotAdopted(t *testing.T) {
	d := &drifting{at: 42}
	s, _ := newTestSupervisorWith(t, func(c *config.Config) { c.Agents.Allow = nil }, func(o *Options) {
		o.PollEvery = time.Hour // the test runs the rounds
		a := o.Actuators.Get("gripper")
		d.Driver = a.Driver
		a.Driver = d
	})
	if st := s.Status(); !st.Ready {
		t.Fatalf("before the drift: not ready: %v", st.Reasons)
	}
	d.armed.Store(true)
	st := s.Status()
	if st.Ready || !strings.Contains(strings.Join(st.Reasons, "; "), "actuator gripper: its device reports 42") {
		t.Fatalf("the device moved the gripper, not yet adopted: ready %v, reasons %q", st.Ready, st.Reasons)
	}
	s.adoptDrift()
	if c, _ := s.engine.Commanded("gripper"); c != 42 {
		t.Fatalf("after adopting: commanded %g, want 42", c)
	}
	if st := s.Status(); !st.Ready {
		t.Fatalf("after adopting the device's value: not ready: %v", st.Reasons)
	}
}
