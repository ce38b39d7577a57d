//go:build !saga_lean

package hil

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/saga-supervisor/saga-supervisor/client"
)

// controllerEnv, when set in the environment, makes the test binary a
// controller process (runController) instead of running tests: a scenario
// starts one, lets it step, and kills it. Its spec (which may hold a broker
// password) comes on standard input.
const controllerEnv = "SAGA_HIL_CONTROLLER"

// controllerSpec is what a controller process does, passed as JSON on its
// standard input.
type controllerSpec struct {
	Broker   string           `json:"broker"`
	Prefix   string           `json:"prefix"`
	Device   string           `json:"device"`
	Agent    string           `json:"agent"`
	Username string           `json:"username"`
	Password string           `json:"password"`
	TTL      time.Duration    `json:"ttl"`
	Steps    []controllerStep `json:"steps"`
}

// controllerStep is one step of a controller process's saga.
type controllerStep struct {
	Actuator string        `json:"actuator"`
	Value    float64       `json:"value"`
	Pace     time.Duration `json:"pace"` // wait before the step (max_rate)
}

// controllerReady is the line a controller prints once its steps are
// applied; the saga id follows it.
const controllerReady = "HIL-CONTROLLER stepped saga="

// runController is a controller written with the project's Go client, as a
// user would write one: dial (will, lease, heartbeats), begin, step, then
// hold the saga open and keep heartbeating until it is killed.
func runController() int {
	var spec controllerSpec
	if err := json.NewDecoder(os.Stdin).Decode(&spec); err != nil {
		fmt.Fprintln(os.Stderr, "controller: bad spec:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{Broker: spec.Broker, Prefix: spec.Prefix, Device: spec.Device,
		Agent: spec.Agent, Username: spec.Username, Password: spec.Password, TTL: spec.TTL})
	if err != nil {
		fmt.Fprintln(os.Stderr, "controller: dial:", err)
		return 1
	}
	saga, err := c.Begin(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "controller: begin:", err)
		return 1
	}
	for _, s := range spec.Steps {
		time.Sleep(s.Pace)
		if _, err := saga.Step(ctx, s.Actuator, s.Value); err != nil {
			fmt.Fprintf(os.Stderr, "controller: step %s=%v: %v\n", s.Actuator, s.Value, err)
			return 1
		}
	}
	fmt.Printf("%s%d\n", controllerReady, saga.ID())
	<-c.Lost() // until killed; a lost lease ends it too
	fmt.Fprintln(os.Stderr, "controller: lease lost:", c.Err())
	return 3
}

// startController starts a controller process that moves every actuator
// under test to its move pose and holds the saga open. It returns the
// process and the saga id.
func (r *rig) startController(agent string, ttl time.Duration) (*proc, uint64) {
	r.t.Helper()
	var steps []controllerStep
	for _, a := range r.plan.Actuators {
		var pace time.Duration
		if a.MaxRate > 0 {
			pace = time.Duration(math.Abs(a.Move-a.Setup) / a.MaxRate * 1.2 * float64(time.Second))
		}
		steps = append(steps, controllerStep{a.Name, a.Move, pace})
	}
	return r.startControllerSteps(agent, ttl, steps)
}

// startControllerSteps starts a controller process that takes the given
// steps in one saga and holds it open. It returns the process and the saga
// id.
func (r *rig) startControllerSteps(agent string, ttl time.Duration, steps []controllerStep) (*proc, uint64) {
	r.t.Helper()
	spec := controllerSpec{Broker: r.plan.Broker, Prefix: r.plan.Topics.Prefix, Device: r.plan.Topics.Device, Agent: agent,
		Username: r.agentLogin(agent), Password: r.plan.AgentPassword, TTL: ttl, Steps: steps}
	b, err := json.Marshal(spec)
	if err != nil {
		r.t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		r.t.Fatal(err)
	}
	p := startProc(r.t, "controller "+agent, "", []string{controllerEnv + "=1"}, bytes.NewReader(b), self)
	var saga uint64
	if _, err := fmt.Sscan(p.waitOutput(controllerReady, 30*time.Second), &saga); err != nil {
		r.t.Fatalf("controller: saga id: %v", err)
	}
	return p, saga
}

// tryStartControllerSteps is startControllerSteps for a caller that
// handles a controller refused at its start (the supervisor halted by
// something else meanwhile): a controller that exits before its saga is
// stepped is an error, with its output, not a failed test.
func (r *rig) tryStartControllerSteps(agent string, ttl time.Duration, steps []controllerStep) (*proc, uint64, error) {
	r.t.Helper()
	spec := controllerSpec{Broker: r.plan.Broker, Prefix: r.plan.Topics.Prefix, Device: r.plan.Topics.Device, Agent: agent,
		Username: r.agentLogin(agent), Password: r.plan.AgentPassword, TTL: ttl, Steps: steps}
	b, err := json.Marshal(spec)
	if err != nil {
		r.t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		r.t.Fatal(err)
	}
	p := startProc(r.t, "controller "+agent, "", []string{controllerEnv + "=1"}, bytes.NewReader(b), self)
	var rest string
	found := waitUntil(30*time.Second, func() bool {
		for _, line := range strings.Split(p.out.String(), "\n") {
			if r, ok := strings.CutPrefix(line, controllerReady); ok {
				rest = r
				return true
			}
		}
		return p.exited()
	})
	if !found || rest == "" {
		p.kill(syscall.SIGKILL)
		return nil, 0, fmt.Errorf("controller %s did not step its saga (exited %v): %s", agent, p.exited(), strings.TrimSpace(p.out.String()))
	}
	var saga uint64
	if _, err := fmt.Sscan(strings.TrimSpace(rest), &saga); err != nil {
		r.t.Fatalf("controller: saga id: %v", err)
	}
	return p, saga, nil
}
