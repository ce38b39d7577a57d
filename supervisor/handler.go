package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/ingress"
	"github.com/saga-supervisor/saga-supervisor/supervisor/lease"
)

// Submit takes one request from a transport (transport/mqtt's Handler):
// it goes to the agent's lane (package ingress), which serves it in order
// behind the agent's earlier requests, refuses it when the agent is over
// its rate or queue, or — a halt — latches the halt at once. It never
// blocks.
func (s *Supervisor) Submit(agent string, req api.Request, derr *api.Error, received time.Time, reply func(api.Reply)) {
	s.lanes.Submit(agent, req, derr, received, reply)
}

// Shed refuses, unread, a request from an agent over its rate
// (transport/mqtt's Shedder).
func (s *Supervisor) Shed(agent string) bool { return s.lanes.Shed(agent) }

// Enter is the embedded broker's door in front of agent's lane
// (ingress.Lanes.Enter): nil lets agent's next request through, a channel
// holds it at the broker until the lane may have room. An agent in the
// second half of its lease is never held, only counted: its packets are
// read in order, so a heartbeat it sent behind its own backlog must reach
// the lease before the lease ends. Halts are never asked about.
func (s *Supervisor) Enter(agent string) <-chan struct{} {
	return s.lanes.Enter(agent, !s.leases.Ending(agent))
}

// laneHandler is what the lanes call.
type laneHandler struct{ s *Supervisor }

func (h laneHandler) Handle(req api.Request, received time.Time) api.Reply {
	return h.s.Handle(req, received)
}

func (h laneHandler) Halt(req api.Request) *api.Error {
	src := "agent " + req.Agent
	if req.Agent == "" {
		src = "mqtt e-stop topic" // the shared e-stop topic, any payload
	}
	if req.Zone != "" {
		err := h.s.HaltZone(req.Zone, src, req.Reason)
		h.s.metrics.command(string(api.OpHalt), err == nil, apiCode(err))
		return err
	}
	h.s.Halt(src, req.Reason)
	h.s.metrics.command(string(api.OpHalt), true, "")
	return nil
}

func apiCode(err *api.Error) string {
	if err == nil {
		return ""
	}
	return err.Code
}

// Refusals journals the refusals the lanes decided, and the requests the
// transport could not decode, in aggregate: one REFUSED record per agent
// and code per interval, its message giving the count.
func (h laneHandler) Refusals(ts []ingress.Tally) {
	h.s.countTallies(ts)
	for _, t := range ts {
		what := "requests"
		if t.Op != "" {
			what = string(t.Op) + " requests"
		}
		msg := fmt.Sprintf("%d %s refused with %s since the last count", t.Count, what, t.Code)
		if t.JournalOnly {
			// Answered and counted one by one; only their records are
			// aggregated (the agent is refused too often).
			msg += " (beyond the refusals journaled one by one)"
		} else {
			h.s.metrics.commandN(opOf(t), false, t.Code, float64(t.Count))
		}
		h.s.engine.RecordRefusal(0, rollback.Owner{Agent: t.Agent}, rollback.Command{}, rollback.Code(t.Code), msg)
	}
}

// opOf labels the metric of refusals counted in aggregate: their op, or —
// for requests refused before they were decoded — "lane" (shed by the
// lanes) or "invalid" (refused by the decoder).
func opOf(t ingress.Tally) string {
	switch {
	case t.Op != "":
		return string(t.Op)
	case t.Code == api.CodeRateLimited || t.Code == api.CodeBusy || t.Code == api.CodeTooManyAgents:
		return opLane
	}
	return opInvalid
}

// publishErrReport publishes the report an engine's error carries: the
// saga it ended (a step that failed and was unwound; a begin, step or
// commit whose saga a halt ended while it was busy).
func (s *Supervisor) publishErrReport(err error) {
	var ee *rollback.Error
	if errors.As(err, &ee) && ee.Report != nil {
		s.publishReport(ee.Report)
	}
}

// Handle answers one request of API v1, on the agent's lane (or at once,
// for a heartbeat). Every refusal carries a stable code, is journaled, and
// moves nothing.
func (s *Supervisor) Handle(req api.Request, received time.Time) api.Reply {
	if err := permits(s.opt.Permissions, req); err != nil {
		// Journaled and counted in aggregate: an agent probing what it may
		// not do must not fill the journal one record per try.
		s.lanes.Count(req.Agent, req.Op, err.Code)
		s.countRefusal(req.Agent, err.Code, 1)
		return api.ErrorReply(req.ID, err)
	}
	if req.Op != api.OpHalt && s.quarantined(req.Agent) {
		// Counted and journaled in aggregate, like the lanes' refusals: a
		// quarantined agent retrying must not fill the journal.
		s.lanes.Count(req.Agent, req.Op, string(rollback.CodeQuarantined))
		return api.ErrorReply(req.ID, &rollback.Error{Code: rollback.CodeQuarantined,
			Message: "agent " + req.Agent + " is quarantined: an operator must release it"})
	}
	rep, journaled := s.handle(req, received)
	if !rep.OK {
		s.countRefusal(req.Agent, rep.Code, 1)
	}
	if !rep.OK && !journaled {
		if req.Op == api.OpHeartbeat {
			// Journaled and counted in aggregate, like the lanes' own
			// refusals: a heartbeat is served on the transport's
			// goroutine, which must not wait on the engine.
			s.lanes.Count(req.Agent, req.Op, rep.Code)
			return rep
		}
		s.RecordRefusal(req, rep.Code, rep.Message)
	}
	s.metrics.command(string(req.Op), rep.OK, rep.Code)
	// The retained state goes out after the reply, from the poll
	// goroutine: published here it would queue ahead of the reply on the
	// same connection and add a broker round to every command's latency.
	select {
	case s.statesDue <- struct{}{}:
	default: // already due
	}
	return rep
}

// RecordRefusal journals a refusal decided outside the engine's step gate
// (the engine journals its own, and a failed step's story is its INTENT and
// FAILED records).
// An agent refused too often has the rest journaled in aggregate (see
// refusalBudget).
func (s *Supervisor) RecordRefusal(req api.Request, code, msg string) {
	if !s.refusals.allow(req.Agent) {
		s.lanes.CountJournalOnly(req.Agent, req.Op, code)
		return
	}
	s.engine.RecordRefusal(req.Saga, req.Owner(), rollback.Command{ID: req.ID, Actuator: req.Actuator, Value: req.Value},
		rollback.Code(code), string(req.Op)+": "+msg)
}

// AgentGone ends the lease of an agent whose MQTT will arrived
// (transport/mqtt's Handler): its sagas are unwound at once, not at lease
// expiry — on a goroutine of its own, never on the transport's.
//
// will is the will's payload: it ends the lease only if the agent's hello
// named the same (or named none), so a late will of an earlier connection
// leaves a newer lease alone.
func (s *Supervisor) AgentGone(agent, will string) {
	s.bgMu.Lock()
	if s.bgClosed {
		s.bgMu.Unlock()
		return // stopping: Close ends every lease itself
	}
	s.bg.Add(1)
	s.bgMu.Unlock()
	go func() {
		defer s.bg.Done()
		if _, ok := s.leases.EndAgentWill(agent, will); !ok {
			s.log.Info("an MQTT will ended no lease (none, or a stale will of an earlier connection)", "agent", agent)
		}
	}()
}

func leaseReply(id string, err error) api.Reply {
	return api.ErrorReply(id, &api.Error{Code: string(lease.CodeOf(err)), Message: err.Error()})
}

// handle answers a request; journaled is true when the engine's step gate
// already journaled the refusal (or the step's failure).
func (s *Supervisor) handle(req api.Request, received time.Time) (rep api.Reply, journaled bool) {
	ok := api.Reply{ID: req.ID, OK: true}
	switch req.Op {
	case api.OpHello:
		if h, why := s.engine.Halted(); h {
			// Nothing may begin while halted, not even a lease.
			return api.ErrorReply(req.ID, &rollback.Error{Code: rollback.CodeHalted, Message: "halted: " + why}), false
		}
		l, err := s.leases.HelloWill(req.Agent, time.Duration(req.TTLMS)*time.Millisecond, req.Will)
		if err != nil {
			return leaseReply(req.ID, err), false
		}
		// The grant is durable before the agent hears of it: its epoch is
		// spent even if the supervisor crashes now.
		if err := s.engine.RecordLease(l.Agent, l.ID, l.Epoch); err != nil {
			s.leases.End(l.Agent, l.ID, "journal failed")
			return api.ErrorReply(req.ID, err), false
		}
		ok.Lease, ok.Epoch, ok.TTLMS, ok.HeartbeatMS = l.ID, l.Epoch, l.TTL.Milliseconds(), (l.TTL / 4).Milliseconds()
		return ok, false
	case api.OpHeartbeat:
		l, err := s.leases.HeartbeatAt(req.Agent, req.Lease, req.Epoch, received)
		if err != nil {
			return leaseReply(req.ID, err), false
		}
		ok.TTLMS, ok.HeartbeatMS = l.TTL.Milliseconds(), (l.TTL / 4).Milliseconds()
		return ok, false
	case api.OpBye:
		if err := s.leases.End(req.Agent, req.Lease, lease.ReasonBye); err != nil {
			return leaseReply(req.ID, err), false
		}
		return ok, false
	case api.OpHalt:
		if req.Zone != "" {
			if err := s.HaltZone(req.Zone, "mqtt agent "+req.Agent, req.Reason); err != nil {
				return api.ErrorReply(req.ID, err), false
			}
			return ok, false
		}
		s.Halt("mqtt agent "+req.Agent, req.Reason)
		return ok, false
	case api.OpReset:
		if !s.opt.RemoteReset {
			return api.ErrorReply(req.ID, &api.Error{Code: api.CodeForbidden, Field: "op",
				Message: "reset through the controller API is off (mqtt.allow_reset): an operator resets over HTTP"}), false
		}
		reset := func() error { return s.Reset(req.Token, "mqtt agent "+req.Agent) }
		if req.Zone != "" {
			reset = func() error { return s.ResetZone(req.Token, "mqtt agent "+req.Agent, req.Zone) }
		}
		if err := reset(); err != nil {
			if errors.Is(err, ErrUnauthorized) {
				return api.ErrorReply(req.ID, &api.Error{Code: api.CodeUnauthorized, Message: err.Error()}), false
			}
			return api.ErrorReply(req.ID, err), false
		}
		return ok, false
	case api.OpStatus:
		b, err := json.Marshal(s.Status())
		if err != nil {
			return api.ErrorReply(req.ID, err), false
		}
		ok.Status = b
		return ok, false
	}

	// Everything else acts in a saga: the lease must be live.
	if err := s.leases.Check(req.Agent, req.Lease, req.Epoch); err != nil {
		return leaseReply(req.ID, err), false
	}
	owner := req.Owner()
	switch req.Op {
	case api.OpBegin:
		if r := s.notReady(req.ID); r != nil {
			return *r, false
		}
		saga, err := s.engine.Begin(owner)
		if err != nil {
			s.publishErrReport(err)
			return api.ErrorReply(req.ID, err), false
		}
		// The lease may have ended between the check and the begin, after
		// its unwind ran: do not leave a saga no lease will ever end.
		if err := s.leases.Check(req.Agent, req.Lease, req.Epoch); err != nil {
			s.engine.Abort(saga, owner, "lease ended while the saga began")
			return leaseReply(req.ID, err), false
		}
		ok.Saga = saga
		return ok, false
	case api.OpStep:
		if s.leases.Seen(req.Lease, req.ID) {
			return api.ErrorReply(req.ID, &rollback.Error{Code: rollback.CodeDuplicateID, Message: "command id " + req.ID + " was already received under this lease"}), false
		}
		if r := s.notReady(req.ID); r != nil {
			return *r, false
		}
		// Approvals are checked here, before the engine; the nonce is spent
		// by the engine's gate, last, once every other check has passed.
		admit, note, refused := s.approve.check(req)
		if refused != nil {
			return api.ErrorReply(req.ID, &api.Error{Code: refused.Code, Message: refused.Message}), false
		}
		cmd := req.Command(received)
		if admit != nil {
			cmd.Admit, cmd.Note = admit, note
		}
		res, err := s.engine.Step(req.Saga, owner, cmd)
		if err != nil {
			s.publishErrReport(err)
			return api.ErrorReply(req.ID, err), true
		}
		return api.StepReply(req.ID, req.Saga, res), false
	case api.OpCommit:
		if err := s.engine.Commit(req.Saga, owner); err != nil {
			s.publishErrReport(err)
			return api.ErrorReply(req.ID, err), false
		}
		ok.Saga = req.Saga
		return ok, false
	case api.OpAbort:
		rep, err := s.engine.Abort(req.Saga, owner, req.Reason)
		if err != nil {
			return api.ErrorReply(req.ID, err), false
		}
		s.publishReport(rep)
		ok.Saga, ok.Report = req.Saga, api.ReportFromRollback(rep)
		return ok, false
	}
	return api.ErrorReply(req.ID, &api.Error{Code: api.CodeBadRequest, Field: "op", Message: "unknown op " + string(req.Op)}), false
}

// notReady refuses motion while the supervisor is not ready (fail-closed).
// Halt and a failed journal have their own codes from the engine's gate.
func (s *Supervisor) notReady(id string) *api.Reply {
	ready, reasons := s.readiness()
	if ready {
		return nil
	}
	if h, _ := s.engine.Halted(); h || s.engine.Err() != nil {
		return nil // the engine refuses with HALTED / JOURNAL_FAILED
	}
	if onlyDrain(reasons) {
		return nil // open sagas may go on; Begin refuses DRAINING
	}
	r := api.ErrorReply(id, &api.Error{Code: api.CodeNotReady, Message: "not ready: " + joinReasons(reasons)})
	return &r
}

func joinReasons(rs []string) string {
	out := ""
	for i, r := range rs {
		if i > 0 {
			out += "; "
		}
		out += r
	}
	return out
}
