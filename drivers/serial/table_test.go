package serial_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/drivers/serial"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim/mcu"
)

// unoBoard is the reference firmware's ATmega328P table
// (firmware/saga_mcu/src/saga_atmega328p.h) as the simulated MCU has it.
func unoBoard() mcu.Options {
	return mcu.Options{
		Channels: []mcu.ChannelSpec{
			{Kind: serial.KindServo, Pin: 9, Safe: 90, PulseMinUS: 1000, PulseMaxUS: 2000},
			{Kind: serial.KindServo, Pin: 10, Safe: 90, PulseMinUS: 1000, PulseMaxUS: 2000},
			{Kind: serial.KindPWM, Pin: 5},
			{Kind: serial.KindDigital, Pin: 7},
			{Kind: serial.KindDigital, Pin: 8, ActiveLow: true},
		},
		Supplies: []float64{12},
	}
}

// unoConfig is a configuration written for that table.
func unoConfig() []serial.Expect {
	return []serial.Expect{
		{Actuator: "pan", Channel: 0, Kind: actuators.Servo, Min: 0, Max: 180, Tolerance: 0.05},
		{Actuator: "gripper", Channel: 1, Kind: actuators.Servo, Min: 10, Max: 120, Tolerance: 0.05},
		{Actuator: "fan", Channel: 2, Kind: actuators.PWM, Min: 0, Max: 1, Tolerance: 0.003},
		{Actuator: "lamp", Channel: 3, Kind: actuators.Digital, Min: 0, Max: 1},
		{Actuator: "pump", Channel: 4, Kind: actuators.Digital, ActiveLow: true, Min: 0, Max: 1},
	}
}

// logBuffer is a logger whose lines a test can read.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func tableRig(t *testing.T, o mcu.Options, expect []serial.Expect) (*rig, *logBuffer) {
	t.Helper()
	var lb logBuffer
	cfg := fastConfig()
	cfg.Name = "uno"
	cfg.Expect = expect
	cfg.Logger = slog.New(slog.NewTextHandler(&lb, nil))
	return newRig(t, o, cfg), &lb
}

// TestTableMatches: a config written for the board's table is ready, and
// drives the active-low relay with logical values (1 on, 0 off) — the MCU
// applies the polarity: its pin goes LOW for on.
func TestTableMatches(t *testing.T) {
	r, lb := tableRig(t, unoBoard(), unoConfig())
	r.ready()
	pump := r.channel(4)
	if err := r.set(pump, 1); err != nil {
		t.Fatal(err)
	}
	if v, _ := r.m.Output(4); v != 1 || r.m.Drive(4) != 0 {
		t.Fatalf("pump on: value %v, pin %d; want 1 and LOW", v, r.m.Drive(4))
	}
	if err := r.set(pump, 0); err != nil || r.m.Drive(4) != 1 {
		t.Fatalf("pump off: %v, pin %d; want HIGH", err, r.m.Drive(4))
	}
	if !strings.Contains(lb.String(), "channel table matches the config") {
		t.Errorf("no log of the check:\n%s", lb)
	}
}

// TestTableMismatchRefused: a config whose channel numbers, polarity, kind
// or range disagree with the board's table is refused when the session
// starts — not ready, with a coded error naming each actuator, channel
// and mismatch — and no SET is sent; HALT still is.
func TestTableMismatchRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(e []serial.Expect) []serial.Expect
		want []string
	}{
		{"polarity", func(e []serial.Expect) []serial.Expect { e[4].ActiveLow = false; return e },
			[]string{"actuator pump: channel 4 (pin 8): the MCU drives it active-low (on is pin LOW); the config says mcu.active_low: false"}},
		{"polarity the other way", func(e []serial.Expect) []serial.Expect { e[3].ActiveLow = true; return e },
			[]string{"actuator lamp: channel 3 (pin 7): the MCU drives it active-high (on is pin HIGH); the config says mcu.active_low: true"}},
		{"no such channel", func(e []serial.Expect) []serial.Expect { e[4].Channel = 7; return e },
			[]string{"actuator pump: channel 7: the MCU has 5 channels (0..4)"}},
		{"swapped channels", func(e []serial.Expect) []serial.Expect { e[0].Channel, e[2].Channel = 2, 0; return e },
			[]string{"actuator pan: channel 2 (pin 5): the MCU's channel is pwm; the actuator is servo",
				"actuator fan: channel 0 (pin 9): the MCU's channel is servo; the actuator is pwm"}},
		{"range", func(e []serial.Expect) []serial.Expect { e[1].Min = -10; return e },
			[]string{"actuator gripper: channel 1 (pin 10): the MCU accepts 0..180; the config's min..max is -10..120"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, lb := tableRig(t, unoBoard(), c.edit(unoConfig()))
			eventually(t, "the table refused", func() bool { return serial.CodeOf(r.l.Ready()) == serial.CodeTable })
			err := r.l.Ready()
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Ready: %v\nwant it to say %q", err, w)
				}
			}
			if !strings.Contains(lb.String(), "nothing will be driven") {
				t.Errorf("the refusal was not logged:\n%s", lb)
			}
			for ch := range 5 {
				err := r.set(r.channel(ch), 0)
				if serial.CodeOf(err) != serial.CodeTable || !errors.Is(err, actuators.ErrNotApplied) {
					t.Errorf("set channel %d: %v; want SERIAL_TABLE, not applied", ch, err)
				}
			}
			if s := r.m.Stats(); s.Sets != 0 {
				t.Errorf("%d SETs reached the MCU", s.Sets)
			}
			if err := r.channel(4).Halt(); err != nil {
				t.Errorf("halt refused: %v", err)
			}
			if _, detached := r.m.Output(4); !detached || r.m.Drive(4) != 1 {
				t.Errorf("after halt the relay's pin is %d (detached %v); want HIGH, OFF", r.m.Drive(4), detached)
			}
		})
	}
}

// TestTableWithoutDescribe: an MCU whose firmware predates DESCRIBE NAKs it
// (UNSUPPORTED); the link says it relies on the config alone and is ready,
// but still refuses a channel the MCU does not have.
func TestTableWithoutDescribe(t *testing.T) {
	o := unoBoard()
	o.DescribeUnsupported = true
	e := unoConfig()
	e[4].ActiveLow = false // cannot be checked
	r, lb := tableRig(t, o, e)
	r.ready()
	if !strings.Contains(lb.String(), "relying on the config alone") {
		t.Errorf("the log does not say the config alone is relied on:\n%s", lb)
	}
	if err := r.set(r.channel(0), 90); err != nil {
		t.Fatal(err)
	}

	e = unoConfig()
	e[0].Channel = 9
	r, _ = tableRig(t, o, e)
	eventually(t, "the missing channel refused", func() bool { return serial.CodeOf(r.l.Ready()) == serial.CodeTable })
	if err := r.l.Ready(); !strings.Contains(err.Error(), "actuator pan: channel 9: the MCU has 5 channels") {
		t.Errorf("Ready: %v", err)
	}
}

// TestTableToleranceHint: a servo or PWM channel configured without the
// tolerance its steps need is worth a warning that says how much.
func TestTableToleranceHint(t *testing.T) {
	e := unoConfig()
	e[0].Tolerance = 0
	e[2].Tolerance = 0
	r, lb := tableRig(t, unoBoard(), e)
	r.ready()
	for _, w := range []string{"servo moves in steps of 0.09 degrees: set mcu.tolerance to 0.046", "pwm moves in steps of 0.003922 of duty: set mcu.tolerance to 0.003"} {
		if !strings.Contains(lb.String(), w) {
			t.Errorf("no warning %q:\n%s", w, lb)
		}
	}
}

// TestTableSetWaitsForCheck: a Set made as the session starts waits for
// the check, then goes.
func TestTableSetWaitsForCheck(t *testing.T) {
	r, _ := tableRig(t, unoBoard(), unoConfig())
	c := r.channel(3)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	eventually(t, "a session", func() bool { _, ok := r.l.MCU(); return ok })
	if err := c.Set(ctx, 1); err != nil {
		t.Fatal(err)
	}
}
