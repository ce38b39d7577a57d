package mqtt_test

import (
	"testing"
	"time"

	mqttdev "github.com/saga-supervisor/saga-supervisor/drivers/mqtt"
	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
)

// TestDeviceLinkAfter: a link given After dials nothing until it is
// closed (another process's listener on the address counts none), then
// connects; one closed before After never dials.
func TestDeviceLinkAfter(t *testing.T) {
	stranger, dialled := daemontest.Stranger(t)
	never := make(chan struct{})
	l, err := mqttdev.DialDeviceLink(mqttdev.LinkOptions{Broker: "tcp://" + stranger.Addr().String(), ClientID: "sup-devices",
		ConnectWait: 3 * time.Second, After: never})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // retried every 0.5 s, were it dialling
	l.Close()
	if n := dialled.Load(); n != 0 {
		t.Fatalf("%d connections before After was closed", n)
	}

	b := startBroker(t)
	up := make(chan struct{})
	l, err = mqttdev.DialDeviceLink(mqttdev.LinkOptions{Broker: b.URL(), ClientID: "sup-devices", ConnectWait: 3 * time.Second, After: up})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d, err := l.Device(mqttdev.DeviceOptions{Name: "a", SetTopic: "dev/a/set", AckTopic: "dev/a/ack"})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Set(ctxFor(t, 200*time.Millisecond), 1); err == nil {
		t.Fatal("a Set went through before After was closed")
	}
	fa := newFakeDevice(t, b, "esp-a", "dev/a/set", "dev/a/ack", "")
	close(up)
	daemontest.WaitFor(t, "a Set to go through once After is closed", 10*time.Second, func() bool {
		return d.Set(ctxFor(t, time.Second), 1) == nil
	})
	if len(fa.received()) == 0 {
		t.Fatal("the device received nothing")
	}
}
