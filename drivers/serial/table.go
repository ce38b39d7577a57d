package serial

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

// The channel-table check (Config.Expect): at the start of every session
// the link compares what the configuration says of each channel an
// actuator uses with what the MCU says of it — its channel count
// (HELLO_ACK), and its row of the table (DESCRIBE) where it answers — so a
// wrong channel number or polarity is refused before anything moves,
// rather than found by a relay that clicks on at the wrong time.

// startCheckLocked begins the check of a new session: it refuses channels
// the MCU does not have at once, and queues a DESCRIBE for each of the
// others.
func (l *Link) startCheckLocked() {
	s := l.sess
	if len(l.cfg.Expect) == 0 {
		return
	}
	s.checking = true
	s.described = map[int]ChannelDescription{}
	for _, e := range l.cfg.Expect {
		if e.Channel < int(s.ack.Channels) && !slices.Contains(s.describe, e.Channel) {
			s.describe = append(s.describe, e.Channel)
		}
	}
	slices.Sort(s.describe)
	l.finishCheckLocked()
}

// describeLocked sends the next DESCRIBE requests while the window has
// room.
func (l *Link) describeLocked(now time.Time) {
	s := l.sess
	for s.checking && len(s.describe) > 0 && l.roomLocked() {
		ch := s.describe[0]
		s.describe = s.describe[1:]
		l.pending = append(l.pending, l.newRequestLocked(TypeDescribe, ch, []byte{uint8(ch)}, now))
	}
}

// onDescribeLocked takes the MCU's answer to a DESCRIBE of channel ch: a
// DESCRIBE_ACK, or a NAK (UNSUPPORTED: an MCU that does not know
// DESCRIBE). It reports false for an answer that is not one (counted
// malformed; the request stays in flight).
func (l *Link) onDescribeLocked(f Frame, ch int) bool {
	s := l.sess
	switch f.Type {
	case TypeDescribeAck:
		var d ChannelDescription
		if d.UnmarshalBinary(f.Payload) != nil || int(d.Channel) != ch {
			l.stats.Malformed++
			return false
		}
		s.described[ch] = d
	case TypeNak:
		var n Nak
		_ = n.UnmarshalBinary(f.Payload) // checked by the caller
		switch n.Code {
		case NakUnsupported:
			s.noDescribe = true
		case NakNoSession:
			// The session ends; the next one checks again.
		default:
			s.describeNak = append(s.describeNak, fmt.Sprintf("channel %d: the MCU refused DESCRIBE: %v (detail %d)", ch, n.Code, n.Detail))
		}
	}
	return true
}

// finishCheckLocked ends the check once every DESCRIBE is answered: it
// compares, and either lets the session be ready or refuses it.
func (l *Link) finishCheckLocked() {
	s := l.sess
	if s == nil || !s.checking || len(s.describe) > 0 {
		return
	}
	for _, p := range l.pending {
		if p.typ == TypeDescribe {
			return
		}
	}
	s.checking = false
	problems := append([]string{}, s.describeNak...)
	for _, e := range l.cfg.Expect {
		d, ok := s.described[e.Channel]
		switch {
		case e.Channel >= int(s.ack.Channels):
			problems = append(problems, fmt.Sprintf("actuator %s: channel %d: the MCU has %d channels (0..%d)",
				e.Actuator, e.Channel, s.ack.Channels, int(s.ack.Channels)-1))
		case ok:
			problems = append(problems, mismatches(e, d)...)
			if hint := toleranceHint(e, d); hint != "" {
				l.log.Warn("a quantising MCU channel without enough tolerance", "actuator", e.Actuator, "channel", e.Channel, "hint", hint)
			}
		}
	}
	if s.noDescribe {
		l.log.Warn("the MCU does not describe its channels (NAK UNSUPPORTED to DESCRIBE): relying on the config alone for their kind, polarity and range; only the channel count was checked")
	}
	if len(problems) > 0 {
		s.tableErr = errorf(CodeTable, nil, "%s: the MCU's channel table does not match the config: %s", l.cfg.Name, strings.Join(problems, "; "))
		if msg := s.tableErr.Error(); msg != l.tableMsg {
			l.tableMsg = msg
			l.log.Error("refusing the MCU: its channel table does not match the config; nothing will be driven", "err", s.tableErr)
		}
	} else {
		l.tableMsg = ""
		if !s.noDescribe {
			l.log.Info("the MCU's channel table matches the config", "channels", len(s.described))
		}
	}
	l.broadcastLocked()
}

// mismatches lists where the MCU's description d of a channel disagrees
// with the configuration's e.
func mismatches(e Expect, d ChannelDescription) []string {
	var p []string
	where := fmt.Sprintf("actuator %s: channel %d", e.Actuator, e.Channel)
	if d.Pin != NoPin {
		where += fmt.Sprintf(" (pin %d)", d.Pin)
	}
	if ok, known := kindDrives(d.Kind, e.Kind); !known {
		p = append(p, fmt.Sprintf("%s: the MCU reports kind %d, which this host does not know", where, uint8(d.Kind)))
	} else if !ok {
		p = append(p, fmt.Sprintf("%s: the MCU's channel is %v; the actuator is %s", where, d.Kind, e.Kind))
	}
	if low := d.Flags&DescribeActiveLow != 0; low != e.ActiveLow {
		p = append(p, fmt.Sprintf("%s: the MCU drives it %s; the config says mcu.active_low: %v", where, polarity(low), e.ActiveLow))
	}
	lo, err1 := ToMilli(e.Min)
	hi, err2 := ToMilli(e.Max)
	if err1 != nil || err2 != nil || lo < d.Min || hi > d.Max {
		p = append(p, fmt.Sprintf("%s: the MCU accepts %g..%g; the config's min..max is %g..%g", where, FromMilli(d.Min), FromMilli(d.Max), e.Min, e.Max))
	}
	return p
}

func polarity(activeLow bool) string {
	if activeLow {
		return "active-low (on is pin LOW)"
	}
	return "active-high (on is pin HIGH)"
}

// kindDrives reports whether an MCU channel of kind k can be the actuator
// kind a, and whether k is a kind this host knows.
func kindDrives(k ChannelKind, a actuators.Kind) (ok, known bool) {
	switch k {
	case KindAny:
		return true, true
	case KindServo:
		return a == "" || a == actuators.Servo, true
	case KindPWM:
		return a == "" || a == actuators.PWM, true
	case KindDigital:
		return a == "" || a == actuators.Digital || a == actuators.Pulse, true
	case KindSetpoint:
		return a == "" || a == actuators.Setpoint, true
	}
	return false, false
}

// toleranceHint says what tolerance a channel that quantises needs, when
// e's is less: a value between two steps is applied at the nearer one, and
// without the tolerance its SET_ACK fails the step as in doubt.
func toleranceHint(e Expect, d ChannelDescription) string {
	var step float64
	var unit string
	switch d.Kind {
	case KindServo:
		if d.PulseMaxUS <= d.PulseMinUS {
			return ""
		}
		step = 180 / (2 * float64(d.PulseMaxUS-d.PulseMinUS)) // 0.5 us steps
		unit = "degrees"
	case KindPWM:
		step = 1.0 / 255
		unit = "of duty"
	default:
		return ""
	}
	need := math.Ceil((step/2+0.001)*1000) / 1000
	if e.Tolerance >= need {
		return ""
	}
	return fmt.Sprintf("the MCU's %v moves in steps of %.4g %s: set mcu.tolerance to %g or more, or a value between two steps fails as out of tolerance (in doubt)",
		d.Kind, step, unit, need)
}
