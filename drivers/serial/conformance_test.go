package serial_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/actuators/actuatorstest"
	"github.com/saga-supervisor/saga-supervisor/drivers/serial"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim/mcu"
)

// ptyRig is the simulated MCU at the far end of a socat pty pair, and a
// Link on the near end: what TestOverPTY uses, one per subtest.
func ptyRig(t *testing.T) *rig {
	t.Helper()
	cable := newSocat(t) // fails in CI without socat, skips elsewhere
	m, err := mcu.New(fourChannels())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	serveMCU(t, m, cable.b)
	cfg := fastConfig()
	cfg.Port = cable.a
	cfg.AckTimeout = 60 * time.Millisecond // a tty round trip on a loaded machine
	l, err := serial.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	r := &rig{t: t, m: m, l: l}
	r.ready()
	return r
}

// channelInstance is channel ch of a fresh rig. Break unplugs the MCU (it
// hears and answers nothing: the Set runs out of retries, in doubt);
// restoring plugs it in and waits for the session. Refuse makes the MCU
// NAK the channel. Close closes the link.
func channelInstance(t *testing.T, ch int) actuatorstest.Instance {
	r := ptyRig(t)
	c := r.channel(ch)
	return actuatorstest.Instance{
		Driver: c,
		Break: func() func() {
			r.m.Unplug()
			return func() { r.m.Replug(); r.ready() }
		},
		Refuse: func() func() {
			r.m.NakChannel(ch, serial.NakFault)
			return func() { r.m.NakChannel(ch, 0) }
		},
		Close: r.l.Close,
	}
}

// Values beyond the wire encoding (±2,147,483.647) are refused before
// anything is sent.
var unencodable = []float64{math.NaN(), math.Inf(1), math.Inf(-1), 3e6, -3e6}

func TestConformanceChannel(t *testing.T) {
	base := actuatorstest.Subject{
		ReadBack: true,
		// The MCU detaches a halted channel and reports the value it
		// held; Channel.ReadBack reads that value.
		AfterHalt: actuatorstest.HaltHolds,
		Timeout:   time.Second,
		// Halt needs the MCU's HALT_ACK: it fails while unplugged.
		HaltWhileBroken: false,
		Goroutines:      4,
		Rounds:          3,
	}
	t.Run("servo", func(t *testing.T) {
		s := base
		s.New = func(t *testing.T) actuatorstest.Instance { return channelInstance(t, 0) }
		s.Kind, s.Min, s.Max = actuators.Servo, -90, 90
		s.Values = []float64{-90, 0, 23.25, 90}
		s.OutOfRange = unencodable
		actuatorstest.Run(t, s)
	})
	t.Run("limited_servo", func(t *testing.T) {
		// Channel 3 takes 10..170 only: the MCU NAKs anything else with
		// NakRange, a refusal that promises nothing moved.
		s := base
		s.New = func(t *testing.T) actuatorstest.Instance { return channelInstance(t, 3) }
		s.Kind, s.Min, s.Max = actuators.Servo, 10, 170
		s.Values = []float64{10, 90, 170}
		s.OutOfRange = append([]float64{9.999, 170.001, -90}, unencodable...)
		actuatorstest.Run(t, s)
	})
}

func TestConformanceMCUSupply(t *testing.T) {
	actuatorstest.RunSupply(t, actuatorstest.SupplySubject{
		New: func(t *testing.T) actuatorstest.SupplyInstance {
			r := ptyRig(t)
			s, err := r.l.Supply(0)
			if err != nil {
				t.Fatal(err)
			}
			return actuatorstest.SupplyInstance{
				Source: s,
				Volts:  12,
				SetVolts: func(v float64) {
					if err := r.m.SetVolts(0, v); err != nil {
						t.Error(err)
					}
				},
				// The MCU cannot read the supply: CodeNoReading.
				Fail: func() func() {
					if err := r.m.SetVoltsUnknown(0); err != nil {
						t.Fatal(err)
					}
					return func() { r.m.SetVolts(0, 12) }
				},
				Close: r.l.Close,
			}
		},
		Wait:       time.Second, // a telemetry period, over a tty
		Others:     []float64{11.7, 0, 24.5},
		Goroutines: 4,
		Rounds:     10,
	})
}
