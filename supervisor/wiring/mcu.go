//go:build !saga_lean

package wiring

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/drivers/serial"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// mcu: outputs and supply readings of a microcontroller board on a serial
// link (the boards themselves are configured under mcus:).
func init() {
	all := []actuators.Kind{actuators.Servo, actuators.PWM, actuators.Digital, actuators.Setpoint, actuators.Pulse}
	Register(Kind{
		Config: config.Driver{Name: "mcu", Kinds: all, Section: func() any { return &MCUActuator{} }, Check: checkMCUActuator, Claims: mcuClaims,
			Supply: true, SupplySection: func() any { return &MCUSupply{} }, CheckSupply: checkMCUSupply},
		OpenActuator: openMCUActuator,
		OpenSupply:   openMCUSupply,
	})
}

// MCUActuator is an output of a microcontroller (driver: mcu): a channel
// the board drives, acknowledging each value with the one it applied.
type MCUActuator struct {
	Board   string `yaml:"board"`   // the board's name under mcus; required
	Channel int    `yaml:"channel"` // the MCU's channel number; required
	// Tolerance accepts an acknowledged value this close to the one asked
	// for (default 0: exact to the thousandth), for boards that quantise.
	Tolerance float64 `yaml:"tolerance"`
	// ActiveLow says the board drives this output active-low (on is pin
	// LOW), as its table says; default false. It changes nothing that is
	// sent (the board applies its own polarity): the supervisor checks it
	// against the board's table (DESCRIBE) at every session and refuses a
	// board that disagrees. Digital, pulse and pwm outputs only.
	ActiveLow bool `yaml:"active_low"`
}

// MCUSupply is a supply measured by a microcontroller (driver: mcu) and
// reported in its telemetry.
type MCUSupply struct {
	Board  string `yaml:"board"`  // the board's name under mcus; required
	Supply int    `yaml:"supply"` // the MCU's supply index (default 0)
}

func checkMCUActuator(c *config.Check) {
	if !c.OK("mcu") {
		return
	}
	if !c.Set("mcu") {
		c.Errorf("driver", "driver: mcu needs an mcu section with board and channel")
		return
	}
	m := c.Section.(*MCUActuator)
	checkBoard(c, m.Board)
	switch {
	case !c.Set("mcu.channel"):
		c.Errorf("mcu.channel", "required: the MCU's channel number")
	case m.Channel < 0 || m.Channel > 255:
		c.Errorf("mcu.channel", "%d is not a channel number (0..255)", m.Channel)
	}
	if m.Tolerance < 0 {
		c.Errorf("mcu.tolerance", "must not be negative")
	}
	if k := c.Actuator.Kind; m.ActiveLow && k != actuators.Digital && k != actuators.Pulse && k != actuators.PWM {
		c.Errorf("mcu.active_low", "applies to digital, pulse and pwm outputs, not %s", k)
	}
}

// mcuClaims: a channel of the board. The board's serial port is the
// board's own (mcus:), which all its channels share.
func mcuClaims(c *config.Check) []config.Resource {
	m := c.Section.(*MCUActuator)
	return []config.Resource{{Key: fmt.Sprintf("channel %d of mcus.%s", m.Channel, m.Board), Field: "mcu.channel"}}
}

func checkMCUSupply(c *config.Check) {
	if !c.OK("mcu") {
		return
	}
	s := c.Section.(*MCUSupply)
	checkBoard(c, s.Board)
	if s.Supply < 0 || s.Supply > 255 {
		c.Errorf("mcu.supply", "%d is not a supply index (0..255)", s.Supply)
	}
}

// checkBoard checks that an mcu section names a configured board.
func checkBoard(c *config.Check, board string) {
	if !c.OK("mcu.board") {
		return
	}
	if board == "" {
		c.Errorf("mcu.board", "required: the board's name under mcus")
		return
	}
	if _, ok := c.Config.MCUs[board]; !ok {
		known := "none are configured under mcus"
		if names := c.Config.MCUNames(); len(names) > 0 {
			known = "known: " + strings.Join(names, ", ")
		}
		c.Errorf("mcu.board", "unknown board %.40q (%s)", board, known)
	}
}

func openMCUActuator(e *Env, _ string, a *config.Actuator) (actuators.Driver, error) {
	m := a.Section.(*MCUActuator)
	l, err := board(e, m.Board)
	if err != nil {
		return nil, err
	}
	var opts []serial.ChannelOption
	if m.Tolerance > 0 {
		opts = append(opts, serial.WithTolerance(m.Tolerance))
	}
	return l.Channel(m.Channel, opts...)
}

func openMCUSupply(e *Env, _ string, s *config.Supply) (VoltSource, error) {
	m := s.Section.(*MCUSupply)
	l, err := board(e, m.Board)
	if err != nil {
		return nil, err
	}
	return l.Supply(m.Supply)
}

// board returns the named board's link, opening it on first use — and
// waiting briefly for the board to answer, so that crash recovery, which
// runs right after the drivers are opened, finds it. The link is watched as
// a safety input: the supervisor is not ready while it is down.
//
// The link checks the board's channel table against every actuator
// configured on it (serial.Config.Expect) at each session. A board that
// answers and disagrees now is refused here, so the supervisor does not
// start; one that disagrees later (re-flashed) keeps it not ready.
func board(e *Env, name string) (*serial.Link, error) {
	return Shared(e, "mcu "+name, func() (*serial.Link, error) {
		m := e.Config.MCUs[name]
		// Every line of the link names the board and where it is looked
		// for: its port, or its USB ids.
		where := m.Port
		if where == "" {
			where = fmt.Sprintf("usb %s:%s %s", m.USB.VID, m.USB.PID, m.USB.SerialNumber)
		}
		sc := serial.Config{Name: name, Port: m.Port, VID: m.USB.VID, PID: m.USB.PID, SerialNumber: m.USB.SerialNumber,
			Baud: m.Baud, LinkTimeout: m.LinkTimeout, AckTimeout: m.AckTimeout, Retries: m.Retries, Logger: e.Logger.With("mcu", name, "port", strings.TrimSpace(where)),
			Expect: expected(e.Config, name)}
		if m.Retries == 0 {
			sc.Retries = serial.NoRetries
		}
		l, err := serial.Open(context.Background(), sc)
		if err != nil {
			return nil, fmt.Errorf("mcu %s: %w", name, err)
		}
		wait := func() error {
			if err := waitBoard(l, BoardWait); serial.CodeOf(err) == serial.CodeTable {
				return fmt.Errorf("mcu %s: %w", name, err)
			} else if err != nil {
				// Not fatal: the link keeps trying, and the supervisor is
				// not ready (and its steps in doubt) until the board
				// answers.
				e.Logger.Warn("mcu not answering yet", "mcu", name, "port", strings.TrimSpace(where), "err", err)
			}
			return nil
		}
		if e.DeferBoardWait {
			// Left to WaitBoards; until then the link is not ready, and
			// nothing is sent to a board whose table is not yet checked.
			e.boards = append(e.boards, wait)
			e.boardNames = append(e.boardNames, name)
		} else if err := wait(); err != nil {
			l.Close()
			return nil, err
		}
		e.watch(BoardInput(name, l))
		return l, nil
	})
}

// BoardWait bounds the wait for a serial board to answer at start.
const BoardWait = 3 * time.Second

// waitBoard waits up to d for the link to be ready, and no longer once the
// board's channel table is refused: that verdict stands for the session.
func waitBoard(l *serial.Link, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), min(50*time.Millisecond, time.Until(deadline)))
		err := l.WaitReady(ctx)
		cancel()
		if err == nil || serial.CodeOf(err) == serial.CodeTable || !time.Now().Before(deadline) {
			return err
		}
	}
}

// expected lists what cfg says of board's channels: one serial.Expect per
// actuator on it.
func expected(cfg *config.Config, board string) []serial.Expect {
	var list []serial.Expect
	for _, name := range cfg.ActuatorNames() {
		a := cfg.Actuators[name]
		m, ok := a.Section.(*MCUActuator)
		if a.Driver != "mcu" || !ok || m.Board != board {
			continue
		}
		list = append(list, serial.Expect{Actuator: name, Channel: m.Channel, Kind: a.Kind, ActiveLow: m.ActiveLow,
			Min: a.Min, Max: a.Max, Tolerance: m.Tolerance})
	}
	return list
}

// BoardInput returns a board's link as a safety input: not ready while it
// is down; its counters on /metrics; the board's e-stop flag as a press.
func BoardInput(name string, l *serial.Link) Input { return mcuInput{name: name, l: l} }

type mcuInput struct {
	name string
	l    *serial.Link
}

func (m mcuInput) Name() string { return "mcu " + m.name }
func (m mcuInput) Ready() error { return m.l.Ready() }

// Link returns the link's counters.
func (m mcuInput) Link() LinkStats {
	st := m.l.Stats()
	return LinkStats{Name: m.name, Frames: st.Frames, BadCRC: st.BadCRC, Retransmits: st.Retransmits, SessionsLost: st.SessionsLost}
}

// EStopPressed reports the board's e-stop flag: an e-stop wired to the
// board, which has already put its own outputs safe.
func (m mcuInput) EStopPressed() bool { return m.l.Faults()&serial.FaultEStop != 0 }
