// Package supervisor composes the daemon: it builds actuators and supplies
// from a configuration, takes over the journal through recovery, grants
// leases to agents and unwinds their sagas when a lease ends, latches halt,
// and answers readiness — fail-closed: unknown supply voltage, a failed
// journal, a lost driver link or an unrecovered saga each mean not ready,
// and every reason is listed. Transports (MQTT, HTTP) call into it; it never
// waits on the network.
package supervisor
