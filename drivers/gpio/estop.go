package gpio

import (
	"fmt"
	"sync"
	"time"

	pgpio "periph.io/x/conn/v3/gpio"
)

// Defaults of EStopConfig.
const (
	DefaultDebounce = 20 * time.Millisecond
	DefaultPoll     = 50 * time.Millisecond
)

// unstableAfter is how many debounce intervals a line may keep changing
// before it is taken as pressed.
const unstableAfter = 10

// EStopConfig describes an emergency-stop input.
type EStopConfig struct {
	// Pin is the periph pin name, number or alias, e.g. "GPIO27".
	Pin string
	// ActiveHigh means pressed reads High. The default, active-low, means
	// pressed reads Low. See the package documentation for the wiring that
	// also stops on a cut wire.
	ActiveHigh bool
	// Pull is the input's pull resistor. The zero value (PullNoChange)
	// means a pull towards released: up when active-low, down when
	// active-high. Use pgpio.Float with an external resistor.
	Pull pgpio.Pull
	// Debounce is how long the line must be quiet before a change counts;
	// 0 means DefaultDebounce.
	Debounce time.Duration
	// Poll bounds the wait for an edge: the pin is read at least this often,
	// so a missed edge is caught. 0 means DefaultPoll. It also bounds how
	// long Close waits.
	Poll time.Duration
	// OnPress is called, on the watcher's goroutine, once for every
	// transition into pressed. It may block (a halt); edges arriving
	// meanwhile are read when it returns. It may be nil.
	OnPress func()
	// Retry is how often a pin that could not be found or configured is
	// tried again; 0 means never (the EStop stays faulted). Until it is
	// watched it reads as pressed. A bad configuration is never retried.
	Retry time.Duration
	// OnRetry is called, on the retrying goroutine, after every attempt
	// that Retry makes: with its error, or nil when the pin is watched at
	// last (Ready then says whether it is pressed). It may be nil.
	OnRetry func(err error)
}

// estopState is what the watcher last concluded.
type estopState int

const (
	released estopState = iota
	pressed
	faulted // the pin could not be found or configured
	closed
)

// EStop watches an emergency-stop input. Its methods are safe for concurrent
// use.
type EStop struct {
	cfg EStopConfig
	pin pgpio.PinIO

	mu    sync.Mutex
	state estopState
	err   error // why faulted or pressed
	// presses counts transitions into pressed, for status pages and tests.
	presses int

	done    chan struct{} // closed by Close
	stopped chan struct{} // closed when the watcher has returned
	once    sync.Once
}

// OpenEStop configures the e-stop pin as an input with edge detection, waits
// for the line to settle, and starts watching it.
//
// It always returns a usable EStop. If err is not nil — a bad configuration,
// a pin that cannot be found or configured — the EStop is not watching, its
// Ready returns err and Pressed reports true: the caller may stop, or run
// not-ready and show the reason. OnPress is not called for such a fault.
// With Retry set, a pin that could not be found or configured is tried
// again every Retry until Close; once it is watched, Ready and Pressed
// report its state, and a press found then calls OnPress.
func OpenEStop(cfg EStopConfig) (*EStop, error) {
	e := &EStop{cfg: cfg, done: make(chan struct{}), stopped: make(chan struct{})}
	c := &e.cfg
	if c.Debounce < 0 || c.Poll < 0 || c.Retry < 0 {
		err := fmt.Errorf("gpio: e-stop %s: %w: negative debounce, poll or retry interval", c.Pin, ErrConfig)
		e.state, e.err = faulted, err
		close(e.stopped)
		return e, err
	}
	if c.Debounce == 0 {
		c.Debounce = DefaultDebounce
	}
	if c.Poll == 0 {
		c.Poll = DefaultPoll
	}
	down, err := e.start()
	if err != nil {
		e.state, e.err = faulted, err
		if c.Retry > 0 {
			go e.retry()
		} else {
			close(e.stopped)
		}
		return e, err
	}
	if down {
		e.state = pressed
	}
	go e.watch(down)
	return e, nil
}

// retry is the goroutine that tries a faulted pin again every Retry, and
// then watches it.
func (e *EStop) retry() {
	t := time.NewTicker(e.cfg.Retry)
	defer t.Stop()
	for {
		select {
		case <-e.done:
			close(e.stopped)
			return
		case <-t.C:
		}
		down, err := e.start()
		e.mu.Lock()
		switch {
		case err != nil:
			e.err = err
		case down:
			e.state = pressed
		default:
			e.state, e.err = released, nil
		}
		e.mu.Unlock()
		if e.cfg.OnRetry != nil {
			e.cfg.OnRetry(err)
		}
		if err == nil {
			e.watch(down) // closes stopped
			return
		}
	}
}

// start finds and configures the pin and waits for the line to settle. It
// returns whether it is pressed (or unstable); when it is, e.err says why.
func (e *EStop) start() (down bool, err error) {
	c := &e.cfg
	p, err := lookup(c.Pin)
	if err != nil {
		return false, fmt.Errorf("gpio: e-stop: %w", err)
	}
	pull := c.Pull
	if pull == pgpio.PullNoChange {
		pull = pgpio.PullUp
		if c.ActiveHigh {
			pull = pgpio.PullDown
		}
	}
	if err := p.In(pull, pgpio.BothEdges); err != nil {
		return false, fmt.Errorf("gpio: e-stop %s: configure as input (%s, both edges): %w", c.Pin, pull, err)
	}
	e.pin = p
	down, stable := e.settle()
	if down = down || !stable; down {
		e.mu.Lock()
		e.err = e.pressErr(stable)
		e.mu.Unlock()
	}
	return down, nil
}

func (e *EStop) pressErr(stable bool) error {
	if !stable {
		return fmt.Errorf("gpio: e-stop %s: line unstable for %s: %w", e.cfg.Pin, unstableAfter*e.cfg.Debounce, ErrPressed)
	}
	return fmt.Errorf("gpio: e-stop %s: %w", e.cfg.Pin, ErrPressed)
}

// isPressed reads the pin.
func (e *EStop) isPressed() bool {
	return bool(e.pin.Read()) == e.cfg.ActiveHigh
}

// settle waits until the line has been quiet for Debounce and returns
// whether it is pressed then. stable is false if it kept changing for
// unstableAfter debounce intervals, or if Close was called.
func (e *EStop) settle() (down, stable bool) {
	limit := time.Now().Add(unstableAfter * e.cfg.Debounce)
	for e.pin.WaitForEdge(e.cfg.Debounce) {
		if e.closing() {
			return true, false
		}
		if !time.Now().Before(limit) {
			return true, false
		}
	}
	return e.isPressed(), true
}

func (e *EStop) closing() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// watch is the watcher goroutine. wasPressed is the settled state at start;
// if it is pressed, OnPress is due at once.
func (e *EStop) watch(wasPressed bool) {
	defer close(e.stopped)
	if wasPressed {
		e.press()
	}
	for !e.closing() {
		edge := e.pin.WaitForEdge(e.cfg.Poll)
		if e.closing() {
			return
		}
		if e.isPressed() == wasPressed && !edge {
			continue
		}
		// Something changed, or may have (an edge that is already over).
		// Only a level that holds for a quiet Debounce counts.
		down, stable := e.settle()
		if e.closing() {
			return
		}
		down = down || !stable
		switch {
		case down && !wasPressed:
			e.mu.Lock()
			e.state, e.err = pressed, e.pressErr(stable)
			e.mu.Unlock()
			e.press()
			wasPressed = true
		case !down && wasPressed:
			e.mu.Lock()
			e.state, e.err = released, nil
			e.mu.Unlock()
			wasPressed = false
		}
	}
}

func (e *EStop) press() {
	e.mu.Lock()
	e.presses++
	e.mu.Unlock()
	if e.cfg.OnPress != nil {
		e.cfg.OnPress()
	}
}

// Pressed reports whether the stop is pressed — or cannot be watched, or
// was closed: an e-stop that cannot be read counts as pressed.
func (e *EStop) Pressed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.state != released
}

// Presses returns how many times the stop has been seen pressed since
// OpenEStop.
func (e *EStop) Presses() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.presses
}

// Ready returns nil while the stop is watched and released. Otherwise it
// returns why not: the fault OpenEStop returned, an error wrapping
// ErrPressed, or ErrClosed.
func (e *EStop) Ready() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch e.state {
	case released:
		return nil
	case closed:
		return fmt.Errorf("gpio: e-stop %s: %w", e.cfg.Pin, ErrClosed)
	default:
		return e.err
	}
}

// String names the e-stop by its pin.
func (e *EStop) String() string { return "e-stop " + e.cfg.Pin }

// Close stops watching and waits for the watcher to return, at most about
// one Poll interval plus a debounce. OnPress is not called after Close
// returns; Close therefore waits for an OnPress in progress, which must not
// wait for Close. Ready then returns ErrClosed (or the fault OpenEStop
// returned). Close is idempotent.
func (e *EStop) Close() error {
	e.once.Do(func() { close(e.done) })
	<-e.stopped
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state != faulted {
		e.state = closed
	}
	return nil
}
