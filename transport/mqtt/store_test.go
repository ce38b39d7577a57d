package mqtt

import (
	"fmt"
	"slices"
	"testing"

	"github.com/eclipse/paho.mqtt.golang/packets"
)

// The store keeps its own copy of a publish, so paho's session resume can
// mark it DUP without touching the packet being written.
func TestCopyingStoreKeepsItsOwnPublish(t *testing.T) {
	s := newCopyingStore()
	s.Open()
	defer s.Close()
	p := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
	p.Qos, p.TopicName, p.Payload = 1, "saga/v1/arm1/reply/a", []byte(`{"id":"1"}`)
	s.Put("o.1", p)
	stored := s.Get("o.1").(*packets.PublishPacket)
	if stored == p {
		t.Fatal("the store holds the caller's packet itself")
	}
	stored.Dup = true
	stored.Payload[0] = 'X'
	if p.Dup || p.Payload[0] != '{' {
		t.Fatal("marking the stored copy changed the original")
	}
}

// All lists the keys in the order they were stored, whatever the memory
// store's map order: paho resumes a session's unacknowledged publishes in
// that order, and an agent's replies must not come back shuffled.
func TestStoreListsKeysInStoredOrder(t *testing.T) {
	s := newCopyingStore()
	s.Open()
	var want []string
	for i := range 200 {
		key := fmt.Sprintf("o.%d", 65535-i*97%65535)
		p := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
		s.Put(key, p)
		want = append(want, key)
	}
	s.Del(want[7])
	want = slices.Delete(want, 7, 8)
	if got := s.All(); !slices.Equal(got, want) {
		t.Fatalf("All in %v order, want the stored order", got[:10])
	}
}
