// Package wiring turns a configuration's actuators, supplies and e-stop
// into drivers. Each driver kind is wired in one file of this package: it
// registers the kind's config section and check with package config, and
// how the kind's driver is opened, in one call to Register. A new kind of
// hardware is a new folder under drivers/ plus one such file.
//
// The files of hardware kinds (gpio, mcu, ina219/ina226, pca9685) carry
// the build constraint !saga_lean: `go build -tags saga_lean` leaves them
// out, and with them periph and the serial library, for a simulator or
// MQTT-only build. A config naming a kind that is not in the build is
// refused by check-config like an unknown driver.
package wiring

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// Kind is one driver kind: how its config is read (config.Driver) and how
// its drivers are opened.
type Kind struct {
	// Config registers the kind's section and check with package config.
	// Leave it zero for sim and mqtt, which package config registers
	// itself; Name must be set then.
	Config config.Driver
	Name   string

	// OpenActuator opens the driver of one actuator of this kind; its
	// section is a.Section.
	OpenActuator func(e *Env, name string, a *config.Actuator) (actuators.Driver, error)
	// OpenSupply opens the reader of one supply.
	OpenSupply func(e *Env, name string, s *config.Supply) (VoltSource, error)
	// OpenEStop opens the e-stop input (estop.driver names the kind). It
	// may return an input together with an error: an input that could not
	// be read stays watched and keeps the supervisor not ready (fail
	// closed).
	OpenEStop func(e *Env, c config.EStop) (Input, error)
	// Absent reports whether an open's error is a part that may yet
	// appear (a chip, bus or device not there) rather than a mistake in
	// the config. Such an actuator or supply is not fatal: it refuses
	// every command, keeps the supervisor not ready, and its open is
	// retried until it succeeds. Nil: every open error is fatal.
	Absent func(err error) bool
}

var kinds = struct {
	sync.RWMutex
	m map[string]Kind
}{m: map[string]Kind{}}

// Register adds a driver kind, and its config part to package config. It
// panics on a kind registered twice.
func Register(k Kind) {
	if k.Name == "" {
		k.Name = k.Config.Name
	}
	if k.Config.Name != "" {
		config.Register(k.Config)
	} else if _, ok := config.LookupDriver(k.Name); !ok && k.OpenEStop == nil {
		panic("wiring: driver " + k.Name + " has no config part")
	}
	kinds.Lock()
	defer kinds.Unlock()
	if _, dup := kinds.m[k.Name]; dup {
		panic("wiring: driver " + k.Name + " registered twice")
	}
	kinds.m[k.Name] = k
}

func lookup(name string) (Kind, bool) {
	kinds.RLock()
	defer kinds.RUnlock()
	k, ok := kinds.m[name]
	return k, ok
}

// Input is a safety input the supervisor watches (supervisor.Input).
type Input interface {
	Name() string
	Ready() error
}

// LinkStats are the counters of a board's serial link, for an Input that
// is one (its Link method): /metrics shows them.
type LinkStats struct {
	Name                                      string // the board's name under mcus
	Frames, BadCRC, Retransmits, SessionsLost uint64
}

// VoltSource reads a supply (supervisor.VoltSource).
type VoltSource interface {
	Volts() (volts float64, at time.Time, err error)
}

// Env is what a kind's Open functions are given: the configuration, a
// logger, the halt line for e-stops, and the resources several actuators
// share — a serial link, an I2C bus, a PWM board, the MQTT device link, the
// simulated world — opened once, on first use, and closed by Close in
// reverse order.
type Env struct {
	Config *config.Config
	Logger *slog.Logger
	// Halt is called when an e-stop input is pressed.
	Halt func(source, reason string)
	// BrokerUp, if set, is closed once the embedded broker listens: the
	// mqtt devices' link dials only then (drivers/mqtt LinkOptions.After).
	BrokerUp <-chan struct{}
	// DeferBoardWait: a serial board's open does not wait for the board
	// to answer; the wait is left to WaitBoards, which the daemon calls
	// once HTTP serves, so that a board missing at boot does not keep the
	// HTTP port silent for the wait.
	DeferBoardWait bool

	// mu serialises the opens: those of the start and those of parts
	// retried in the background share the resources below.
	mu         sync.Mutex
	shared     map[string]io.Closer
	closers    []io.Closer
	inputs     []Input
	retries    []io.Closer    // parts being retried: stopped first by Close
	boards     []func() error // the deferred waits (DeferBoardWait)
	boardNames []string       // their boards
}

// WaitBoards waits, all boards at once, for each serial board opened with
// DeferBoardWait to answer, as the open would have; the error is that of a
// board whose channel table the configuration contradicts. A board still
// silent is not an error (it is retried, and the supervisor not ready).
func (e *Env) WaitBoards() error {
	e.mu.Lock()
	waits := e.boards
	e.boards, e.boardNames = nil, nil
	e.mu.Unlock()
	errs := make([]error, len(waits))
	var wg sync.WaitGroup
	for i, w := range waits {
		wg.Go(func() { errs[i] = w() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// PendingBoards names the boards WaitBoards is still to wait for.
func (e *Env) PendingBoards() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.boardNames)
}

// NewEnv returns an Env for cfg. A nil logger discards.
func NewEnv(cfg *config.Config, lg *slog.Logger, halt func(source, reason string)) *Env {
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	return &Env{Config: cfg, Logger: lg, Halt: halt, shared: map[string]io.Closer{}}
}

// Shared returns the resource opened under key, opening it with open on
// first use. A failed open is not kept: the next user tries again.
func Shared[T io.Closer](e *Env, key string, open func() (T, error)) (T, error) {
	if c, ok := e.shared[key]; ok {
		return c.(T), nil
	}
	v, err := open()
	if err != nil {
		return v, err
	}
	e.shared[key] = v
	e.closers = append(e.closers, v)
	return v, nil
}

// Watch adds a safety input: the supervisor is not ready while it is not.
func (e *Env) Watch(in Input) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.watch(in)
}

// watch is Watch from within an open, which holds e.mu.
func (e *Env) watch(in Input) { e.inputs = append(e.inputs, in) }

// Inputs returns the inputs added by Watch, in order, and a part being
// retried as an input named for its actuator or supply.
func (e *Env) Inputs() []Input {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Input(nil), e.inputs...)
}

// Close stops the retries, then closes every shared resource, the last
// opened first.
func (e *Env) Close() error {
	var errs []error
	for _, r := range e.retries {
		errs = append(errs, r.Close())
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.retries = nil
	for i := len(e.closers) - 1; i >= 0; i-- {
		errs = append(errs, e.closers[i].Close())
	}
	e.closers, e.shared = nil, map[string]io.Closer{}
	return errors.Join(errs...)
}

// notBuilt is the error for a kind that is configured but not in this
// build (a saga_lean build, or a kind without that part).
func notBuilt(what, driver string) error {
	return fmt.Errorf("%s driver %q is not available in this build", what, driver)
}

// OpenActuator opens the driver of actuator name.
func OpenActuator(e *Env, name string, a *config.Actuator) (actuators.Driver, error) {
	k, ok := lookup(a.Driver)
	if !ok || k.OpenActuator == nil {
		return nil, notBuilt("actuator", a.Driver)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	d, err := k.OpenActuator(e, name, a)
	if err == nil && d == nil {
		err = fmt.Errorf("no %s driver for kind %s", a.Driver, a.Kind)
	}
	if err != nil {
		if r, ok := retryActuator(e, k, name, a, err); ok {
			return r, nil
		}
	}
	return d, err
}

// OpenSupply opens the reader of supply name.
func OpenSupply(e *Env, name string, s *config.Supply) (VoltSource, error) {
	k, ok := lookup(s.Driver)
	if !ok || k.OpenSupply == nil {
		return nil, notBuilt("supply", s.Driver)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	src, err := k.OpenSupply(e, name, s)
	if err != nil {
		if r, ok := retrySupply(e, k, name, s, err); ok {
			return r, nil
		}
	}
	return src, err
}

// OpenEStop opens the configured e-stop input; nil, nil when there is
// none.
func OpenEStop(e *Env) (Input, error) {
	c := e.Config.EStop
	if c.Driver == "" {
		return nil, nil
	}
	k, ok := lookup(c.Driver)
	if !ok || k.OpenEStop == nil {
		return nil, notBuilt("estop", c.Driver)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return k.OpenEStop(e, c)
}
