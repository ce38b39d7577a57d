package embedded

import (
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// A real MQTT client round-trips a QoS 1 message through the broker, and a
// retained message reaches a later subscriber.
func TestBrokerRoundTrip(t *testing.T) {
	b, err := Start("127.0.0.1:0", 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := paho.NewClient(paho.NewClientOptions().AddBroker(b.URL()).SetClientID("t"))
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(0)
	if tok := c.Publish("saga/v1/arm1/status", 1, true, "online"); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	got := make(chan string, 2)
	tok := c.Subscribe("saga/v1/arm1/#", 1, func(_ paho.Client, m paho.Message) { got <- m.Topic() + "=" + string(m.Payload()) })
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	c.Publish("saga/v1/arm1/cmd", 1, false, "hello")
	want := map[string]bool{"saga/v1/arm1/status=online": true, "saga/v1/arm1/cmd=hello": true}
	for range want {
		select {
		case m := <-got:
			if !want[m] {
				t.Errorf("unexpected %q", m)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("message not delivered")
		}
	}
}

// Close twice is harmless (mochi's own Close panicked the second time, so a
// deferred Close after an explicit one crashed the caller).
func TestCloseTwice(t *testing.T) {
	b, err := Start("127.0.0.1:0", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	b.Close()
}
