//go:build !saga_lean

package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pgpio "periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/gpio/gpioreg"
	"periph.io/x/conn/v3/gpio/gpiotest"
	"periph.io/x/conn/v3/i2c"
	"periph.io/x/conn/v3/i2c/i2creg"
	"periph.io/x/conn/v3/physic"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/drivers/pca9685/pca9685test"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// ina226 is an INA226 on a fake I2C bus: register pointer writes, register
// writes and 2-byte reads, as the chip answers them.
type ina226 struct {
	mu   sync.Mutex
	ptr  byte
	regs map[byte]uint16
}

func (c *ina226) setVolts(v float64) {
	c.mu.Lock()
	c.regs[0x02] = uint16(v / 0.00125)
	c.mu.Unlock()
}

func (c *ina226) String() string                  { return "fake-ina226-bus" }
func (c *ina226) SetSpeed(physic.Frequency) error { return nil }
func (c *ina226) Close() error                    { return nil }
func (c *ina226) Tx(addr uint16, w, r []byte) error {
	if addr != 0x41 {
		return fmt.Errorf("no device at 0x%02x", addr)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(w) > 0 {
		c.ptr = w[0]
	}
	if len(w) == 3 {
		c.regs[c.ptr] = uint16(w[1])<<8 | uint16(w[2])
	}
	if len(r) == 2 {
		v := c.regs[c.ptr]
		if c.ptr == 0x06 {
			v |= 1 << 3 // a conversion is always ready
		}
		r[0], r[1] = byte(v>>8), byte(v)
	}
	return nil
}

// pcaBus is the fake PCA9685 as an I2C bus periph's registry can open.
type pcaBus struct{ *pca9685test.Chip }

func (pcaBus) Close() error { return nil }

// periph's registries take a name once per process, so the fakes are
// registered once and each run of the test (-count) gets fresh ones: the
// pins are reset in place, and the buses' openers hand out the run's chips.
var (
	registerHardware sync.Once
	testRelay        = &gpiotest.Pin{N: "SAGA_TEST_RELAY", Num: -1}
	testEStop        = &gpiotest.Pin{N: "SAGA_TEST_ESTOP", Num: -1, EdgesChan: make(chan pgpio.Level, 16)}
	testPCA          atomic.Pointer[pca9685test.Chip]
	testINA          atomic.Pointer[ina226]
)

// TestHardwareDriversFromConfig builds a Raspberry Pi style robot from a
// config through the production path — pins found by name in periph's
// registry (periph's own fake pins), a servo on a sysfs PWM tree, a battery
// on an INA226 found through periph's I2C registry — and checks that steps
// reach the hardware (a PCA9685 servo hat on a fake I2C bus too), the
// battery gates motion, and the e-stop halts,
// blocks reset while pressed and allows it once released.
func TestHardwareDriversFromConfig(t *testing.T) {
	relay, stop := testRelay, testEStop
	relay.Lock()
	relay.L, relay.P, relay.D, relay.F, relay.EdgesChan = pgpio.Low, pgpio.PullNoChange, 0, 0, nil
	relay.Unlock()
	stop.Lock()
	stop.L, stop.P, stop.D, stop.F = pgpio.High, pgpio.PullNoChange, 0, 0
	stop.Unlock()
	for len(stop.EdgesChan) > 0 {
		<-stop.EdgesChan // an edge the last run sent and nothing took
	}
	chip := &ina226{regs: map[byte]uint16{0xFE: 0x5449, 0xFF: 0x2260}}
	chip.setVolts(12.1)
	testINA.Store(chip)
	pca := pca9685test.New(0x41)
	testPCA.Store(pca)
	registerHardware.Do(func() {
		if err := i2creg.Register("SAGA_TEST_PCA", nil, -1, func() (i2c.BusCloser, error) { return pcaBus{testPCA.Load()}, nil }); err != nil {
			t.Fatal(err)
		}
		for _, p := range []pgpio.PinIO{testRelay, testEStop} {
			if err := gpioreg.Register(p); err != nil {
				t.Fatal(err)
			}
		}
		if err := i2creg.Register("SAGA_TEST_I2C", nil, -1, func() (i2c.BusCloser, error) { return testINA.Load(), nil }); err != nil {
			t.Fatal(err)
		}
	})
	dir := t.TempDir()
	pwm := filepath.Join(dir, "pwm", "pwmchip0")
	for name, v := range map[string]string{"npwm": "2", "export": "", "unexport": "", "pwm0/period": "0", "pwm0/duty_cycle": "0", "pwm0/enable": "0", "pwm0/polarity": "normal"} {
		os.MkdirAll(filepath.Dir(filepath.Join(pwm, name)), 0o755)
		if err := os.WriteFile(filepath.Join(pwm, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	yaml := fmt.Sprintf(`
device: pi1
journal: {dir: %s}
http: {listen: ""}
sim: {world: ""}
supplies:
  battery:
    driver: ina226
    i2c: {bus: SAGA_TEST_I2C, addr: 0x41}
    min_volts: 11
    max_volts: 13
    debounce: 0s
actuators:
  pan:
    kind: servo
    driver: gpio
    gpio: {pwm: sysfs, chip: 0, channel: 0, sysfs_root: %s, min_pulse: 500us, max_pulse: 2500us, min_angle: -90, max_angle: 90}
    min: -90
    max: 90
    safe: detach
    supply: battery
  pump:
    kind: digital
    driver: gpio
    gpio: {pin: SAGA_TEST_RELAY}
    safe: {value: 0}
  tilt:
    kind: servo
    driver: pca9685
    pca9685: {bus: SAGA_TEST_PCA, addr: 0x41, channel: 3, min_pulse: 500us, max_pulse: 2500us, min_angle: -90, max_angle: 90}
    min: -90
    max: 90
    safe: detach
estop:
  driver: gpio
  pin: SAGA_TEST_ESTOP
  debounce: 5ms
  poll: 10ms
`, filepath.Join(dir, "journal"), filepath.Join(dir, "pwm"))
	cfg, err := config.Parse([]byte(yaml), "pi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTP.ResetToken = "operator-token-0123456789abcdef-test"
	b, err := FromConfig(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(b.Options)
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); b.Close() })
	if st := s.Status(); !st.Ready {
		t.Fatalf("not ready on healthy hardware: %v", st.Reasons)
	}
	do := func(format string, args ...any) api.Reply {
		req, derr := api.DecodeRequest(fmt.Appendf(nil, format, args...), 8192)
		if derr != nil {
			t.Fatal(derr)
		}
		return s.Handle(req, time.Now())
	}
	h := do(`{"id":"h","agent":"ctl","op":"hello","ttl_ms":60000}`)
	lease := fmt.Sprintf(`"lease":%q,"epoch":%d`, h.Lease, h.Epoch)
	saga := do(`{"id":"b","agent":"ctl","op":"begin",%s}`, lease).Saga
	if r := do(`{"id":"s1","agent":"ctl","op":"step",%s,"saga":%d,"actuator":"pan","value":45}`, lease, saga); !r.OK {
		t.Fatalf("step on the sysfs servo: %s %s", r.Code, r.Message)
	}
	duty, _ := os.ReadFile(filepath.Join(pwm, "pwm0", "duty_cycle"))
	if got := strings.TrimSpace(string(duty)); got != "2000000" { // 45° of -90..90 over 0.5..2.5 ms
		t.Errorf("pan at 45° wrote duty_cycle %s ns, want 2000000", got)
	}
	if r := do(`{"id":"s2","agent":"ctl","op":"step",%s,"saga":%d,"actuator":"pump","value":1}`, lease, saga); !r.OK || relay.Read() != pgpio.High {
		t.Fatalf("step on the relay: %s %s; pin %v", r.Code, r.Message, relay.Read())
	}
	if r := do(`{"id":"s2b","agent":"ctl","op":"step",%s,"saga":%d,"actuator":"tilt","value":45}`, lease, saga); !r.OK {
		t.Fatalf("step on the PCA9685 servo: %s %s", r.Code, r.Message)
	}
	// 2 ms of the 50 Hz board's 4096 counts (prescale 121 at 25 MHz): 410.
	if got, want := pca.LED(3), [4]byte{0, 0, 410 & 0xff, 410 >> 8}; got != want {
		t.Errorf("tilt at 45° left channel 3 at %v, want %v", got, want)
	}
	// A sagging battery read over I2C refuses the servo.
	chip.setVolts(10.2)
	if r := do(`{"id":"s3","agent":"ctl","op":"step",%s,"saga":%d,"actuator":"pan","value":50}`, lease, saga); r.OK || r.Code != "SUPPLY_LOW" {
		t.Fatalf("step on a sagging battery: ok=%v %s %s", r.OK, r.Code, r.Message)
	}
	chip.setVolts(12.0)

	// The e-stop: pressed (active-low) halts, and every output goes safe.
	stop.Lock()
	stop.L = pgpio.Low
	stop.Unlock()
	stop.EdgesChan <- pgpio.Low
	// The halt latches at once; the safe policies follow on the e-stop's
	// goroutine.
	waitFor(t, "the e-stop to halt and send every output to its safe policy", func() bool {
		h, _ := s.engine.Halted()
		enable, _ := os.ReadFile(filepath.Join(pwm, "pwm0", "enable"))
		return h && strings.TrimSpace(string(enable)) == "0" && relay.Read() == pgpio.Low && pca.LED(3)[3]&0x10 != 0
	})
	if err := s.Reset("operator-token-0123456789abcdef-test", "test"); err == nil {
		t.Error("reset accepted while the e-stop is still pressed")
	}
	stop.Lock()
	stop.L = pgpio.High
	stop.Unlock()
	stop.EdgesChan <- pgpio.High
	waitFor(t, "the released e-stop to be ready", func() bool {
		return s.Status().Reasons[0] == "halted: estop: e-stop pressed" && len(s.Status().Reasons) == 1
	})
	if err := s.Reset("operator-token-0123456789abcdef-test", "test"); err != nil {
		t.Fatalf("reset after release: %v", err)
	}
	if st := s.Status(); !st.Ready {
		t.Fatalf("not ready after reset: %v", st.Reasons)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
