package serial

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

// Defaults of Config.
const (
	DefaultBaud              = 115200
	DefaultLinkTimeout       = 500 * time.Millisecond
	DefaultAckTimeout        = 50 * time.Millisecond
	DefaultRetries           = 3
	DefaultWindow            = 4
	DefaultHaltTimeout       = 500 * time.Millisecond
	DefaultReconnectInterval = 200 * time.Millisecond
)

// Opener opens the byte stream to the MCU: a serial port, or in tests one
// end of a net.Pipe. It is called again after the stream fails.
type Opener func(ctx context.Context) (io.ReadWriteCloser, error)

// Config describes one serial link to one MCU. Exactly one way to find the
// port is given: Port, or VID and PID (with SerialNumber to tell boards of
// the same kind apart), or Opener.
type Config struct {
	// Name names the link in errors and logs (default: the port, or
	// "vid:pid").
	Name string
	// Port is the device path, e.g. /dev/ttyACM0 or a /dev/serial/by-id
	// link. It is opened again by name after a reconnect.
	Port string
	// VID and PID are the USB vendor and product ids as hex digits
	// ("2341", "0043"; compared case-insensitively). The port is looked up
	// with go.bug.st/serial/enumerator at every (re)connect, so the board
	// is found again under whatever name the kernel gives it. If several
	// ports match, none is opened.
	VID, PID string
	// SerialNumber, if set, must equal the USB serial number.
	SerialNumber string
	// Baud is the line speed (default DefaultBaud). Mode is 8N1.
	Baud int

	// LinkTimeout: with no valid frame from the MCU for this long the link
	// is lost: Set fails in doubt, ReadBack, Volts and Ready report
	// ErrLinkLost, and a new session is sought (default
	// DefaultLinkTimeout).
	LinkTimeout time.Duration
	// AckTimeout is how long a request waits for its answer before it is
	// sent again (default DefaultAckTimeout). It must exceed the round
	// trip, including the longest MCU frame that may be on the line ahead
	// of the answer: a 200-byte telemetry frame takes 18 ms at 115200
	// baud and 215 ms at 9600.
	AckTimeout time.Duration
	// Retries is how many times an unanswered request is sent again
	// (default DefaultRetries; NoRetries for none). A request still
	// unanswered after that ends the session.
	Retries int
	// Window is how many requests may be in flight (1..MaxWindow, default
	// DefaultWindow). The MCU's own window (HELLO_ACK) caps it.
	Window int
	// Heartbeat is how long the host may stay silent before it sends PING
	// (default and upper bound: a quarter of the smaller of LinkTimeout and
	// the MCU's max_duration, so three lost heartbeats in a row trip
	// neither watchdog).
	Heartbeat time.Duration
	// HaltTimeout bounds Halt (default DefaultHaltTimeout).
	HaltTimeout time.Duration
	// ReconnectInterval is the pause between attempts to open the port
	// (default DefaultReconnectInterval).
	ReconnectInterval time.Duration
	// FrameGap: a partial frame followed by this much silence is given up
	// and the hunt for a sync byte resumes after its first byte (default:
	// 30 byte times at Baud, at least 20 ms).
	FrameGap time.Duration

	// Expect is what the configuration says of the MCU's channels that
	// actuators use. At the start of every session the link checks each
	// against the MCU: the channel must exist (HELLO_ACK), and where the
	// MCU answers DESCRIBE its kind, polarity and range must agree. Until
	// the check is done the link is not ready and Set waits; after a
	// mismatch it stays not ready (CodeTable) and Set is refused, sending
	// nothing, until a new session passes. An MCU that does not know
	// DESCRIBE (NAK UNSUPPORTED) is checked by its channel count alone,
	// and the link logs that it relies on the config for the rest.
	Expect []Expect

	// Opener, if set, replaces opening Port or VID/PID.
	Opener Opener
	// Logger receives link events (nil: discard).
	Logger *slog.Logger
}

// Expect is what the configuration says of one MCU channel an actuator
// uses (Config.Expect).
type Expect struct {
	// Actuator names the actuator, for errors and logs.
	Actuator string
	// Channel is the MCU's channel number.
	Channel int
	// Kind is the actuator's kind: the MCU's channel must be of a kind
	// that drives it (a servo channel for a servo; digital for digital and
	// pulse; pwm; setpoint). Empty: any.
	Kind actuators.Kind
	// ActiveLow must equal the MCU's polarity for the channel. The host
	// sends logical values either way (1 is on); the MCU applies the
	// polarity, and this says which table the config was written for.
	ActiveLow bool
	// Min and Max are the values the actuator may be set to, in its unit:
	// the MCU's range for the channel must cover them.
	Min, Max float64
	// Tolerance is the channel's (WithTolerance): a quantising channel
	// without one is worth a warning.
	Tolerance float64
}

// NoRetries, as Config.Retries, disables retransmission.
const NoRetries = -1

// withDefaults checks c and fills in its defaults.
func (c Config) withDefaults() (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return c, errorf(CodeConfig, nil, format, args...)
	}
	switch {
	case c.Opener == nil && c.Port == "" && c.VID == "" && c.PID == "":
		return bad("no port: set Port, or VID and PID")
	case c.Opener != nil && (c.Port != "" || c.VID != "" || c.PID != ""):
		return bad("both Opener and a port are set")
	case c.Port != "" && (c.VID != "" || c.PID != "" || c.SerialNumber != ""):
		return bad("both Port and USB ids are set; choose one")
	case c.Port == "" && c.Opener == nil && (c.VID == "" || c.PID == ""):
		return bad("USB lookup needs both VID and PID")
	case c.Baud < 0, c.LinkTimeout < 0, c.AckTimeout < 0, c.Heartbeat < 0, c.HaltTimeout < 0,
		c.ReconnectInterval < 0, c.FrameGap < 0:
		return bad("negative baud or duration")
	case c.Retries < NoRetries:
		return bad("retries %d: want >= 0, or NoRetries", c.Retries)
	case c.Window < 0 || c.Window > MaxWindow:
		return bad("window %d: want 1..%d", c.Window, MaxWindow)
	}
	for _, e := range c.Expect {
		if e.Channel < 0 || e.Channel >= MaxChannels || e.Min > e.Max {
			return bad("actuator %s: channel %d, range %g..%g: want a channel 0..%d and min <= max", e.Actuator, e.Channel, e.Min, e.Max, MaxChannels-1)
		}
	}
	if c.Name == "" {
		c.Name = c.Port
		if c.Name == "" && c.VID != "" {
			c.Name = c.VID + ":" + c.PID
		}
		if c.Name == "" {
			c.Name = "mcu"
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Baud == 0 {
		c.Baud = DefaultBaud
	}
	def(&c.LinkTimeout, DefaultLinkTimeout)
	def(&c.AckTimeout, DefaultAckTimeout)
	def(&c.HaltTimeout, DefaultHaltTimeout)
	def(&c.ReconnectInterval, DefaultReconnectInterval)
	// A byte is 10 bit times on an 8N1 line.
	def(&c.FrameGap, max(20*time.Millisecond, time.Duration(30*10*int64(time.Second)/int64(c.Baud))))
	switch c.Retries {
	case 0:
		c.Retries = DefaultRetries
	case NoRetries:
		c.Retries = 0
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Heartbeat > c.LinkTimeout/4 {
		return bad("heartbeat %v exceeds a quarter of the link timeout %v", c.Heartbeat, c.LinkTimeout)
	}
	if c.AckTimeout >= c.LinkTimeout {
		return bad("ack timeout %v must be shorter than the link timeout %v", c.AckTimeout, c.LinkTimeout)
	}
	return c, nil
}
