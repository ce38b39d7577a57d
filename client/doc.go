// Package client is a Go client of the supervisor's MQTT API v1 for robot
// controllers: planners, ROS bridges, agents, tools. docs/API.md is the wire
// protocol; this package speaks it so that a controller does not have to.
//
// Dial connects to the broker, points the connection's MQTT last will at
// the agent's will topic (so that a controller that dies without a clean
// disconnect loses its lease at once, not one TTL later), subscribes to the
// agent's reply topic, takes a lease with hello and keeps it alive in the
// background with a heartbeat every quarter of the granted TTL:
//
//	c, err := client.Dial(ctx, client.Options{Agent: "planner", Device: "arm1"})
//	if err != nil { ... }
//	defer c.Close(context.Background())
//	saga, err := c.Begin(ctx)
//	res, err := saga.Step(ctx, "elbow", 75.5, client.WithDeadline(200*time.Millisecond))
//	if client.IsRefusal(err) { ... nothing moved; the saga goes on ... }
//	err = saga.Commit(ctx) // or report, err := saga.Abort(ctx, "why")
//
// # The lease is never renewed behind your back
//
// A lease is the permission to act, and the sagas begun under it die with
// it. When the client learns that its lease has ended, or can no longer
// vouch for it, it marks itself lost, and from then on every call that
// needs the lease (Begin, Step, Commit, Abort) returns an error for which
// errors.Is(err, ErrLeaseLost) holds. It never sends a fresh hello on its
// own: the supervisor has already unwound the sagas of the old lease, and a
// controller that carried on stepping under a new one would be acting on a
// world it no longer knows. Dial a new Client instead. The client is lost when:
//
//   - a heartbeat is refused, or any reply says LEASE_EXPIRED, LEASE_UNKNOWN
//     or LEASE_NOT_HOLDER;
//   - no heartbeat has been acknowledged for a whole TTL (measured from when
//     the last acknowledged heartbeat was sent, so the supervisor may
//     already have expired the lease). The client then sends a bye, best
//     effort, so that the supervisor unwinds at once rather than at expiry;
//   - the connection to the broker is lost. There is no automatic reconnect:
//     the broker publishes the will and the supervisor ends the lease.
//
// Lost reports the moment, Err the cause. Halt, Status and Reset need no
// lease and keep working while the connection is up: stopping must never
// wait for permission.
//
// # Errors
//
// A refusal or failure the supervisor sends back is an *Error carrying the
// wire code (one of mqtt.Codes) and message, and for STEP_FAILED and
// STEP_IN_DOUBT the report of the unwind the failure caused. IsRefusal says
// whether the code guarantees that nothing moved; errors.Is matches codes
// against ErrLeaseLost, ErrHalted, ErrNotReady, ErrSagaEnded and
// ErrUnauthorized. A call whose context ends before its reply arrives
// returns an error wrapping the context's error: for a step, commit, abort,
// halt or reset its outcome is then unknown (abort the saga, which puts back
// whatever moved).
//
// # Requests and replies
//
// Request ids are "<agent>-<session>-<n>": a random session per Client and
// a counter from 1. The supervisor wants ids unique per lease, which a
// counter gives; the session keeps a late reply meant for an earlier
// Client of the same agent from matching a request of this one. Replies
// are matched to requests by id; the first reply for an id wins, and a
// reply with no request waiting for it (a QoS 1 duplicate, a reply to a
// call that already timed out) is dropped. A call with no deadline in its
// context gets Options.Timeout.
//
// Steps of one saga are sent one at a time (the supervisor refuses a second
// step in flight with SAGA_BUSY): concurrent calls on one Saga wait for each
// other. Different sagas and different clients may be used concurrently.
//
// # Watching
//
// Watch delivers the supervisor's retained status, its events (rollback
// reports of unwinds nobody asked for by request: expiry, wills, halts) and
// the retained commanded state of every actuator. It needs no lease: a
// monitor dials with NoLease.
package client
