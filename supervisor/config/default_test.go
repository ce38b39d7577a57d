package config_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// The demo arm of cmd/saga-supervisor/internal/simarm/simarm.go, which the embedded default
// must describe exactly. (package main cannot be imported, so its table is
// restated here; when cmd builds the arm from config.Default, this test is
// what keeps the two from drifting.)
var demoJoints = []struct {
	name     string
	min, max float64
	initial  float64
	slew     float64
	safe     actuators.SafePolicy
}{
	{"base", -90, 90, 0, 720, actuators.SafePolicy{Mode: actuators.SafeHold}},
	{"elbow", 0, 135, 20, 720, actuators.SafePolicy{Mode: actuators.SafeValue, Value: 45}},
	{"gripper", 0, 60, 0, 720, actuators.SafePolicy{Mode: actuators.SafeDetach}},
	{"shoulder", 0, 120, 10, 720, actuators.SafePolicy{Mode: actuators.SafeValue, Value: 10}},
}

var demoBattery = limits.SupplySpec{
	Name: "battery", MinVolts: 6.4, MaxVolts: 8.6, HysteresisVolts: 0.2,
	Debounce: 200 * time.Millisecond, StaleAfter: 2 * time.Second, Action: limits.Halt,
}

func TestDefault(t *testing.T) {
	if _, err := config.Parse(config.DefaultYAML, config.DefaultName); err != nil {
		t.Fatalf("the embedded default does not parse:\n%v", err)
	}
	c := config.Default()
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("the default has warnings: %v", w)
	}
	if c.File() != "default.yaml" {
		t.Errorf("File() = %q", c.File())
	}

	names := c.ActuatorNames()
	if len(names) != len(demoJoints) {
		t.Fatalf("actuators %v, want the four joints of the demo arm", names)
	}
	for i, j := range demoJoints {
		if names[i] != j.name {
			t.Fatalf("actuators %v", names)
		}
		a := c.Actuators[j.name]
		wantSpec := limits.Spec{Min: j.min, Max: j.max, Supply: "battery", SupplyMinVolts: 6.6}
		if got := a.LimitsSpec(); got != wantSpec {
			t.Errorf("%s: LimitsSpec %+v, want %+v", j.name, got, wantSpec)
		}
		if a.Kind != actuators.Servo || a.Driver != "sim" || a.Section.(*config.SimActuator).Slew != j.slew || a.Initial != j.initial ||
			a.Safe != j.safe || a.Timeout != 200*time.Millisecond {
			t.Errorf("%s: %+v", j.name, a)
		}
		built := a.Actuator(j.name, nil)
		want := &actuators.Actuator{Name: j.name, Kind: actuators.Servo, Limits: wantSpec, Safe: j.safe,
			Timeout: 200 * time.Millisecond, Initial: j.initial}
		if !reflect.DeepEqual(built, want) {
			t.Errorf("%s: Actuator() = %+v, want %+v", j.name, built, want)
		}
	}

	if got := c.SupplyNames(); len(got) != 1 || got[0] != "battery" {
		t.Fatalf("supplies %v", got)
	}
	b := c.Supplies["battery"]
	if got := b.Spec("battery"); got != demoBattery {
		t.Errorf("battery spec %+v, want %+v", got, demoBattery)
	}
	if b.Driver != "sim" || b.Section.(*config.SimSupply).Volts != 7.4 {
		t.Errorf("battery %+v", b)
	}

	if c.Device != "arm1" || c.Topic() != "saga/v1/arm1" || c.MQTT.ClientID != "saga-supervisor-arm1" {
		t.Errorf("device %q topic %q client %q", c.Device, c.Topic(), c.MQTT.ClientID)
	}
	if !c.MQTT.Embedded() || c.MQTT.Listen != "127.0.0.1:1883" || c.MQTT.UsesTLS() {
		t.Errorf("mqtt %+v", c.MQTT)
	}
	if c.HTTP.Listen != "127.0.0.1:8080" || c.HTTP.ResetToken != "" {
		t.Errorf("http %+v", c.HTTP)
	}
	if c.Journal.Dir != "./saga-data/journal" || c.Sim.World != "./saga-data/world" {
		t.Errorf("journal %q world %q", c.Journal.Dir, c.Sim.World)
	}
	if got := c.Journal.WALOptions(); got != (wal.Options{SegmentSize: wal.DefaultSegmentSize, Retention: wal.Retention{MaxBytes: config.DefaultRetentionSize}}) {
		t.Errorf("WALOptions %+v", got)
	}
	wantEngine := rollback.Config{
		Durability: rollback.EveryStep, Order: rollback.Retrace, OnCompensationFailure: rollback.HaltOnFailure,
		Retries: 2, RetryBackoff: 10 * time.Millisecond, MaxSagaCommands: rollback.DefaultMaxSagaCommands,
		MaxSagasPerLease: rollback.DefaultMaxSagasPerLease,
	}
	if got := c.RollbackConfig(); !reflect.DeepEqual(got, wantEngine) {
		t.Errorf("RollbackConfig %+v, want %+v", got, wantEngine)
	}
	if c.Leases.Heartbeat() != 250*time.Millisecond {
		t.Errorf("heartbeat %v", c.Leases.Heartbeat())
	}
}

// TestDefaultIsFresh checks that callers may change what Default returns.
func TestDefaultIsFresh(t *testing.T) {
	a := config.Default()
	a.Actuators["base"] = config.Actuator{}
	a.Journal.Dir = "elsewhere"
	if b := config.Default(); b.Actuators["base"].Max != 90 || b.Journal.Dir != "./saga-data/journal" {
		t.Error("Default returned shared state")
	}
}

// TestDefaultYAMLStatesTheDefaults checks that the settings default.yaml
// writes out are the built-in defaults, so its comments tell the truth:
// a file that omits them gets the same.
func TestDefaultYAMLStatesTheDefaults(t *testing.T) {
	bare, err := config.Parse([]byte(`device: arm1
actuators:
  base: {kind: servo, driver: sim, min: -90, max: 90}
`), "bare.yaml")
	if err != nil {
		t.Fatal(err)
	}
	def := config.Default()
	for _, s := range []struct {
		name      string
		got, want any
	}{
		{"journal", bare.Journal, def.Journal},
		{"unwind", bare.Unwind, def.Unwind},
		{"leases", bare.Leases, def.Leases},
		{"mqtt", bare.MQTT, def.MQTT},
		{"http", bare.HTTP, def.HTTP},
		{"sim", bare.Sim, def.Sim},
	} {
		if !reflect.DeepEqual(s.got, s.want) {
			t.Errorf("%s: omitted gives %+v, default.yaml says %+v", s.name, s.got, s.want)
		}
	}
	a := bare.Actuators["base"]
	if a.Policy != limits.Reject || a.Safe.Mode != actuators.SafeHold || a.Timeout != actuators.DefaultTimeout ||
		a.Section.(*config.SimActuator).Slew != 720 || a.Initial != 0 || a.MaxStep != 0 || a.MaxRate != 0 || a.Supply != "" {
		t.Errorf("actuator defaults %+v", a)
	}
	s, err := config.Parse([]byte(minimal), "arm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b := s.Supplies["battery"]
	if b.Debounce != 200*time.Millisecond || b.StaleAfter != 2*time.Second || b.Action != limits.Halt ||
		b.HysteresisVolts != 0 || b.Section.(*config.SimSupply).Volts != 7.5 {
		t.Errorf("supply defaults %+v", b)
	}
}

// TestDefaultYAMLDocumentsEveryKey checks that every key the schema knows is
// mentioned in default.yaml, the file users copy and read.
func TestDefaultYAMLDocumentsEveryKey(t *testing.T) {
	text := string(config.DefaultYAML)
	var walk func(t reflect.Type)
	walk = func(typ reflect.Type) {
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !f.IsExported() || key == "" || key == "-" {
				continue
			}
			if !strings.Contains(text, key+":") && !strings.Contains(text, key+" ") {
				t.Errorf("default.yaml does not mention %s (%s.%s)", key, typ.Name(), f.Name)
			}
			switch ft := f.Type; {
			case ft.Kind() == reflect.Struct && ft.PkgPath() == typ.PkgPath():
				walk(ft)
			case ft.Kind() == reflect.Map && ft.Elem().Kind() == reflect.Struct:
				walk(ft.Elem())
			}
		}
	}
	walk(reflect.TypeOf(config.Config{}))
}
