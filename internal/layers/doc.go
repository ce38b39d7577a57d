// Package layers holds the test that guards the import rules of
// docs/DESIGN.md ("Layers") that Go's internal rule cannot: the supervisor
// speaks only the transport-neutral controller API, transports only
// connect, decode, route and publish, lower packages never import higher
// ones, and the binary links no template or Prometheus client package.
// Who may import command code (cmd/.../internal) is left to the compiler.
package layers
