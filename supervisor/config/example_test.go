package config_test

import (
	"fmt"

	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

func ExampleParse() {
	c, err := config.Parse([]byte(`
device: bench1
supplies:
  rail: {driver: sim, min_volts: 4.8, max_volts: 5.4, action: refuse}
actuators:
  pan:
    kind: servo
    driver: sim
    min: -45
    max: 45
    max_rate: 90       # deg/s
    policy: clamp
    safe: {value: 0}
    supply: rail
  lamp: {kind: digital, driver: sim}
`), "bench.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, name := range c.ActuatorNames() {
		a := c.Actuators[name]
		fmt.Printf("%s: %s %+v safe %v timeout %v\n", name, a.Kind, a.LimitsSpec(), a.Safe, a.Timeout)
	}
	fmt.Printf("rail: %+v\n", c.Supplies["rail"].Spec("rail"))
	fmt.Println("topic:", c.Topic())
	// Output:
	// lamp: digital {Min:0 Max:1 MaxStep:0 MaxRate:0 Policy:reject Supply: SupplyMinVolts:0 SupplyMaxVolts:0} safe hold timeout 500ms
	// pan: servo {Min:-45 Max:45 MaxStep:0 MaxRate:90 Policy:clamp Supply:rail SupplyMinVolts:0 SupplyMaxVolts:0} safe value:0 timeout 500ms
	// rail: {Name:rail MinVolts:4.8 MaxVolts:5.4 HysteresisVolts:0 Debounce:200ms StaleAfter:2s Action:refuse}
	// topic: saga/v1/bench1
}

// Every problem is reported at once, each with file:line:col and the path
// of the key, sorted by line.
func ExampleParse_errors() {
	_, err := config.Parse([]byte(`device: arm1
actuators:
  elbow:
    kind: servo
    driver: sim
    min: 0
    max: 135
    initial: 150
    slew: 720
    timeout: 200
`), "arm.yaml")
	fmt.Println(err)
	// Output:
	// arm.yaml:8:14: actuators.elbow.initial: 150 is outside [min, max] = [0, 135]
	// arm.yaml:9:5: actuators.elbow: unknown key "slew" (known keys: kind, driver, gpio, mcu, mqtt, pca9685, sim, min, max, max_step, max_rate, policy, initial, safe, supply, supply_min_volts, supply_max_volts, timeout, requires_approval)
	// arm.yaml:10:14: actuators.elbow.timeout: want a duration, got the number 200: a duration needs a unit, e.g. "200ms" or "2s"
}

func ExampleDefault() {
	c := config.Default()
	fmt.Println(c.Device, c.ActuatorNames(), c.MQTT.Broker, c.MQTT.Listen, c.HTTP.Listen)
	// Output:
	// arm1 [base elbow gripper shoulder] embedded 127.0.0.1:1883 127.0.0.1:8080
}
