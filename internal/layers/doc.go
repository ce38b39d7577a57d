// Package layers holds the test that guards the import rules of
// docs/DESIGN.md ("Layers"): the supervisor speaks only the
// transport-neutral controller API, transports only connect, decode, route
// and publish, and lower packages never import higher ones.
package layers
