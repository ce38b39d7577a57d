package embedded

import (
	"fmt"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// A client that disconnects and connects again at once with the same
// client id keeps receiving what it subscribes to, on the anonymous broker
// and the locked one. mochi (v2.7.9) cleans up the old session after it
// checked for a takeover, so the old connection's clean-up could remove the
// new session from the broker's clients: what it subscribed to then
// delivers nothing (a controller's replies vanish; without
// awaitPredecessor this test loses a few of 200 under -race).
func TestQuickReconnectKeepsDelivery(t *testing.T) {
	for _, locked := range []bool{false, true} {
		t.Run(map[bool]string{false: "anonymous", true: "locked"}[locked], func(t *testing.T) {
			var b *Broker
			dial := func(user string) (paho.Client, error) { return dialAs(b, "", "", user, "") }
			if locked {
				b = lockedBroker(t, 0)
				dial = func(user string) (paho.Client, error) {
					return dialAs(b, user, passwords[user], user, "saga/v1/arm1/will/"+user)
				}
			} else {
				var err error
				if b, err = Start("127.0.0.1:0", 0, nil); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Close() })
			}
			pub, err := dialAs(b, sup, passwords[sup], sup, "")
			if !locked {
				pub, err = dial("pub")
			}
			if err != nil {
				t.Fatal(err)
			}
			defer pub.Disconnect(0)
			topic := "saga/v1/arm1/reply/a"
			var old paho.Client
			lost := 0
			for i := range 200 {
				if old != nil {
					old.Disconnect(0) // no wait: the new connection races its clean-up
				}
				c, err := dial("a")
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan struct{}, 1)
				if tok := c.Subscribe(topic, 1, func(paho.Client, paho.Message) {
					select {
					case got <- struct{}{}:
					default:
					}
				}); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
					t.Fatal(tok.Error())
				}
				pub.Publish(topic, 1, false, fmt.Sprint(i)).WaitTimeout(5 * time.Second)
				select {
				case <-got:
				case <-time.After(2 * time.Second):
					lost++
				}
				old = c
			}
			old.Disconnect(0)
			if lost > 0 {
				t.Fatalf("%d of 200 quick reconnects received nothing", lost)
			}
		})
	}
}
