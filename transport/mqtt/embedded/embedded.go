// Package embedded runs an in-process MQTT broker (mochi-mqtt) for the
// daemon's embedded default: `saga-supervisor run` with no configuration
// needs no broker installed. It listens on loopback by default and allows
// anonymous clients, so it is for a single robot's own computer; anything
// shared uses an external broker with ACLs per agent.
package embedded

import (
	"fmt"
	"log/slog"
	"net"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
)

// Broker is a running in-process broker.
type Broker struct {
	srv *mqtt.Server
	ln  net.Listener
}

// Start listens on addr ("127.0.0.1:1883"; port 0 picks a free one) and
// serves MQTT on it. maxPacket bounds a packet's size (0: no bound).
func Start(addr string, maxPacket uint32, log *slog.Logger) (*Broker, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("embedded broker: %w", err)
	}
	caps := mqtt.NewDefaultServerCapabilities()
	caps.MaximumPacketSize = maxPacket
	srv := mqtt.New(&mqtt.Options{Capabilities: caps, Logger: log})
	if err := srv.AddHook(new(auth.AllowHook), nil); err != nil {
		ln.Close()
		return nil, err
	}
	// Our own listener: the port is bound before Start returns, so a
	// caller (or a test using port 0) knows the address at once.
	if err := srv.AddListener(listeners.NewNet("saga", ln)); err != nil {
		ln.Close()
		return nil, err
	}
	go srv.Serve()
	return &Broker{srv: srv, ln: ln}, nil
}

// Addr is the address the broker listens on.
func (b *Broker) Addr() string { return b.ln.Addr().String() }

// URL is the broker's address as a client URL.
func (b *Broker) URL() string { return "tcp://" + b.Addr() }

// Close stops the broker.
func (b *Broker) Close() error { return b.srv.Close() }
