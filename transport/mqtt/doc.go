// Package mqtt is the MQTT transport of the controller API (package api):
// it connects to the broker, decodes requests from each agent's command
// topic, routes them to the supervisor, and publishes replies, events and
// the retained status and actuator state. It decides nothing: every rule a
// request is judged by lives in api and the supervisor.
//
// The topic layout (Topics) is part of the wire contract, documented in
// docs/API.md.
package mqtt
