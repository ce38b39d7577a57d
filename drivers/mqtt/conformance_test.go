package mqtt_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/actuators/actuatorstest"
	mqttdev "github.com/saga-supervisor/saga-supervisor/drivers/mqtt"
)

// TestConformanceDevice runs the suite on a device with a state topic,
// over the embedded broker, against the fake device: it acks every set and
// halt, and publishes the applied value as its retained state (before the
// ack). Break makes
// it fall silent (no ack: the Set times out in doubt); Refuse makes it ack
// with ok:false.
func TestConformanceDevice(t *testing.T) {
	actuatorstest.Run(t, actuatorstest.Subject{
		New: func(t *testing.T) actuatorstest.Instance {
			b := startBroker(t)
			f := newFakeDevice(t, b, "esp32", "dev/pump/set", "dev/pump/ack", "dev/pump/state")
			f.publishStateOnApply = true
			d := dialTestDevice(t, b, mqttdev.DeviceOptions{StateTopic: "dev/pump/state", HaltTimeout: 300 * time.Millisecond})
			ok := func(m setMsg) []string { return []string{fmt.Sprintf(`{"seq":%d,"ok":true}`, m.Seq)} }
			return actuatorstest.Instance{
				Driver: d,
				Break: func() func() {
					f.setRespond(func(setMsg) []string { return nil })
					return func() { f.setRespond(ok) }
				},
				Refuse: func() func() {
					f.setRespond(func(m setMsg) []string {
						return []string{fmt.Sprintf(`{"seq":%d,"ok":false,"error":"jammed"}`, m.Seq)}
					})
					return func() { f.setRespond(ok) }
				},
			}
		},
		Kind: actuators.Setpoint,
		Min:  -100, Max: 100,
		Values:       []float64{-100, -3.25, 0, 42, 100},
		ReadBack:     true,
		ReadBackWait: 2 * time.Second, // the retained state reaches the driver on its own subscription
		// The fake device leaves its state as it was on halt.
		AfterHalt:  actuatorstest.HaltHolds,
		OutOfRange: []float64{math.NaN(), math.Inf(1), math.Inf(-1)},
		Timeout:    300 * time.Millisecond,
		Goroutines: 4,
		Rounds:     3,
	})
}
