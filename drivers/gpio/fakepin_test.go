package gpio

import (
	"os"
	"strings"
	"testing"

	pgpio "periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/gpio/gpioreg"
	"periph.io/x/conn/v3/gpio/gpiotest"
	"periph.io/x/conn/v3/physic"
	"periph.io/x/host/v3"
)

// TestMain initialises periph's host drivers before any test, so that the
// first host.Init (which starts goroutines) never runs inside a synctest
// bubble. The drivers still call host.Init themselves.
func TestMain(m *testing.M) {
	if _, err := host.Init(); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}

// newPin returns periph's fake pin, registered with gpioreg under a name
// unique to the test so that the drivers find it through the same lookup
// as a real pin; it is unregistered when the test ends.
//
// Its EdgesChan is unbuffered: a send returns once WaitForEdge has taken
// the edge (and set L to it). Inside a synctest bubble WaitForEdge's
// timeout runs on the bubble's fake clock: with Clock nil gpiotest uses
// clockwork's real clock, whose After is time.After, and a timer made by a
// goroutine in the bubble belongs to the bubble.
func newPin(t *testing.T, suffix string) *gpiotest.Pin {
	t.Helper()
	p := &gpiotest.Pin{N: pinName(t, suffix), Num: -1, Fn: "fake", EdgesChan: make(chan pgpio.Level)}
	register(t, p)
	return p
}

// newPinWithoutEdges is like newPin, but In with edge detection fails on
// it, as on a pin whose driver cannot detect edges (gpiotest refuses edges
// when it has no EdgesChan).
func newPinWithoutEdges(t *testing.T, suffix string) *gpiotest.Pin {
	t.Helper()
	p := &gpiotest.Pin{N: pinName(t, suffix), Num: -1, Fn: "fake"}
	register(t, p)
	return p
}

func pinName(t *testing.T, suffix string) string {
	return "FAKE_" + strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + "_" + suffix
}

func register(t *testing.T, p pgpio.PinIO) {
	t.Helper()
	if err := gpioreg.Register(p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := gpioreg.Unregister(p.Name()); err != nil {
			t.Error(err)
		}
	})
}

// setLevel changes the level without an edge, as a missed edge (or another
// program driving the pin) would.
func setLevel(p *gpiotest.Pin, l pgpio.Level) {
	p.Lock()
	p.L = l
	p.Unlock()
}

// pwm returns the pin's PWM state.
func pwm(p *gpiotest.Pin) (pgpio.Duty, physic.Frequency) {
	p.Lock()
	defer p.Unlock()
	return p.D, p.F
}

// setPWM sets the pin's PWM state without the driver, e.g. to a sentinel
// that shows whether the driver wrote it.
func setPWM(p *gpiotest.Pin, d pgpio.Duty, f physic.Frequency) {
	p.Lock()
	p.D, p.F = d, f
	p.Unlock()
}

// failingPin exists only because gpiotest.Pin's Out and PWM always
// succeed: tests of a failing write need them to fail. Everything else is
// gpiotest's.
type failingPin struct {
	*gpiotest.Pin
	// outErr and pwmErr, when set, are returned by Out and PWM without
	// touching the pin. Set them from the test goroutine between calls.
	outErr, pwmErr error
}

func newFailingPin(t *testing.T, suffix string) *failingPin {
	t.Helper()
	p := &failingPin{Pin: &gpiotest.Pin{N: pinName(t, suffix), Num: -1, Fn: "fake"}}
	register(t, p)
	return p
}

func (p *failingPin) Out(l pgpio.Level) error {
	if p.outErr != nil {
		return p.outErr
	}
	return p.Pin.Out(l)
}

func (p *failingPin) PWM(d pgpio.Duty, f physic.Frequency) error {
	if p.pwmErr != nil {
		return p.pwmErr
	}
	return p.Pin.PWM(d, f)
}
