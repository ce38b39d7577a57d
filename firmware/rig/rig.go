// Package rig starts and drives saga-avr-rig, the emulated bench for the
// AVR firmware (docs/HIL.md, "The emulated AVR rig"): simavr runs the
// firmware's ELF in real time with UART0 on a pty, and the rig measures
// what the pins do from simavr's cycle-exact events. This package is the
// rig's Go side: it builds the rig (make avr-rig) and AVR test programs
// (avr-gcc), starts the rig, and reads and drives it over its HTTP control
// interface.
//
// The measurement is in cycles of the MCU's clock (16 MHz: 62.5 ns). Every
// event also carries its time on the machine's monotonic and real-time
// clocks: the rig keeps simulated time in step with them, so a host's
// write and a pin's change can be compared (Event.MonoNS, MonoNow).
package rig

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultPins is the firmware's pin map as the rig watches it (the
// --pins default): the two servos (OC1A, OC1B) and the PWM output (OC0B)
// as pulse trains, the digital output and the active-low relay as levels,
// the e-stop as the input the rig drives.
const DefaultPins = "PB1:wave,PB2:wave,PD5:wave,PD7:level,PB0:level,PD2:input"

// Options start a rig.
type Options struct {
	Binary string // saga-avr-rig
	ELF    string // the firmware
	// Link is a path to link the pty at (like socat's link=); "": none.
	Link string
	// Pins is the --pins list; "": DefaultPins.
	Pins string
	// ADC0mV is the voltage at ADC0 at power-on, in millivolts; nil: the
	// rig's default, 4000 (a 12 V supply through the 1:3 divider).
	ADC0mV *int
	// EStopPressed starts with the e-stop loop open.
	EStopPressed bool
	// Output, if set, receives the rig's standard error (simavr's
	// messages) and its standard output after the two lines Start reads.
	Output io.Writer
}

// Rig is a running saga-avr-rig.
type Rig struct {
	*Client
	// PTY is the host end of the serial line: the link if one was asked
	// for, else the pty's own name.
	PTY  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start starts saga-avr-rig and waits until it serves its pty and control
// interface.
func Start(opts Options) (*Rig, error) {
	args := []string{"--elf", opts.ELF, "--control", "127.0.0.1:0"}
	if opts.Link != "" {
		args = append(args, "--link", opts.Link)
	}
	if opts.Pins != "" {
		args = append(args, "--pins", opts.Pins)
	}
	if opts.ADC0mV != nil {
		args = append(args, "--adc0-mv", strconv.Itoa(*opts.ADC0mV))
	}
	if opts.EStopPressed {
		args = append(args, "--estop-pressed")
	}
	cmd := exec.Command(opts.Binary, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = opts.Output
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("rig: starting %s: %w", opts.Binary, err)
	}
	r := &Rig{cmd: cmd, done: make(chan struct{})}
	// simavr prints to standard output too ("Loaded 1368 .text..."): the
	// rig's two lines are looked for among whatever comes first.
	lines := make(chan string, 2)
	go func() {
		w := opts.Output
		if w == nil {
			w = io.Discard
		}
		br := bufio.NewReader(out)
		for seen := 0; seen < 2; {
			l, err := br.ReadString('\n')
			if err != nil {
				break
			}
			if strings.HasPrefix(l, "saga-avr-rig ") {
				lines <- strings.TrimSpace(l)
				seen++
			} else {
				io.WriteString(w, l)
			}
		}
		close(lines)
		io.Copy(w, br)
	}()
	go func() {
		r.err = cmd.Wait()
		close(r.done)
	}()
	timeout := time.After(30 * time.Second)
	for r.PTY == "" || r.Client == nil {
		select {
		case l, ok := <-lines:
			if !ok {
				r.Stop()
				return nil, fmt.Errorf("rig: %s ended before it was ready: %v", opts.Binary, r.err)
			}
			if p, ok := strings.CutPrefix(l, "saga-avr-rig pty "); ok {
				r.PTY = p
			} else if u, ok := strings.CutPrefix(l, "saga-avr-rig control on "); ok {
				r.Client = &Client{URL: u, HTTP: &http.Client{Timeout: 10 * time.Second}}
			}
		case <-timeout:
			r.Stop()
			return nil, errors.New("rig: not ready after 30s")
		}
	}
	return r, nil
}

// Stop ends the rig (SIGTERM, then SIGKILL after 5 s).
func (r *Rig) Stop() error {
	if r.Exited() {
		return nil
	}
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
		r.cmd.Process.Kill()
		<-r.done
	}
	return nil
}

// Exited reports whether the rig's process has ended.
func (r *Rig) Exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// Client speaks to a rig's control interface.
type Client struct {
	URL  string
	HTTP *http.Client
}

// Pins is GET /pins: the pins now, the line, the clock.
type Pins struct {
	Cycle     uint64 `json:"cycle"`
	Hz        uint64 `json:"hz"`
	MonoNS    int64  `json:"mono_ns"` // Cycle on the monotonic clock
	RealNS    int64  `json:"real_ns"`
	State     string `json:"state"` // running, sleeping; done or crashed: the MCU stopped
	Held      bool   `json:"held"`  // held in reset (a power cut)
	Resets    uint64 `json:"resets"`
	Slips     uint64 `json:"slips"` // times the rig gave up catching up with the clock
	SlippedNS int64  `json:"slipped_ns"`
	LagMaxNS  int64  `json:"lag_max_ns"` // the most the rig fell behind the clock
	Late2ms   uint64 `json:"late_2ms"`   // times it was more than 2 ms behind (1 ms is by design)
	CPUNS     int64  `json:"cpu_ns"`     // the rig's CPU time
	Nice      int    `json:"nice"`       // the priority it got (-10), or 0 if it could not raise it
	ADCmV     []int  `json:"adc_mv"`
	Link      Link   `json:"link"`
	EStop     EStop  `json:"estop"`
	Events    uint64 `json:"events"`
	List      []Pin  `json:"pins"`
}

// EStop is the e-stop loop.
type EStop struct {
	Pressed bool `json:"pressed"`
}

// Pin is one watched pin.
type Pin struct {
	Name         string `json:"name"`
	Role         string `json:"role"` // wave, level, input
	Level        int    `json:"level"`
	Driven       bool   `json:"driven"` // an output; else an input (hi-Z, or Pullup)
	Pullup       bool   `json:"pullup"`
	SinceCycle   uint64 `json:"since_cycle"` // the last change of level
	SinceMonoNS  int64  `json:"since_mono_ns"`
	Edges        uint64 `json:"edges"`
	RiseCycle    uint64 `json:"rise_cycle"`
	FallCycle    uint64 `json:"fall_cycle"`
	HighCycles   uint64 `json:"high_cycles"`   // the last complete high time
	PeriodCycles uint64 `json:"period_cycles"` // the last rising edge to rising edge
	// Wave is the decoded pulse train: static (a level), pending (a rise
	// not yet a pulse or a level) or pulsing, with its width and period.
	Wave       string `json:"wave"`
	WaveHigh   uint64 `json:"wave_high_cycles"`
	WavePeriod uint64 `json:"wave_period_cycles"`
	LastEvent  uint64 `json:"last_event_cycle"` // the cycle of its last event
	Compare    string `json:"compare"`          // the compare unit driving it (OC1A...), "" if none
}

// Pin returns the pin called name.
func (p Pins) Pin(name string) (Pin, bool) {
	for _, x := range p.List {
		if x.Name == name {
			return x, true
		}
	}
	return Pin{}, false
}

// Micros converts cycles to microseconds at the rig's clock.
func (p Pins) Micros(cycles uint64) float64 { return float64(cycles) * 1e6 / float64(p.Hz) }

// Link is the serial line and what its taps saw.
type Link struct {
	PTY                    string        `json:"pty"`
	Plugged                bool          `json:"plugged"`
	LineBaud               int           `json:"line_baud"`
	MCUBaud                float64       `json:"mcu_baud"` // what UBRR0/U2X0 give
	MCUFrameBits           int           `json:"mcu_frame_bits"`
	RXEN                   bool          `json:"rxen"`
	ToMCUBytes             uint64        `json:"to_mcu_bytes"`
	ToHostBytes            uint64        `json:"to_host_bytes"`
	QueuedToMCU            uint64        `json:"queued_to_mcu"`
	DroppedUnpluggedToMCU  uint64        `json:"dropped_unplugged_to_mcu"`
	DroppedUnpluggedToHost uint64        `json:"dropped_unplugged_to_host"`
	HostNotReading         uint64        `json:"host_not_reading"`
	CorruptedToMCU         uint64        `json:"corrupted_to_mcu"`
	CorruptedToHost        uint64        `json:"corrupted_to_host"`
	RefuseChannel          int           `json:"refuse_channel"`
	RefuseValue            int32         `json:"refuse_value"`
	Refused                uint64        `json:"refused"`
	RefuseMissed           uint64        `json:"refuse_missed"`
	RXDisabled             uint64        `json:"rx_disabled"`   // bytes that met RXEN0 off
	RXMaxUnread            uint64        `json:"rx_max_unread"` // most bytes waiting in the UART (the silicon holds 2)
	FramesToMCU            uint64        `json:"frames_to_mcu"`
	BadToMCU               uint64        `json:"bad_to_mcu"`
	FramesToHost           uint64        `json:"frames_to_host"`
	BadToHost              uint64        `json:"bad_to_host"`
	LastByteToMCUCycle     uint64        `json:"last_byte_to_mcu_cycle"` // the end of the last byte the MCU received
	LastByteToMCUMonoNS    int64         `json:"last_byte_to_mcu_mono_ns"`
	LastFrameToMCUCycle    uint64        `json:"last_frame_to_mcu_cycle"` // the end of the last valid frame it received
	LastFrameToMCUMonoNS   int64         `json:"last_frame_to_mcu_mono_ns"`
	Telemetries            uint64        `json:"telemetries"`
	LastTelemetryCycle     uint64        `json:"last_telemetry_cycle"`
	Faults                 int           `json:"faults"` // the last TELEMETRY's or PONG's fault flags; -1: none yet
	HelloAck               *HelloAck     `json:"hello_ack"`
	FaultChanges           []FaultChange `json:"fault_changes"`
	Silences               []Silence     `json:"silences"`
	Sets                   []Frame       `json:"sets"` // SETs the MCU received (A: channel)
	Acks                   []Frame       `json:"acks"` // SET_ACK, HALT_ACK (A: channel, B: flags), NAK (A: code, B: detail)
}

// HelloAck is the MCU's last HELLO_ACK (docs/SERIAL.md).
type HelloAck struct {
	Cycle         uint64 `json:"cycle"`
	Version       int    `json:"version"`
	Channels      int    `json:"channels"`
	Supplies      int    `json:"supplies"`
	Window        int    `json:"window"`
	MaxDurationMS int    `json:"max_duration_ms"`
	TelemetryMS   int    `json:"telemetry_ms"`
	Faults        int    `json:"faults"`
}

// FaultChange is a change of the fault flags the MCU reported.
type FaultChange struct {
	Cycle  uint64 `json:"cycle"`
	MonoNS int64  `json:"mono_ns"`
	Faults int    `json:"faults"`
}

// Silence is a time in which no valid frame reached the MCU, at least half
// its watchdog's max_duration long.
type Silence struct {
	FromCycle  uint64 `json:"from_cycle"`
	ToCycle    uint64 `json:"to_cycle"`
	FromMonoNS int64  `json:"from_mono_ns"`
	ToMonoNS   int64  `json:"to_mono_ns"`
}

// Frame is a frame a tap decoded.
type Frame struct {
	Cycle  uint64 `json:"cycle"` // its last byte's end
	MonoNS int64  `json:"mono_ns"`
	Seq    int    `json:"seq"`
	Type   int    `json:"type"`
	A      int    `json:"a"`
	B      int    `json:"b"`
	Value  int32  `json:"value"`
}

// Event is a decoded change of a pin (GET /history).
type Event struct {
	Pin    string `json:"pin"`  // "MCU" for a reset
	Kind   string `json:"kind"` // level, pulse, reset
	Cycle  uint64 `json:"cycle"`
	MonoNS int64  `json:"mono_ns"`
	RealNS int64  `json:"real_ns"`
	Level  int    `json:"level"`
	Driven bool   `json:"driven"`
	Pullup bool   `json:"pullup"`
	High   uint64 `json:"high_cycles"`   // a pulse's width
	Period uint64 `json:"period_cycles"` // a pulse's period, 0 until known
}

// History is GET /history.
type History struct {
	Lost      bool    `json:"lost"` // events since the asked cycle fell out of the rig's memory
	Events    []Event `json:"events"`
	LastReset string  `json:"last_reset"` // power-on, external, power, watchdog
}

// Pins reads the pins.
func (c *Client) Pins(ctx context.Context) (Pins, error) {
	var p Pins
	return p, c.do(ctx, http.MethodGet, "/pins", nil, &p)
}

// History reads what the pins did since cycle.
func (c *Client) History(ctx context.Context, since uint64) (History, error) {
	var h History
	return h, c.do(ctx, http.MethodGet, "/history", url.Values{"since": {strconv.FormatUint(since, 10)}}, &h)
}

// SetADC sets the voltage at ADC input ch, in millivolts.
func (c *Client) SetADC(ctx context.Context, ch, mv int) error {
	return c.do(ctx, http.MethodPost, "/adc", url.Values{"ch": {strconv.Itoa(ch)}, "mv": {strconv.Itoa(mv)}}, nil)
}

// EStop opens (pressed) or closes the e-stop loop.
func (c *Client) EStop(ctx context.Context, pressed bool) error {
	return c.do(ctx, http.MethodPost, "/estop", url.Values{"pressed": {strconv.FormatBool(pressed)}}, nil)
}

// Unplug cuts the cable.
func (c *Client) Unplug(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/unplug", nil, nil)
}

// Replug restores it.
func (c *Client) Replug(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/replug", nil, nil)
}

// Reset presses the reset button; held > 0 holds it (a power cut).
func (c *Client) Reset(ctx context.Context, held time.Duration) error {
	return c.do(ctx, http.MethodPost, "/reset", url.Values{"hold_ms": {strconv.FormatInt(held.Milliseconds(), 10)}}, nil)
}

// Directions of Corrupt.
const (
	ToMCU  = "to-mcu"
	ToHost = "to-host"
	Both   = "both"
)

// Corrupt flips the bits of mask in count bytes going dir, one in every
// every bytes.
func (c *Client) Corrupt(ctx context.Context, dir string, count, every int, mask byte) error {
	return c.do(ctx, http.MethodPost, "/corrupt", url.Values{"dir": {dir}, "count": {strconv.Itoa(count)},
		"every": {strconv.Itoa(every)}, "xor": {strconv.Itoa(int(mask))}}, nil)
}

// Refuse makes SETs to channel ch reach the MCU with a value no channel
// accepts, so that the firmware refuses them (NAK RANGE); -1 stops it.
func (c *Client) Refuse(ctx context.Context, ch int) error {
	return c.do(ctx, http.MethodPost, "/refuse", url.Values{"channel": {strconv.Itoa(ch)}}, nil)
}

// Rewrite makes SETs to channel ch reach the MCU with value milli
// (thousandths of the unit) instead of what the host sent, their CRC
// fixed: a valid frame the host never sent, as a CRC collision or a bug on
// the way would make one. -1 stops it.
func (c *Client) Rewrite(ctx context.Context, ch int, milli int32) error {
	return c.do(ctx, http.MethodPost, "/refuse", url.Values{"channel": {strconv.Itoa(ch)}, "value": {strconv.Itoa(int(milli))}}, nil)
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, out any) error {
	u := strings.TrimSuffix(c.URL, "/") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("rig: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("rig: %s %s: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("rig: %s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("rig: %s %s: %w", method, path, err)
		}
	}
	return nil
}

// MonoNow is the machine's monotonic clock in nanoseconds, the clock the
// rig's MonoNS fields are on (Go's own monotonic readings are not
// comparable across processes).
func MonoNow() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// Root finds the repository's root from the working directory (a test's
// is its package's directory).
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("rig: no go.mod above the working directory")
		}
		dir = parent
	}
}

var buildMu sync.Mutex

// Build builds saga-avr-rig at out with the Makefile's avr-rig target (its
// compiler flags are the one place they are written).
func Build(root, out string) error {
	buildMu.Lock()
	defer buildMu.Unlock()
	cmd := exec.Command("make", "--no-print-directory", "-C", root, "avr-rig", "AVR_RIG="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("rig: make avr-rig: %v\n%s", err, b)
	}
	return nil
}

// BuildAVR compiles one C file for an ATmega328P at 16 MHz with avr-gcc,
// under the house rules (C99, every warning an error).
func BuildAVR(src, out string) error {
	cmd := exec.Command("avr-gcc", "-mmcu=atmega328p", "-DF_CPU=16000000UL", "-Os", "-std=c99",
		"-Wall", "-Wextra", "-Werror", "-o", out, src)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("rig: avr-gcc %s: %v\n%s", src, err, b)
	}
	return nil
}

// Tools lists what building and running the rig needs that is missing from
// this machine, with the Debian packages that bring it.
func Tools() (missing []string) {
	for _, t := range []struct{ file, pkg string }{
		{"cc", "gcc"}, {"make", "make"}, {"avr-gcc", "gcc-avr avr-libc"},
	} {
		if _, err := exec.LookPath(t.file); err != nil {
			missing = append(missing, t.file+" ("+t.pkg+")")
		}
	}
	for _, f := range []struct{ path, pkg string }{
		{"/usr/include/simavr/sim_avr.h", "libsimavr-dev"},
		{"/usr/lib/avr/include/avr/io.h", "avr-libc"},
	} {
		if _, err := os.Stat(f.path); err != nil {
			missing = append(missing, f.path+" ("+f.pkg+")")
		}
	}
	return missing
}
