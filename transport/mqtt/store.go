package mqtt

import (
	"slices"
	"sync"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
)

// copyingStore is paho's memory store with two changes.
//
// It keeps its own copy of each publish. paho v1.5.1 stores the very packet
// its outgoing goroutine is writing, and on (re)connect with a persistent
// session its resume sets the stored packet's DUP flag while that goroutine
// may still be encoding it: a data race (seen under the race detector when a
// publish made from the on-connect handler met the session resume). With a
// copy, resume marks and resends the copy; the broker treats the second
// delivery as the QoS 1 duplicate it is.
//
// All lists the keys in the order they were stored. paho's resume resends
// the unacknowledged publishes in the order All gives, and its memory store
// gives map order: after a reconnect an agent's replies came back shuffled
// (issue 13, replies in order after SIGSTOP and SIGCONT).
type copyingStore struct {
	paho.Store
	mu    sync.Mutex
	order []string // keys, oldest first
}

func newCopyingStore() paho.Store { return &copyingStore{Store: paho.NewMemoryStore()} }

func (s *copyingStore) Put(key string, m packets.ControlPacket) {
	if p, ok := m.(*packets.PublishPacket); ok {
		c := *p
		c.Payload = slices.Clone(p.Payload)
		m = &c
	}
	s.mu.Lock()
	s.order = slices.DeleteFunc(s.order, func(k string) bool { return k == key })
	s.order = append(s.order, key)
	s.mu.Unlock()
	s.Store.Put(key, m)
}

func (s *copyingStore) Del(key string) {
	s.mu.Lock()
	s.order = slices.DeleteFunc(s.order, func(k string) bool { return k == key })
	s.mu.Unlock()
	s.Store.Del(key)
}

func (s *copyingStore) Reset() {
	s.mu.Lock()
	s.order = nil
	s.mu.Unlock()
	s.Store.Reset()
}

// All returns the stored keys, oldest first.
func (s *copyingStore) All() []string {
	present := map[string]bool{}
	for _, k := range s.Store.All() {
		present[k] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(present))
	for _, k := range s.order {
		if present[k] {
			out = append(out, k)
		}
	}
	return out
}
