package mqtt

import (
	"slices"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
)

// copyingStore is paho's memory store, but it keeps its own copy of each
// publish. paho v1.5.1 stores the very packet its outgoing goroutine is
// writing, and on (re)connect with a persistent session its resume sets
// the stored packet's DUP flag while that goroutine may still be encoding
// it: a data race (seen under the race detector when a publish made from
// the on-connect handler met the session resume). With a copy, resume marks
// and resends the copy; the broker treats the second delivery as the
// QoS 1 duplicate it is.
type copyingStore struct{ paho.Store }

func newCopyingStore() paho.Store { return copyingStore{paho.NewMemoryStore()} }

func (s copyingStore) Put(key string, m packets.ControlPacket) {
	if p, ok := m.(*packets.PublishPacket); ok {
		c := *p
		c.Payload = slices.Clone(p.Payload)
		m = &c
	}
	s.Store.Put(key, m)
}
