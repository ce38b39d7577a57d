package supervisor

import (
	"fmt"
	"slices"

	"github.com/saga-supervisor/saga-supervisor/api"
)

// Permission is what one agent may ask of the supervisor. The agent is
// the identity its transport authenticated (MQTT: the username that alone
// may write cmd/<agent>), so a permission follows the credentials, not a
// name an agent claims.
type Permission struct {
	// Actuators the agent may step. nil: every actuator; empty: none.
	Actuators []string
	// Ops the agent may send. nil: every op but reset; empty: none but
	// halt. Halt is never forbidden: stopping the robot is always allowed
	// to anyone the transport lets speak.
	Ops []api.Op
}

// DefaultOps are the ops an agent may send when its Permission names none:
// everything but reset, which is an operator's, not a controller's.
var DefaultOps = []api.Op{api.OpHello, api.OpHeartbeat, api.OpBye, api.OpBegin, api.OpStep, api.OpCommit,
	api.OpAbort, api.OpStatus}

// permits checks req against the agents' permissions. An empty table lets
// every agent do everything (a broker that authorises on its own, or a
// bench); otherwise an agent not in it may only halt.
func permits(perms map[string]Permission, req api.Request) *api.Error {
	if len(perms) == 0 || req.Op == api.OpHalt {
		return nil
	}
	p, ok := perms[req.Agent]
	if !ok {
		return &api.Error{Code: api.CodeForbidden, Field: "agent",
			Message: fmt.Sprintf("agent %q has no permissions here (agents.allow)", req.Agent)}
	}
	ops := p.Ops
	if ops == nil {
		ops = DefaultOps
	}
	if !slices.Contains(ops, req.Op) {
		return &api.Error{Code: api.CodeForbidden, Field: "op",
			Message: fmt.Sprintf("agent %q may not send %s (agents.allow.%s.ops)", req.Agent, req.Op, req.Agent)}
	}
	if req.Op == api.OpStep && p.Actuators != nil && !slices.Contains(p.Actuators, req.Actuator) {
		return &api.Error{Code: api.CodeForbidden, Field: "actuator",
			Message: fmt.Sprintf("agent %q may not move %s (agents.allow.%s.actuators)", req.Agent, req.Actuator, req.Agent)}
	}
	return nil
}
