package api

import (
	"github.com/saga-supervisor/saga-supervisor/approval"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/rollback"
)

// Codes decided by this package and by the supervisor around it. They are
// untyped so they compare with rollback.Code and limits.Code values as they
// are; the same string means the same thing in every package.
const (
	CodeBadRequest      = "BAD_REQUEST"       // the request cannot be understood; the message names the field
	CodePayloadTooLarge = "PAYLOAD_TOO_LARGE" // the payload is over the size bound; it was not read
	CodeNotFinite       = "NOT_FINITE"        // value beyond float64 (the gate gives the same code)
	CodeNotReady        = "NOT_READY"         // the supervisor is starting, recovering or a supply is unknown
	CodeUnauthorized    = "UNAUTHORIZED"      // reset with a wrong token
	CodeInternal        = "INTERNAL"          // a bug: an error without a code
	CodeRateLimited     = "RATE_LIMITED"      // the agent is over its request rate
	CodeBusy            = "BUSY"              // the agent's queue of waiting requests is full
	CodeTooManyAgents   = "TOO_MANY_AGENTS"   // the supervisor serves as many agents as it allows
	CodeForbidden       = "FORBIDDEN"         // the agent may not do this (agents.allow, or reset off)
	CodeTooManyAttempts = "TOO_MANY_ATTEMPTS" // too many failed HTTP resets: every reset refused for a while
	CodeNoOperatorToken = "NO_OPERATOR_TOKEN" // reset with no operator token configured: nobody can reset
)

// Codes of the HTTP listener's guard (supervisor.GuardHTTP): requests a web
// page on another site could have made a browser send.
const (
	CodeHostNotAllowed   = "HOST_NOT_ALLOWED"   // HTTP: the Host header names none of the supervisor's own addresses
	CodeOriginNotAllowed = "ORIGIN_NOT_ALLOWED" // HTTP: a state-changing request from a page of another origin
	CodeLoginRequired    = "LOGIN_REQUIRED"     // HTTP: a listener with a login, and no session or token
)

// CodeInfo documents one wire code for the agents that receive it.
type CodeInfo struct {
	Code    string
	Meaning string // what happened
	Retry   string // what the agent should do
}

// Codes is every code a reply or event can carry, each once. docs/API.md
// holds the same table and a test keeps the two equal; ErrorReply turns a
// code missing here into INTERNAL. Never rename a code: only add.
var Codes = []CodeInfo{
	// The request itself.
	{CodeBadRequest, "The request is not a valid v1 request: not one JSON object, an unknown, duplicate, missing or mistyped field, a bad name, an unknown op. The message names the field.", "Do not resend it: fix the request. Nothing moved."},
	{CodePayloadTooLarge, "The payload is over the size limit (8192 bytes). It was not read, so the reply has no id: it goes to the agent of the topic it came on (cmd/<agent>), or else to the events topic.", "Do not resend it: shorten the request. Nothing moved."},
	{CodeNotFinite, "The value is NaN or infinite, or a number too large for a 64-bit float (1e400).", "Do not resend it: send a finite value. Nothing moved."},

	// The agent's lane (each agent has its own queue and rate limit).
	{CodeRateLimited, "The agent sent requests faster than its rate limit (1000/s, bursts of 200 by default). This request was not served; nothing moved.", "Slow down; resend with a new id after a pause. Other agents are not affected."},
	{CodeBusy, "The agent has as many requests waiting as its queue holds (32 by default). This request was not served; nothing moved.", "Wait for replies to the requests already sent, then resend with a new id."},
	{CodeTooManyAgents, "The supervisor serves as many agents at once as it allows (16 by default), and none has been idle long enough to give way.", "Retry later, backing off."},

	// The supervisor's state.
	{CodeNotReady, "The supervisor is not ready: starting, recovering the journal, or a supply or actuator failed its check.", "Wait until the status topic says ready, then send a new request."},
	{string(rollback.CodeHalted), "The supervisor is halted (e-stop latched). Every command is refused.", "Stop. An operator must reset; then hello again and begin a new saga."},
	{string(rollback.CodeJournalFailed), "The journal failed. Nothing may move until the supervisor is restarted on a working journal. A step or commit whose own record failed to sync is answered so with the report of its saga, which the failure's halt ended (nothing moved: its unsettled steps are unresolved); the report is published as well.", "Stop and alert an operator. Resetting does not help."},
	{CodeUnauthorized, "Reset was refused: the token is wrong. Over HTTP with a login (http.login), also a login, or any request, whose bearer token is neither the operator's nor the viewer's; such failures count against the limit of TOO_MANY_ATTEMPTS.", "Do not retry: only an operator with the token may reset."},
	{CodeForbidden, "The agent may not do this: the configuration (agents.allow) does not give it this op or this actuator, or it names no such agent; or a reset over MQTT, which is off (mqtt.allow_reset), or over plain HTTP on an address other machines reach, or by the viewer role of the HTTP login (http.viewer_token_file: it may read and halt, never reset). Refusals are journaled. Nothing moved.", "Do not retry: ask the robot's operator for the permission."},
	{CodeNoOperatorToken, "Reset was refused: the supervisor has no operator token configured (http.reset_token_file), so no token can clear a halt. Not counted as a failed attempt: there is nothing to guess.", "Do not retry: the robot's operator must set http.reset_token_file (a file holding only the token, at least 32 bytes, mode 0600; with http.generate_reset_token: true the supervisor creates it) and restart the supervisor."},
	{CodeTooManyAttempts, "HTTP only: too many resets failed for their token in the last minute (5 from this host or 30 from all) — with a login (http.login), logins and bearer tokens on any request count too. Every reset (and, with a login, every login and bearer token) is refused, the right token included, until the Retry-After header's seconds pass. Halt is never limited.", "Wait Retry-After seconds, then reset (or log in) once with the right token."},

	// The HTTP listener's guard: what a web page on another site could make
	// an operator's browser send.
	{CodeHostNotAllowed, "HTTP only (421): the request's Host header names none of the supervisor's own addresses (http.listen, localhost, 127.0.0.1 and [::1] on its port, http.allowed_hosts), or there is none: a web page that pointed its own DNS name at this address would send it. Nothing was done: the status is not sent, a halt or reset is refused (and journaled).", "Do not retry: connect by an address the supervisor answers to, or have the robot's operator add the name to http.allowed_hosts."},
	{CodeOriginNotAllowed, "HTTP only (403): a halt, reset or other request that changes state came with an Origin header that is not one of the supervisor's own (the same names as for Host): a page from another site, or null. Programs send no Origin. Nothing was done; a refused halt or reset is journaled with its source.", "Do not retry from that page: use the dashboard on the supervisor's own address, saga-supervisor ctl, or the e-stop."},
	{CodeLoginRequired, "HTTP only (401): the listener needs a login (http.login: on by default beyond loopback) and the request carries neither a live session cookie (none, or one logged out, expired, or from before a restart) nor an Authorization: Bearer token. A token in the URL is never read. Nothing was done; a refused halt or reset is journaled with its source.", "Log in at /login with the operator or the viewer token, or send one as Authorization: Bearer <token>; to stop the robot without a login, use the e-stop or saga-supervisor ctl halt on the robot."},

	// Leases (supervisor/lease).
	{"LEASE_UNKNOWN", "No lease with that id was granted, or it ended too long ago to be recognised.", "Send hello for a new lease, then begin a new saga."},
	{"LEASE_EXPIRED", "The lease ended (TTL passed without heartbeat, bye, will, a newer hello) or the epoch is stale. Its open sagas were unwound.", "Send hello for a new lease and begin a new saga. Never resend commands of the old lease."},
	{"LEASE_NOT_HOLDER", "The lease is live but held by another agent.", "Use your own lease: send hello."},
	{"TOO_MANY_LEASES", "The supervisor holds as many live leases as it allows.", "Retry hello later, backing off."},
	{"SHUTTING_DOWN", "The supervisor is shutting down and grants nothing.", "Wait for the status topic to say online, then hello again."},

	// Sagas.
	{string(rollback.CodeSagaUnknown), "No open saga with that id: it was committed, unwound, or never begun.", "Begin a new saga."},
	{string(rollback.CodeSagaNotOwner), "The saga belongs to another agent, lease or epoch.", "Use a saga begun under your current lease."},
	{string(rollback.CodeSagaBusy), "A step of this saga is still in flight.", "Wait for its reply, then send the next step. Send steps one at a time."},
	{string(rollback.CodeSagaFull), "The saga has carried the maximum number of commands (10000 by default).", "Commit or abort it and begin another."},
	{string(rollback.CodeTooManySagas), "The lease holds as many open sagas as it may (8 by default).", "Commit or abort an open saga, then begin again."},
	{string(rollback.CodeDuplicateID), "This id was already used under this lease for another request, or by a step whose first reply is no longer remembered (the same request sent again while its reply is remembered gets that reply). This message moved nothing.", "Use a new id for every command, even after a refusal."},

	// The step's gate.
	{string(rollback.CodeDeadlinePassed), "The step was not admitted within its deadline_ms of arriving. Nothing moved.", "If the motion is still wanted, send it again with a new id."},
	{string(rollback.CodeActuatorUnknown), "No actuator by that name.", "Do not retry: check the name against the configuration."},
	{string(rollback.CodeActuatorBusy), "Another open saga holds the actuator.", "Retry after that saga ends, backing off, with a new id."},
	{string(limits.LimitMin), "The value is below the actuator's minimum.", "Send a value inside the limits."},
	{string(limits.LimitMax), "The value is above the actuator's maximum.", "Send a value inside the limits."},
	{string(limits.LimitStep), "The change from the previous command is larger than max_step.", "Move in smaller steps."},
	{string(limits.LimitSlew), "The change is faster than max_rate allows since the previous command.", "Wait, or move in smaller steps."},
	{string(limits.SupplyLow), "The actuator's supply is below its minimum voltage.", "Wait for the supply to recover; retry with a new id."},
	{string(limits.SupplyHigh), "The actuator's supply is above its maximum voltage.", "Wait for the supply to recover; retry with a new id."},
	{string(limits.SupplyUnknown), "The actuator's supply has never given a valid reading.", "Wait for the supply to report; retry with a new id."},
	{string(limits.SupplyStale), "The actuator's supply has not reported recently enough.", "Wait for fresh readings; retry with a new id."},
	{string(limits.SupplyTripped), "The supply tripped and stays latched until it is good for its debounce time.", "Wait for the trip to clear; retry with a new id."},

	// Approvals (package approval): actuators marked requires_approval.
	{string(approval.CodeRequired), "The actuator requires an operator's signed approval and the step carries none. Nothing moved.", "Ask an operator for an approval of this exact step (saga, actuator, value) and send it in the approval field, with a new id."},
	{string(approval.CodeInvalid), "The approval cannot be used: malformed, signed by a key the supervisor does not trust, a bad signature, or valid for longer than approvals.max_ttl. Nothing moved.", "Do not resend it: get a new approval from an operator."},
	{string(approval.CodeMismatch), "The approval is valid but names another device, actuator, value or saga than the step. Nothing moved.", "Send the step the approval names, or get an approval for this one."},
	{string(approval.CodeExpired), "The approval is outside its validity window (not_before..not_after, 2 s of clock skew allowed): expired, or not valid yet. Nothing moved.", "Get a new approval; check the clocks of the operator's machine and the supervisor if this recurs."},
	{string(approval.CodeReplayed), "The approval was already used: each one admits one step, once. Nothing moved.", "Get a new approval for the step."},
	{string(approval.CodeFull), "The supervisor remembers as many unexpired used approvals as it can hold (65536), so it cannot take a new one. Nothing moved.", "Retry after a while (used approvals are forgotten when they expire), with a new id."},

	// The step's effect.
	{string(rollback.CodeStepFailed), "The actuator's driver refused the step and promised the output did not move (a device's refusal, a value its driver rejects before sending). The saga was unwound; the report says how cleanly.", "Read the report. Begin a new saga if you go on."},
	{string(rollback.CodeStepInDoubt), "The driver failed without that promise — a timeout, a lost link, any other error — so the step may have happened. It was treated as applied and the saga unwound, driving it back too; the report says how cleanly.", "Read the report. Begin a new saga if you go on."},

	// Zones (issue 27): scoped halts.
	{string(rollback.CodeUnknownZone), "The halt or reset names a zone the configuration does not have (zones). A halt naming one halts everything instead — a mistyped zone in an emergency must still stop the robot — and is answered with this code; a reset naming one does nothing.", "Do not retry: check the zone's name against the configuration (the status lists the zones). After a halt, an operator resets the full halt."},
	{string(rollback.CodeZoneHalted), "The actuator's zone is halted (a zone halt: its e-stop, a supply bound to it, or a halt naming it). Steps on its actuators are refused until an operator resets the zone; the other zones keep serving. A saga that touched the zone was unwound whole: its steps in the zone unresolved, the others put back. Nothing moved.", "Do not retry on that zone: an operator must reset it (reset with zone). Steps on the other zones' actuators go on; begin a new saga for them if yours was unwound."},

	{CodeInternal, "A supervisor bug: an error without a code. Whether the command took effect is unknown.", "Abort the saga, which puts back whatever moved, and report the message."},

	// M-of-N approvals: actuators marked requires_approval: M, M > 1.
	{string(approval.CodeTooFew), "The actuator requires approvals from more operators (distinct keys) than the step carries. Nothing moved, and none of the approvals sent was used.", "Collect the approvals the message asks for, from distinct operators' keys, and send them all in approvals, with a new id."},
	{string(approval.CodeDuplicateKey), "Two of the step's approvals are signed by one key: each must come from a different operator. Nothing moved, and none of the approvals sent was used.", "Replace one of them with an approval signed by another operator's key; send with a new id."},
	{string(approval.CodeDuplicate), "The step carries one approval twice (the same nonce): an approval counts once. Nothing moved, and none of the approvals sent was used.", "Send each approval once, adding one from another operator if more are required; use a new id."},
	// Drain and quarantine: operator controls (issue 27).
	{string(rollback.CodeDraining), "An operator is draining the supervisor for maintenance: no new saga is begun. Sagas already open may step and commit until the drain's deadline, when any still open are unwound. Halt still works. Nothing moved.", "Do not begin again until the status no longer shows the drain (ready, no drain field); finish or abort open sagas before the deadline."},
	{string(rollback.CodeNotDraining), "An operator asked to end a drain, but none is in force. Nothing changed.", "Nothing to do: check the status."},
	{string(rollback.CodeQuarantined), "An operator quarantined this agent: its lease ended, its open sagas were unwound, and every request of it but halt is refused until an operator releases it. Such refusals are journaled in aggregate, not one record each. Nothing moved.", "Stop sending. Ask the robot's operator why, and to release the agent; a halt is still taken."},
	{string(rollback.CodeNotQuarantined), "An operator asked to release an agent that is not quarantined. Nothing changed.", "Nothing to do: check the status's quarantined list and the agent's name."},
	{string(rollback.CodeQuarantineFull), "As many agents are quarantined as the supervisor holds (1024): no more can be. Nothing changed.", "Release an agent that no longer needs the bar, then quarantine again."},
}

// Lookup returns the table entry of a code.
func Lookup(code string) (CodeInfo, bool) {
	for _, c := range Codes {
		if c.Code == code {
			return c, true
		}
	}
	return CodeInfo{}, false
}
