// Package lease grants, renews, checks and ends agents' leases: the
// permission an agent (a controller) needs to act on actuators.
//
// A lease has an id, the agent that holds it, an epoch, a TTL and an expiry
// on the supervisor's monotonic clock. Epochs are a fencing token: strictly
// increasing across every lease a Manager grants, starting above
// Options.FirstEpoch, which the supervisor sets to the highest epoch in its
// journal so that epochs keep increasing across restarts. An agent holds at
// most one lease; a second Hello ends the first ("superseded"), so a
// reconnecting agent always starts over with a new lease and new sagas.
//
// # Ending
//
// A lease ends when its TTL passes without a Heartbeat ("expired"), on End
// (a clean bye) or EndAgent (an MQTT last will, a lost serial link), when a
// new Hello of the same agent supersedes it, and on Close ("shutdown"). It
// ends exactly once, and Options.OnEnd is called exactly once for it, without
// the manager's lock held, so OnEnd may call back into the manager (except
// Close, and Hello for the same agent, which would wait for OnEnd itself).
//
// OnEnd runs on the timer's goroutine for an expiry and on the caller's
// goroutine for End, EndAgent, Hello (superseding) and Close, before that
// call returns. A new lease for an agent is not granted until OnEnd for the
// agent's previous lease has returned: when the supervisor unwinds "every
// open saga of the agent" in OnEnd, those are the old lease's sagas, never
// sagas begun under the new one.
//
// Check is a point-in-time answer: a lease can end right after it. A caller
// that creates state for a lease after Check (a saga) must Check again after
// creating it and undo that state if the lease has ended meanwhile, because
// OnEnd may already have run without seeing it.
//
// # Refusals
//
// Refusals are *Error values with a stable Code (the wire codes of the MQTT
// API). An ended lease stays refused as LEASE_EXPIRED, never replayed:
// the ids of the last RememberEnded ended leases are kept, and beyond that
// the epoch answers, because epochs only increase — an epoch no higher than
// the highest ever granted that is not live has ended. Memory for ended
// leases stays bounded however many leases come and go.
//
// # Command ids
//
// Seen de-duplicates command ids within a lease (an MQTT QoS 1 redelivery),
// remembering the last SeenPerLease ids of each lease. A redelivery across a
// reconnect carries the old lease, so Check — asked before Seen — refuses
// it as LEASE_EXPIRED: the bound only matters within one live lease.
package lease
