//go:build !saga_lean

package wiring_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"periph.io/x/conn/v3/i2c"
	"periph.io/x/conn/v3/i2c/i2creg"

	"github.com/saga-supervisor/saga-supervisor/drivers/pca9685/pca9685test"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/supervisor/wiring"
)

// pwmServo is a config with one servo on pwmchip0/pwm0 under root.
func pwmServo(t *testing.T, root string) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(head+`
actuators:
  wrist:
    kind: servo
    driver: gpio
    gpio: {pwm: sysfs, chip: 0, channel: 0, sysfs_root: `+root+`, min_pulse: 500us, max_pulse: 2500us, min_angle: -90, max_angle: 90}
    min: -80
    max: 80
`), "pi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// makeChip puts pwmchip0 with pwm0 exported under root, whole (written
// aside and renamed), as the kernel and udev leave it.
func makeChip(t *testing.T, root string) {
	t.Helper()
	stage := t.TempDir()
	for f, v := range map[string]string{"npwm": "1\n", "export": "", "unexport": "",
		"pwm0/period": "0\n", "pwm0/duty_cycle": "0\n", "pwm0/enable": "0\n"} {
		p := filepath.Join(stage, "pwmchip0", f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(filepath.Join(stage, "pwmchip0"), filepath.Join(root, "pwmchip0")); err != nil {
		t.Fatal(err)
	}
}

// TestPartMissingIsRetried: a servo whose PWM chip is not there opens as
// a stand-in that is a not-ready input naming the chip, refuses commands
// without touching anything (ErrNotApplied), cannot be read back; once the
// chip appears, it is attached and drives it.
func TestPartMissingIsRetried(t *testing.T) {
	root := t.TempDir()
	c := pwmServo(t, root)
	e := wiring.NewEnv(c, nil, nil)
	t.Cleanup(func() { e.Close() })
	a := c.Actuators["wrist"]
	d, err := wiring.OpenActuator(e, "wrist", &a)
	if err != nil {
		t.Fatalf("open with the chip absent: %v, want a stand-in", err)
	}
	ins := e.Inputs()
	if len(ins) != 1 || ins[0].Name() != "actuator wrist" {
		t.Fatalf("inputs %v, want the one of actuator wrist", ins)
	}
	in := ins[0]
	if err := in.Ready(); err == nil || !strings.Contains(err.Error(), filepath.Join(root, "pwmchip0")) {
		t.Fatalf("Ready with the chip absent: %v, want its path", err)
	}
	if err := d.Set(context.Background(), 10); !errors.Is(err, actuators.ErrNotApplied) {
		t.Errorf("Set with the chip absent: %v, want ErrNotApplied", err)
	}
	if err := d.Halt(); err == nil {
		t.Errorf("Halt with the chip absent: nil, want why it cannot")
	}
	rb := d.(actuators.ReadBacker)
	if _, err := rb.ReadBack(context.Background()); err == nil || errors.Is(err, actuators.ErrNoReading) {
		t.Errorf("ReadBack with the chip absent: %v, want a failure (recovery halts for it)", err)
	}
	if _, err := os.Stat(filepath.Join(root, "pwmchip0")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("something was created under the root: %v", err)
	}

	makeChip(t, root)
	deadline := time.Now().Add(testtool.Slow(10 * time.Second))
	for in.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not attached after the chip appeared: %v", in.Ready())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := d.Set(context.Background(), 0); err != nil {
		t.Fatalf("Set once attached: %v", err)
	}
	got, _ := os.ReadFile(filepath.Join(root, "pwmchip0", "pwm0", "duty_cycle"))
	if strings.TrimSpace(string(got)) != "1500000" {
		t.Errorf("duty_cycle %q after Set(0), want 1500000 ns", got)
	}
	if v, err := rb.ReadBack(context.Background()); err != nil || v != 0 {
		t.Errorf("ReadBack once attached: %v, %v; want 0", v, err)
	}
}

// TestCloseStopsRetries: Close stops a part's retries; it is not opened
// after.
func TestCloseStopsRetries(t *testing.T) {
	root := t.TempDir()
	c := pwmServo(t, root)
	e := wiring.NewEnv(c, nil, nil)
	a := c.Actuators["wrist"]
	if _, err := wiring.OpenActuator(e, "wrist", &a); err != nil {
		t.Fatal(err)
	}
	in := e.Inputs()[0]
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	makeChip(t, root)
	time.Sleep(3 * wiring.ReattachEvery)
	if in.Ready() == nil {
		t.Fatal("attached after Close")
	}
}

// TestConfigErrorNotRetried: a mistake in the config still fails the open.
func TestConfigErrorNotRetried(t *testing.T) {
	c := pwmServo(t, t.TempDir())
	a := c.Actuators["wrist"]
	g := *a.Section.(*wiring.GPIOActuator)
	g.MinPulse = 0 // what check-config refuses, past it
	a.Section = &g
	e := wiring.NewEnv(c, nil, nil)
	defer e.Close()
	if d, err := wiring.OpenActuator(e, "wrist", &a); err == nil {
		t.Fatalf("opened %T with a bad calibration", d)
	}
	if n := len(e.Inputs()); n != 0 {
		t.Errorf("%d inputs, want none: nothing is retried", n)
	}
}

// pluggable is a PCA9685 on an I2C bus that NAKs everything until it is
// plugged in.
type pluggable struct {
	*pca9685test.Chip
	in atomic.Bool
}

func (p *pluggable) Tx(addr uint16, w, r []byte) error {
	if !p.in.Load() {
		return pca9685test.ErrNAK
	}
	return p.Chip.Tx(addr, w, r)
}

func (p *pluggable) Close() error { return nil }

// TestI2CDeviceMissingIsRetried: a PCA9685 that does not answer at start
// (unplugged, unpowered) opens as a stand-in; once it answers it is
// attached, found through the same bus periph names, and driven. The bus
// is registered with periph's i2creg, so the wiring's own open runs; the
// chip is the in-memory one of the driver's tests.
func TestI2CDeviceMissingIsRetried(t *testing.T) {
	dev := &pluggable{Chip: pca9685test.New(0)}
	bus := "SAGATEST_" + strings.ReplaceAll(t.Name(), "/", "_")
	if err := i2creg.Register(bus, nil, -1, func() (i2c.BusCloser, error) { return dev, nil }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { i2creg.Unregister(bus) })
	c, err := config.Parse([]byte(head+`
actuators:
  pan:
    kind: servo
    driver: pca9685
    pca9685: {bus: `+bus+`, channel: 3, min_pulse: 500us, max_pulse: 2500us, min_angle: -90, max_angle: 90}
    min: -80
    max: 80
`), "pi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e := wiring.NewEnv(c, nil, nil)
	t.Cleanup(func() { e.Close() })
	a := c.Actuators["pan"]
	d, err := wiring.OpenActuator(e, "pan", &a)
	if err != nil {
		t.Fatalf("open with the board silent: %v, want a stand-in", err)
	}
	in := e.Inputs()[0]
	if err := in.Ready(); err == nil || !strings.Contains(err.Error(), "no acknowledge") {
		t.Fatalf("Ready with the board silent: %v, want the bus's error", err)
	}
	if err := d.Set(context.Background(), 10); !errors.Is(err, actuators.ErrNotApplied) {
		t.Errorf("Set with the board silent: %v, want ErrNotApplied", err)
	}
	dev.in.Store(true)
	deadline := time.Now().Add(testtool.Slow(10 * time.Second))
	for in.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not attached after the board answered: %v", in.Ready())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if led := dev.LED(3); led != [4]byte{0, 0, 0, 0x10} {
		t.Errorf("channel 3 is %x once attached, want full off (untouched)", led)
	}
	if err := d.Set(context.Background(), 0); err != nil {
		t.Fatalf("Set once attached: %v", err)
	}
	if led := dev.LED(3); led == [4]byte{0, 0, 0, 0x10} {
		t.Errorf("channel 3 still full off after Set(0)")
	}
}
