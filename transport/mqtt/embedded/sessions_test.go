package embedded

import (
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// TestSweepPutsBackADroppedClient does to a connected client what mochi's
// clean-up of an earlier connection of its id does when it runs late: its
// filters leave the topic index and its id leaves the clients table. The
// client stays connected and deaf (as the supervisor would after a
// client-id takeover) until the sweep puts it back.
func TestSweepPutsBackADroppedClient(t *testing.T) {
	b, err := Start("127.0.0.1:0", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const topic = "saga/v1/arm1/cmd/a"
	sub, err := dialAs(b, "", "", "victim", "")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Disconnect(0)
	got := make(chan struct{}, 16)
	if tok := sub.Subscribe(topic, 1, func(paho.Client, paho.Message) { got <- struct{}{} }); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	pub, err := dialAs(b, "", "", "pub", "")
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Disconnect(0)

	// The late clean-up of an earlier "victim": by id.
	b.srv.Topics.Unsubscribe(topic, "victim")
	b.srv.Clients.Delete("victim")

	deadline := time.Now().Add(5 * time.Second)
	for {
		pub.Publish(topic, 1, false, "x").WaitTimeout(time.Second)
		select {
		case <-got:
			if n := b.Stats().SessionsRepaired; n != 1 {
				t.Errorf("SessionsRepaired %d, want 1", n)
			}
			return
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the connected client never received a message again")
		}
	}
}
