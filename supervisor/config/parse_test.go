package config_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	_ "github.com/saga-supervisor/saga-supervisor/supervisor/wiring" // the driver kinds
)

// A line ending in "#!" marks where an expected error is located: the i-th
// marked line holds the i-th error (errors come sorted by line). Deriving the
// line from the marker keeps each case readable and its line numbers right.
const marker = "#!"

// minimal is a valid config with only what is required.
const minimal = `
device: arm1
supplies:
  battery:
    driver: sim
    min_volts: 6.4
    max_volts: 8.6
actuators:
  base:
    kind: servo
    driver: sim
    min: -90
    max: 90
    supply: battery
`

// badConfigs are configs that must be refused, each with the errors it must
// produce: want[i] is "path: text" (or just text) expected in the error on
// the i-th marked line.
var badConfigs = []struct {
	name string
	yaml string
	want []string
}{
	{"unknown top-level key", `
device: arm1
journl: {dir: x} #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`unknown key "journl" (known keys: device, board, state_dir, journal, unwind,`}},
	{"unknown board", `
device: arm1
board: raspberry-pi-6 #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`board: unknown board "raspberry-pi-6" (known: generic, raspberry-pi, raspberry-pi-3, raspberry-pi-4, raspberry-pi-5, raspberry-pi-zero-2)`}},
	{"e-stop on a pin the board lacks", `
device: arm1
estop:
  driver: gpio
  pin: GPIO99 #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`estop.pin: "GPIO99" is not on the 40-pin header of a Raspberry Pi (model not given)`}},
	{"two boards on one serial port", `
device: arm1
mcus:
  left:
    port: /dev/ttyACM0
  right:
    port: /dev//ttyACM0 #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`mcus.right.port: serial port /dev/ttyACM0 is already used by mcus.left.port (line 4)`}},
	{"two boards by one USB id", `
device: arm1
mcus:
  left:
    usb: {vid: "2E8A", pid: "000a"}
  right:
    usb: {vid: "2e8a", pid: "000A"} #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`mcus.right.usb: USB device 2e8a:000a serial number (none given) is already used by mcus.left.usb (line 4)`}},
	{"unknown nested key", `
device: arm1
actuators:
  elbow:
    kind: servo
    driver: sim
    min: 0
    max: 135
    slew: 720 #!
`, []string{`actuators.elbow: unknown key "slew" (known keys: kind, driver, gpio, mcu, mqtt, pca9685, sim, min, max,`}},
	{"unknown key two levels down", `
device: arm1
mqtt:
  broker: ssl://broker.local:8883
  tls:
    ca_file: ca.pem
    verify: true #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`mqtt.tls: unknown key "verify" (known keys: ca_file, cert_file, key_file, insecure_skip_verify)`}},
	{"duplicate top-level key", `
device: arm1
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
device: arm2 #!
`, []string{`duplicate key "device" (first at line 1)`}},
	{"duplicate actuator", `
device: arm1
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
  base: {kind: servo, driver: sim, min: 0, max: 2} #!
`, []string{`actuators: duplicate key "base" (first at line 3)`}},
	{"duplicate key inside an actuator", `
device: arm1
actuators:
  base:
    kind: servo
    driver: sim
    min: 0
    max: 10
    min: 5 #!
`, []string{`actuators.base: duplicate key "min" (first at line 6)`}},
	{"string for a number", `
device: arm1
actuators:
  base:
    kind: servo
    driver: sim
    min: ten #!
    max: 10
`, []string{`actuators.base.min: want a number, got the string "ten"`}},
	{"number for a string", `
device: 123 #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`device: want a string, got the number 123 (quote it if you mean the text: "123")`}},
	{"list for a mapping", `
device: arm1
actuators: [base, elbow] #!
`, []string{`actuators: want a mapping of names, got a list`}},
	{"scalar for a section", `
device: arm1
journal: ./data #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`journal: want a mapping, got the string "./data"`}},
	{"NaN", `
device: arm1
actuators:
  base:
    kind: servo
    driver: sim
    min: 0
    max: .nan #!
`, []string{`actuators.base.max: .nan is not a finite number`}},
	{"infinite voltage", `
device: arm1
supplies:
  battery:
    driver: sim
    min_volts: -.inf #!
    max_volts: 8.6
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`supplies.battery.min_volts: -.inf is not a finite number`}},
	{"min above max", `
device: arm1
actuators:
  base:
    kind: servo
    driver: sim
    min: 90 #!
    max: -90
`, []string{`actuators.base.min: 90 is above max -90`}},
	{"safe value out of range", `
device: arm1
actuators:
  shoulder:
    kind: servo
    driver: sim
    min: 0
    max: 120
    safe: {value: 130} #!
`, []string{`actuators.shoulder.safe.value: 130 is outside [min, max] = [0, 120]`}},
	{"initial out of range", `
device: arm1
actuators:
  elbow:
    kind: servo
    driver: sim
    min: 0
    max: 135
    initial: -5 #!
`, []string{`actuators.elbow.initial: -5 is outside [min, max] = [0, 135]`}},
	{"default initial out of range", `
device: arm1
actuators:
  wrist: #!
    kind: servo
    driver: sim
    min: 10
    max: 170
`, []string{`actuators.wrist.initial: the default initial value 0 is outside [min, max] = [10, 170]; set initial`}},
	{"unknown supply", `
device: arm1
supplies:
  battery: {driver: sim, min_volts: 6.4, max_volts: 8.6}
actuators:
  base:
    kind: servo
    driver: sim
    min: 0
    max: 1
    supply: batery #!
`, []string{`actuators.base.supply: unknown supply "batery" (known: battery)`}},
	{"bad kind", `
device: arm1
actuators:
  base:
    kind: motor #!
    driver: sim
    min: 0
    max: 1
`, []string{`actuators.base.kind: unknown kind "motor" (known: servo, pwm, digital, setpoint, pulse)`}},
	{"missing kind", `
device: arm1
actuators:
  base: {driver: sim, min: 0, max: 1} #!
`, []string{`actuators.base.kind: required`}},
	{"duration without unit", `
device: arm1
actuators:
  base:
    kind: servo
    driver: sim
    min: 0
    max: 1
    timeout: 200 #!
`, []string{`actuators.base.timeout: want a duration, got the number 200: a duration needs a unit`}},
	{"unparseable duration", `
device: arm1
unwind:
  retry_backoff: soon #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`unwind.retry_backoff: bad duration "soon"`}},
	{"lease TTL below 50ms", `
device: arm1
leases:
  default_ttl: 10ms #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`leases.default_ttl: 10ms is outside 50ms..1m0s`}},
	{"lease TTL above 60s", `
device: arm1
leases:
  max_ttl: 2m #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`leases.max_ttl: 2m0s is outside 50ms..1m0s`}},
	{"default TTL below min TTL", `
device: arm1
leases:
  default_ttl: 100ms #!
  min_ttl: 200ms
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`leases.default_ttl: 100ms is outside min_ttl..max_ttl = 200ms..1m0s`}},
	{"actuator name with +", `
device: arm1
actuators:
  arm+1: {kind: servo, driver: sim, min: 0, max: 1} #!
`, []string{`actuators.arm+1: bad name: name "arm+1" holds '/', '+' or '#', which MQTT topics reserve`}},
	{"device name with /", `
device: arm/1 #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`device: name "arm/1" holds '/', '+' or '#'`}},
	{"device missing", `
actuators: #!
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`device: required`}},
	{"no actuators", `
device: arm1
actuators: {} #!
`, []string{`actuators: at least one actuator is required`}},
	{"password and password_file", `
device: arm1
mqtt:
  broker: tcp://broker.local:1883
  username: arm1
  password: hunter2 #!
  password_file: /etc/saga/mqtt.pass
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`mqtt.password: set either password or password_file, not both`}},
	{"password without username", `
device: arm1
mqtt:
  broker: tcp://broker.local:1883
  password: hunter2 #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`mqtt.password: a password needs a username`}},
	{"reset_token and reset_token_file", `
device: arm1
http:
  reset_token: abc #!
  reset_token_file: /etc/saga/token
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`http.reset_token: set either reset_token or reset_token_file, not both`}},
	{"several errors collected", `
device: arm1
unwind:
  order: backwards #!
actuators:
  base:
    kind: servo
    driver: pwm-hat #!
    min: 0
    max: 1
    policy: clip #!
    colour: red #!
`, []string{
		`unwind.order: unknown order "backwards" (known: retrace, direct)`,
		`actuators.base.driver: unknown driver "pwm-hat" (known drivers: gpio, mcu, mqtt, pca9685, sim)`,
		`actuators.base.policy: unknown policy "clip" (known: reject, clamp)`,
		`actuators.base: unknown key "colour"`,
	}},
	{"pulse with a safe value", `
device: arm1
actuators:
  dispenser:
    kind: pulse
    driver: sim
    min: 0
    max: 1
    safe: {value: 0} #!
`, []string{`actuators.dispenser.safe.value: a pulse has no position to go to: use hold or detach`}},
	{"safe value without a number", `
device: arm1
actuators:
  base:
    kind: servo
    driver: sim
    min: 0
    max: 1
    safe: value #!
`, []string{`actuators.base.safe: a safe value needs the value: write {value: X}`}},
	{"unknown key in safe", `
device: arm1
actuators:
  base:
    kind: servo
    driver: sim
    min: 0
    max: 1
    safe: {value: 0, speed: 3} #!
`, []string{`actuators.base.safe: unknown key "speed" (known keys: value)`}},
	{"missing driver", `
device: arm1
actuators:
  base: {kind: servo, min: 0, max: 1} #!
`, []string{`actuators.base.driver: required (known drivers: gpio, mcu, mqtt, pca9685, sim)`}},
	{"missing max", `
device: arm1
actuators:
  base: #!
    kind: setpoint
    driver: sim
    min: 0
`, []string{`actuators.base.max: required for a setpoint`}},
	{"digital initial between on and off", `
device: arm1
actuators:
  relay:
    kind: digital
    driver: sim
    initial: 0.5 #!
`, []string{`actuators.relay.initial: 0.5 is neither 0 (off) nor 1 (on)`}},
	{"pwm beyond duty 1", `
device: arm1
actuators:
  fan:
    kind: pwm
    driver: sim
    max: 100 #!
`, []string{`actuators.fan.max: a pwm's values lie in [0, 1]; [0, 100] does not`}},
	{"slew on a relay", `
device: arm1
actuators:
  relay:
    kind: digital
    driver: sim
    sim: {slew: 90} #!
`, []string{`actuators.relay.sim.slew: slew applies to servos only, not digital`}},
	{"negative max_step", `
device: arm1
actuators:
  base:
    kind: servo
    driver: sim
    min: 0
    max: 1
    max_step: -1 #!
`, []string{`actuators.base.max_step: must not be negative`}},
	{"supply bounds without a supply", `
device: arm1
actuators:
  base:
    kind: servo
    driver: sim
    min: 0
    max: 1
    supply_min_volts: 6 #!
`, []string{`actuators.base.supply_min_volts: voltage bounds need a supply`}},
	{"actuator supply bound the supply never reaches", `
device: arm1
supplies:
  battery: {driver: sim, min_volts: 6.4, max_volts: 8.6}
actuators:
  base:
    kind: servo
    driver: sim
    min: 0
    max: 1
    supply: battery
    supply_min_volts: 9 #!
`, []string{`actuators.base.supply_min_volts: 9 V is above battery's max_volts 8.6 V: the actuator could never move`}},
	{"supply hysteresis leaves no band", `
device: arm1
supplies:
  battery:
    driver: sim
    min_volts: 6.4
    max_volts: 7
    hysteresis_volts: 0.4 #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`supplies.battery.hysteresis_volts: 0.4 V leaves no band to clear in`}},
	{"supply without min_volts", `
device: arm1
supplies:
  battery: {driver: sim, max_volts: 8.6} #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`supplies.battery.min_volts: required`}},
	{"supply action", `
device: arm1
supplies:
  battery:
    driver: sim
    min_volts: 6.4
    max_volts: 8.6
    action: explode #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`supplies.battery.action: unknown action "explode" (known: warn, refuse, unwind, halt)`}},
	{"actuator named like a supply", `
device: arm1
supplies:
  battery: {driver: sim, min_volts: 6.4, max_volts: 8.6}
actuators:
  battery: {kind: servo, driver: sim, min: 0, max: 1} #!
`, []string{`actuators.battery: "battery" is also the name of a supply`}},
	{"broker scheme", `
device: arm1
mqtt:
  broker: http://broker.local:1883 #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`mqtt.broker: unsupported scheme "http"`}},
	{"broker without port", `
device: arm1
mqtt:
  broker: tcp://broker.local #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`mqtt.broker: broker "tcp://broker.local" needs a port`}},
	{"broker URL with credentials", `
device: arm1
mqtt:
  broker: tcp://arm1:hunter2@broker.local:1883 #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`mqtt.broker: the broker URL must not hold credentials`}},
	{"tls files with a plain broker", `
device: arm1
mqtt:
  broker: tcp://broker.local:1883
  tls:
    ca_file: ca.pem #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`mqtt.tls.ca_file: TLS settings need an ssl://, tls://, mqtts:// or wss:// broker`}},
	{"a CA or skip-verify with the embedded broker", `
device: arm1
mqtt:
  tls:
    ca_file: ca.pem #!
    insecure_skip_verify: true #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{
		`mqtt.tls.ca_file: the embedded broker takes only cert_file and key_file`,
		`mqtt.tls.insecure_skip_verify: the embedded broker takes only cert_file and key_file`,
	}},
	{"embedded broker reachable from other machines without TLS", `
device: arm1
mqtt:
  listen: 0.0.0.0:1883 #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`mqtt.listen: 0.0.0.0:1883 can be reached from other machines: the embedded broker needs TLS there`}},
	{"anonymous embedded broker reachable from other machines", `
device: arm1
mqtt:
  listen: 192.168.1.5:1883
  tls: {cert_file: c.pem, key_file: k.pem}
  auth:
    anonymous: true #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`mqtt.auth.anonymous: anonymous clients on 192.168.1.5:1883, which other machines can reach`}},
	{"reset over MQTT without TLS", `
device: arm1
mqtt:
  broker: tcp://127.0.0.1:1883
  allow_reset: true #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`mqtt.allow_reset: a reset over MQTT carries the operator token: only over TLS`}},
	{"permissions naming what does not exist", `
device: arm1
agents:
  allow:
    planner:
      actuators: [base, wrist] #!
      ops: [step, fly] #!
    bad/name: {} #!
    pump: {} #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
  pump: {kind: setpoint, driver: mqtt, mqtt: {set_topic: p/set, ack_topic: p/ack}, min: 0, max: 1}
`, []string{
		`agents.allow.planner.actuators[1]: no actuator "wrist"`,
		`agents.allow.planner.ops[1]: unknown op "fly"`,
		`agents.allow.bad/name: bad name`,
		`agents.allow.pump: "pump" is also the MQTT user of actuator pump`,
	}},
	{"permissions of the wrong shape", `
device: arm1
agents:
  allow:
    planner:
      actuators: base #!
      ops: [1] #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{
		`agents.allow.planner.actuators: want a list of strings, got the string "base"`,
		`agents.allow.planner.ops[0]: want a string, got the number 1`,
	}},
	{"cert without key", `
device: arm1
mqtt:
  broker: ssl://broker.local:8883
  tls: {cert_file: c.pem} #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`mqtt.tls.cert_file: cert_file and key_file go together`}},
	{"listen with an external broker", `
device: arm1
mqtt:
  broker: tcp://broker.local:1883
  listen: 127.0.0.1:1883 #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`mqtt.listen: listen is only for the embedded broker`}},
	{"http listen without port", `
device: arm1
http:
  listen: localhost #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`http.listen: bad address "localhost": want host:port`}},
	{"bool spelled yes", `
device: arm1
mqtt:
  broker: ssl://broker.local:8883
  tls: {insecure_skip_verify: yes} #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`mqtt.tls.insecure_skip_verify: want true or false, got the string "yes"`}},
	{"ambiguous size unit", `
device: arm1
journal:
  segment_size: 16MB #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`journal.segment_size: size "16MB": MB is ambiguous; use MiB`}},
	{"segment too small", `
device: arm1
journal:
  segment_size: 100 #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`journal.segment_size: 100 is outside 512..1GiB`}},
	{"max_payload too small", `
device: arm1
mqtt:
  max_payload: 64 #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`mqtt.max_payload: 64 is outside 1KiB..268435455 bytes`}},
	{"zero retries", `
device: arm1
unwind:
  retries: 0 #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`unwind.retries: must be 1..10`}},
	{"retry backoff adds up to hours", `
device: arm1
unwind:
  retries: 10
  retry_backoff: 10s #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`unwind.retry_backoff: 10s doubled over 10 retries waits 2h50m30s in all; at most 1m0s`}},
	{"float for an int", `
device: arm1
unwind:
  retries: 2.5 #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`unwind.retries: want a whole number, got the number 2.5`}},
	{"prefix with a wildcard", `
device: arm1
mqtt:
  prefix: saga/# #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`mqtt.prefix: "saga/#": name "#" holds '/', '+' or '#'`}},
	{"alias", `
device: &name arm1
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
mqtt:
  client_id: *name #!
`, []string{`mqtt.client_id: aliases are not supported`}},
	{"second document", `
device: arm1
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
--- #!
device: arm2
`, []string{`a config holds one YAML document`}},
	{"syntax error", `
device: arm1
actuators #!
  base: {kind: servo}
`, []string{`YAML syntax:`}},
	{"not a mapping", `
- device: arm1 #!
`, []string{`a config is a mapping of keys`}},
	{"null value", `
device: arm1
http:
  listen: #!
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`http.listen: want a string, got no value (null)`}},
	{"timeout too long", `
device: arm1
actuators:
  base:
    kind: servo
    driver: sim
    min: 0
    max: 1
    timeout: 1m #!
`, []string{`actuators.base.timeout: 1m0s is outside (0, 10s]`}},
	{"mqtt driver without its section", `
device: arm1
actuators:
  pump:
    kind: setpoint
    driver: mqtt #!
    min: 0
    max: 100
`, []string{`actuators.pump.driver: driver: mqtt needs an mqtt section with set_topic and ack_topic`}},
	{"mqtt section on a sim actuator", `
device: arm1
actuators:
  pump:
    kind: setpoint
    driver: sim
    mqtt: {set_topic: pump/set, ack_topic: pump/ack} #!
    min: 0
    max: 100
`, []string{`actuators.pump.mqtt: mqtt settings apply to driver: mqtt only, not sim`}},
	{"sim section on an mqtt actuator", `
device: arm1
actuators:
  arm:
    kind: servo
    driver: mqtt
    sim: {slew: 90} #!
    mqtt: {set_topic: arm/set, ack_topic: arm/ack}
    min: 0
    max: 90
`, []string{`actuators.arm.sim: sim settings apply to driver: sim only, not mqtt`}},
	{"mqtt topics: wildcard, missing ack, '$', same as set", `
device: arm1
actuators:
  pump:
    kind: setpoint
    driver: mqtt
    mqtt: #!
      set_topic: pumps/+/set #!
    min: 0
    max: 100
  fan:
    kind: pwm
    driver: mqtt
    mqtt:
      set_topic: fan/set
      ack_topic: fan/set #!
      state_topic: $SYS/fan #!
`, []string{
		`actuators.pump.mqtt.ack_topic: required with driver: mqtt`,
		`actuators.pump.mqtt.set_topic: "pumps/+/set" holds a wildcard`,
		`actuators.fan.mqtt.ack_topic: is the same topic as set_topic`,
		`actuators.fan.mqtt.state_topic: "$SYS/fan": a topic must not start with '$'`,
	}},
	{"mqtt topic empty, and under the supervisor's own tree", `
device: arm1
actuators:
  relay:
    kind: digital
    driver: mqtt
    mqtt:
      set_topic: saga/v1/arm1/relay/set #!
      ack_topic: "" #!
`, []string{
		`actuators.relay.mqtt.set_topic: "saga/v1/arm1/relay/set" lies under saga/v1/arm1/, which the supervisor's own API uses`,
		`actuators.relay.mqtt.ack_topic: must not be empty`,
	}},
	{"two mqtt actuators sharing a topic", `
device: arm1
actuators:
  a:
    kind: digital
    driver: mqtt
    mqtt: {set_topic: a/set, ack_topic: shared/ack}
  b:
    kind: digital
    driver: mqtt
    mqtt: {set_topic: b/set, ack_topic: shared/ack} #!
`, []string{`actuators.b.mqtt.ack_topic: "shared/ack" is already used by actuators.a.mqtt.ack_topic`}},
	{"mqtt section with an unknown key", `
device: arm1
actuators:
  a:
    kind: digital
    driver: mqtt
    mqtt:
      set_topic: a/set
      ack_topic: a/ack
      qos: 2 #!
`, []string{`actuators.a.mqtt: unknown key "qos" (known keys: set_topic, ack_topic, state_topic, user)`}},
	{"supply on the mqtt driver", `
device: arm1
supplies:
  battery:
    driver: mqtt #!
    min_volts: 6
    max_volts: 8
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`supplies.battery.driver: unknown driver "mqtt" (known drivers: ina219, ina226, mcu, sim)`}},
}

// markedLines returns the 1-based numbers of the lines carrying the marker.
func markedLines(text string) []int {
	var lines []int
	for i, l := range strings.Split(text, "\n") {
		if strings.HasSuffix(strings.TrimSpace(l), marker) {
			lines = append(lines, i+1)
		}
	}
	return lines
}

// errorList splits a joined error into its parts.
func errorList(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func TestParseRefuses(t *testing.T) {
	if len(badConfigs) < 25 {
		t.Fatalf("only %d bad configs", len(badConfigs))
	}
	for _, tc := range badConfigs {
		t.Run(tc.name, func(t *testing.T) {
			text := strings.TrimPrefix(tc.yaml, "\n")
			lines := markedLines(text)
			if len(lines) != len(tc.want) {
				t.Fatalf("bad case: %d marked lines, %d expected errors", len(lines), len(tc.want))
			}
			c, err := config.Parse([]byte(text), "arm.yaml")
			if err == nil {
				t.Fatalf("accepted: %+v", c)
			}
			if c != nil {
				t.Error("a config was returned with the error")
			}
			got := errorList(err)
			if len(got) != len(tc.want) {
				t.Fatalf("%d errors, want %d:\n%v", len(got), len(tc.want), err)
			}
			for i, e := range got {
				prefix := fmt.Sprintf("arm.yaml:%d:", lines[i])
				if !strings.HasPrefix(e.Error(), prefix) || !strings.Contains(e.Error(), tc.want[i]) {
					t.Errorf("error %d:\n got %s\nwant %s ... %s", i, e, prefix, tc.want[i])
				}
				var ce *config.Error
				if !errors.As(e, &ce) || ce.File != "arm.yaml" || ce.Line != lines[i] {
					t.Errorf("error %d is not a *config.Error at line %d: %#v", i, lines[i], e)
				}
			}
		})
	}
}

func TestParseEmpty(t *testing.T) {
	for _, text := range []string{"", "\n", "# only a comment\n", "---\n", "~\n"} {
		_, err := config.Parse([]byte(text), "arm.yaml")
		if err == nil || err.Error() != "arm.yaml: the file is empty" {
			t.Errorf("%q: %v", text, err)
		}
	}
}

func TestParseMinimal(t *testing.T) {
	c, err := config.Parse([]byte(minimal), "arm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.ActuatorNames(); len(got) != 1 || got[0] != "base" {
		t.Errorf("actuators %v", got)
	}
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("warnings on a minimal config: %v", w)
	}
	if got := c.Where("actuators.base.max"); got != "arm.yaml:13:10" {
		t.Errorf("Where(max) = %s", got)
	}
	if got := c.Where("actuators.base.timeout"); got != "arm.yaml:9:3" {
		t.Errorf("Where(omitted timeout) = %s, want the actuator's key", got)
	}
	if got := c.Where("http.listen"); got != "arm.yaml:2:1" {
		t.Errorf("Where(omitted section) = %s, want the document", got)
	}
}

// TestParseErrorsSorted checks that errors come in line order whatever
// order the checks run in (decoding, then validation, then secrets).
func TestParseErrorsSorted(t *testing.T) {
	text := `device: arm/1
actuators:
  base:
    kind: servo
    driver: sim
    min: 5
    max: 1
    supply: nowhere
mqtt:
  prefix: ""
journal:
  durability: sometimes
`
	_, err := config.Parse([]byte(text), "arm.yaml")
	got := errorList(err)
	want := []int{1, 6, 8, 10, 12}
	if len(got) != len(want) {
		t.Fatalf("%d errors, want %d:\n%v", len(got), len(want), err)
	}
	for i, e := range got {
		if !strings.HasPrefix(e.Error(), fmt.Sprintf("arm.yaml:%d:", want[i])) {
			t.Errorf("error %d out of order: %v", i, e)
		}
	}
}

func TestWarnings(t *testing.T) {
	text := `device: arm1
mqtt:
  broker: ssl://broker.local:8883
  username: arm1
  password: hunter2
  tls: {insecure_skip_verify: true}
  auth: {anonymous: false}
http:
  listen: 0.0.0.0:8080
  tls: {self_signed: true}
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`
	c, err := config.Parse([]byte(text), "arm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	w := strings.Join(c.Warnings(), "\n")
	for _, want := range []string{
		"arm.yaml:5:13: mqtt.password: an inline secret",
		"arm.yaml:6:31: mqtt.tls.insecure_skip_verify: the broker's certificate is not verified",
		"arm.yaml:7:21: mqtt.auth.anonymous: ignored: auth is the embedded broker's",
		"arm.yaml:9:11: http.listen: 0.0.0.0:8080 is reachable from other machines",
	} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings lack %q:\n%s", want, w)
		}
	}
	if got := c.MQTT.Password.Reveal(); got != "hunter2" {
		t.Errorf("inline password %q", got)
	}
}

func TestExternalBroker(t *testing.T) {
	for _, broker := range []string{
		"tcp://broker.local:1883", "mqtt://10.0.0.2:1883", "ssl://broker.local:8883",
		"tls://[::1]:8883", "mqtts://broker.local:8883", "ws://broker.local:80/mqtt", "wss://broker.local:443/mqtt",
	} {
		text := "device: arm1\nmqtt: {broker: \"" + broker + "\"}\nactuators:\n  base: {kind: servo, driver: sim, min: 0, max: 1}\n"
		c, err := config.Parse([]byte(text), "arm.yaml")
		if err != nil {
			t.Errorf("%s: %v", broker, err)
			continue
		}
		if c.MQTT.Embedded() || c.MQTT.Listen != "" {
			t.Errorf("%s: embedded %v, listen %q", broker, c.MQTT.Embedded(), c.MQTT.Listen)
		}
		tlsSchemes := map[string]bool{"ssl": true, "tls": true, "mqtts": true, "wss": true}
		if want := tlsSchemes[strings.SplitN(broker, ":", 2)[0]]; c.MQTT.UsesTLS() != want {
			t.Errorf("%s: UsesTLS %v", broker, c.MQTT.UsesTLS())
		}
	}
}

func TestKindDefaults(t *testing.T) {
	text := `device: arm1
actuators:
  relay: {kind: digital, driver: sim, safe: {value: 0}}
  fan: {kind: pwm, driver: sim, initial: 0.5}
  kicker: {kind: pulse, driver: sim, min: 0, max: 1, safe: detach}
`
	c, err := config.Parse([]byte(text), "arm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"relay", "fan"} {
		if a := c.Actuators[name]; a.Min != 0 || a.Max != 1 || a.Section.(*config.SimActuator).Slew != 0 {
			t.Errorf("%s: %+v", name, a)
		}
	}
	if got := c.ActuatorNames(); strings.Join(got, ",") != "fan,kicker,relay" {
		t.Errorf("names %v", got)
	}
}

func TestMQTTActuators(t *testing.T) {
	text := `device: arm1
mqtt: {broker: "tcp://broker.local:1883"}
actuators:
  pump:
    kind: setpoint
    driver: mqtt
    mqtt: {set_topic: robots/arm1/pump/set, ack_topic: robots/arm1/pump/ack, state_topic: robots/arm1/pump/state}
    min: 0
    max: 100
  relay: {kind: digital, driver: mqtt, mqtt: {set_topic: relay/set, ack_topic: relay/ack}}
  fan: {kind: pwm, driver: mqtt, mqtt: {set_topic: "fan/dûty set", ack_topic: fan/ack}}
  wrist: {kind: servo, driver: mqtt, mqtt: {set_topic: wrist/set, ack_topic: wrist/ack}, min: -90, max: 90}
  kicker: {kind: pulse, driver: mqtt, mqtt: {set_topic: kick/set, ack_topic: kick/ack}, min: 0, max: 1, safe: detach}
  base: {kind: servo, driver: sim, min: 0, max: 1}
`
	c, err := config.Parse([]byte(text), "arm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := c.Actuators["pump"]
	want := config.MQTTActuator{SetTopic: "robots/arm1/pump/set", AckTopic: "robots/arm1/pump/ack", StateTopic: "robots/arm1/pump/state", User: "pump"}
	if p.Driver != "mqtt" || *p.Section.(*config.MQTTActuator) != want {
		t.Errorf("pump %+v", p)
	}
	if r := c.Actuators["relay"].Section.(*config.MQTTActuator); r.StateTopic != "" || r.AckTopic != "relay/ack" {
		t.Errorf("relay %+v", r)
	}
	if b, ok := c.Actuators["base"].Section.(*config.SimActuator); !ok {
		t.Errorf("a sim actuator has other settings %+v", c.Actuators["base"].Section)
	} else if *b != (config.SimActuator{Slew: 720}) {
		t.Errorf("base %+v", b)
	}
	if got := c.Where("actuators.pump.mqtt.ack_topic"); !strings.HasPrefix(got, "arm.yaml:7:") {
		t.Errorf("Where(ack_topic) = %s", got)
	}
}
