package mqtt

import (
	"cmp"
	"slices"
	"strings"
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
// gives map order, which would shuffle an agent's replies after a
// reconnect.
//
// It tells when a publish is acknowledged: Del (paho deletes a publish when
// the broker acknowledges it) signals acked, and holds says whether one
// publish is still waiting. The transport hands an agent its next reply
// only once the last one is acknowledged (Transport.publisher).
type copyingStore struct {
	paho.Store
	mu    sync.Mutex
	seq   uint64
	when  map[string]uint64 // key → the order it was stored in
	acked chan struct{}     // signalled (one pending stands for any number) when a key is deleted
}

func newCopyingStore() *copyingStore {
	return &copyingStore{Store: paho.NewMemoryStore(), when: map[string]uint64{}, acked: make(chan struct{}, 1)}
}

// signal wakes whoever waits on acked.
func (s *copyingStore) signal() {
	select {
	case s.acked <- struct{}{}:
	default:
	}
}

func (s *copyingStore) Put(key string, m packets.ControlPacket) {
	if p, ok := m.(*packets.PublishPacket); ok {
		c := *p
		c.Payload = slices.Clone(p.Payload)
		m = &c
	}
	s.mu.Lock()
	s.seq++
	s.when[key] = s.seq
	s.mu.Unlock()
	s.Store.Put(key, m)
}

func (s *copyingStore) Del(key string) {
	s.mu.Lock()
	delete(s.when, key)
	s.mu.Unlock()
	s.Store.Del(key)
	s.signal()
}

func (s *copyingStore) Reset() {
	s.mu.Lock()
	clear(s.when)
	s.mu.Unlock()
	s.Store.Reset()
	s.signal()
}

// stored returns the order key was stored in, if it is stored.
func (s *copyingStore) stored(key string) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seq, ok := s.when[key]
	return seq, ok
}

// holds reports whether the publish stored as key in order seq is still
// stored: not yet acknowledged (a later publish may reuse its key).
func (s *copyingStore) holds(key string, seq uint64) bool {
	got, ok := s.stored(key)
	return ok && got == seq
}

// All returns the stored keys, oldest first (paho calls it only to resume
// a session, so the sort is rare).
func (s *copyingStore) All() []string {
	keys := s.Store.All()
	s.mu.Lock()
	defer s.mu.Unlock()
	slices.SortFunc(keys, func(a, b string) int { return cmp.Compare(s.when[a], s.when[b]) })
	return keys
}

// outbound returns the keys of the outgoing packets stored now: what a
// session resume resends.
func (s *copyingStore) outbound() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]bool{}
	for k := range s.when {
		if strings.HasPrefix(k, "o.") {
			out[k] = true
		}
	}
	return out
}

// holdsAny reports whether any of keys is still stored (not acknowledged).
func (s *copyingStore) holdsAny(keys map[string]bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range keys {
		if _, ok := s.when[k]; ok {
			return true
		}
	}
	return false
}
