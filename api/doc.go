// Package api is the supervisor's controller API, independent of how a
// request travels: the requests a controller sends (hello, heartbeat,
// begin, step, commit, abort, bye, halt, reset, status), the replies,
// status and events the supervisor sends back, the table of stable codes
// they carry, and the rule for names (agents, actuators).
//
// The package opens no connection and reads no clock, so every rule a buggy
// or hostile controller could probe is pinned down with tables and fuzzing
// before any transport is involved. Transports (transport/mqtt) only
// connect, decode with this package, route and publish; the supervisor
// speaks only this package. docs/API.md is the user documentation; a test
// keeps its code table equal to Codes and its examples equal to what this
// package encodes.
//
// # Requests
//
// DecodeRequest is strict, because a command that moves an arm must mean one
// thing: one JSON object, valid UTF-8, case-sensitive keys, no unknown,
// duplicate or null fields, no field the op does not use, integers written
// as plain integers, no string written with a lone UTF-16 surrogate escape.
// json.Unmarshal into a struct cannot say that: it keeps the last of
// duplicate keys ({"value":1,"value":900} would pass as 900), matches keys
// case-insensitively ("Value" would be value) and reads "\ud800" as U+FFFD
// (so ids "\ud800" and "\ufffd" would be one id). So the decoder walks the
// object's tokens itself, keeps at most one value per known field, judges
// each number from its literal and each string's escapes from the bytes
// the client sent. When a request is refused, DecodeRequest still returns
// the id and agent it could salvage, so the refusal can be addressed.
//
// # Replies and events
//
// EncodeReply, EncodeEvent and EncodeStatus write what the supervisor
// publishes. A transport whose packets are bounded (an MQTT broker's
// maximum packet size) uses EncodeReplyMax and EncodeEventMax instead:
// byte for byte the same output when it fits, and otherwise a smaller one
// that keeps the reply's id, ok and code and the report's verdict, counts
// every step and lists as many as fit (see ReportJSON).
package api
