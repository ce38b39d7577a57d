package mcu

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/saga-supervisor/saga-supervisor/drivers/serial"
)

// The kinds' own ranges, thousandths.
const (
	servoMax = 180000
	dutyMax  = 1000
	on       = 1000
)

// typed reports whether the channel behaves as one of the reference
// firmware's kinds (servo, PWM, digital) rather than taking values as
// they are.
func (c *channel) typed() bool {
	return c.kind == serial.KindServo || c.kind == serial.KindPWM || c.kind == serial.KindDigital
}

// check refuses what the reference firmware's saga_check_config refuses,
// and fills in a typed channel's defaults.
func (c *channel) check() error {
	switch c.kind {
	case serial.KindAny, serial.KindSetpoint:
		if c.activeLow {
			return errors.New("active-low applies to PWM and digital channels")
		}
		return nil
	case serial.KindServo:
		if c.activeLow {
			return errors.New("a servo cannot be active-low")
		}
		if c.pulseMinUS == 0 && c.pulseMaxUS == 0 {
			c.pulseMinUS, c.pulseMaxUS = 1000, 2000
		}
		if c.pulseMinUS >= c.pulseMaxUS || c.pulseMaxUS-c.pulseMinUS > 5000 || c.pulseMaxUS > 20000 {
			return fmt.Errorf("servo calibration %d..%d us", c.pulseMinUS, c.pulseMaxUS)
		}
	case serial.KindPWM, serial.KindDigital:
	default:
		return fmt.Errorf("unknown kind %v", c.kind)
	}
	top := int32(dutyMax)
	if c.kind == serial.KindServo {
		top = servoMax
	}
	if c.min == 0 && c.max == 0 {
		c.max = top
	}
	switch {
	case c.quantum != 0:
		return errors.New("quantum is for KindAny and KindSetpoint channels: a typed channel quantises as its kind does")
	case c.min < 0 || c.max > top:
		return fmt.Errorf("range %d..%d outside the kind's 0..%d", c.min, c.max, top)
	case c.safeDetach && c.safe != 0:
		return errors.New("a safe-detach channel's safe value must be 0")
	case !c.safeDetach && (c.safe < c.min || c.safe > c.max || c.kind == serial.KindDigital && c.safe != 0 && c.safe != on):
		return fmt.Errorf("safe value %d outside %d..%d", c.safe, c.min, c.max)
	}
	return nil
}

// accepts reports whether SET may drive the channel to v.
func (c *channel) accepts(v int32) bool {
	if !c.typed() {
		return c.min == 0 && c.max == 0 || v >= c.min && v <= c.max
	}
	return v >= c.min && v <= c.max && (c.kind != serial.KindDigital || v == 0 || v == on)
}

func (c *channel) servoSpan() int64 { return 2 * (int64(c.pulseMaxUS) - int64(c.pulseMinUS)) }

// servoSteps is v's pulse above pulse_min, in half-microseconds, rounded.
func (c *channel) servoSteps(v int32) int64 { return (int64(v)*c.servoSpan() + servoMax/2) / servoMax }

func pwmDuty(v int32) int64 { return (int64(v)*255 + 500) / 1000 }

// quantise returns the value a typed channel takes for v, in the
// firmware's integer arithmetic (saga_core.c, saga_quantise).
func (c *channel) quantise(v int32) int32 {
	switch c.kind {
	case serial.KindServo:
		span := c.servoSpan()
		return int32((c.servoSteps(v)*servoMax + span/2) / span)
	case serial.KindPWM:
		return int32((pwmDuty(v)*1000 + 127) / 255)
	}
	return v
}

// drive returns what the pin does for the logical value asked (the
// firmware's saga_drive_for); value is what the channel reads.
func (c *channel) drive(value, asked int32, detached bool) int32 {
	switch c.kind {
	case serial.KindServo:
		if detached {
			return 0
		}
		return int32(2*int64(c.pulseMinUS) + c.servoSteps(asked))
	case serial.KindPWM:
		d := int32(0)
		if !detached {
			d = int32(pwmDuty(asked))
		}
		if c.activeLow {
			return 255 - d
		}
		return d
	case serial.KindDigital:
		level := int32(0)
		if !detached && asked != 0 {
			level = 1
		}
		if c.activeLow {
			return 1 - level
		}
		return level
	}
	if detached {
		return 0
	}
	return value
}

// describe returns the channel's DESCRIBE_ACK.
func (c *channel) describe(ch uint8) serial.ChannelDescription {
	d := serial.ChannelDescription{Channel: ch, Kind: c.kind, Pin: serial.NoPin, Min: c.min, Max: c.max, Safe: c.safe}
	if !c.typed() {
		if c.min == 0 && c.max == 0 {
			d.Min, d.Max = serial.MinMilli, serial.MaxMilli
		}
	} else {
		d.Pin = c.pin
	}
	if c.activeLow {
		d.Flags |= serial.DescribeActiveLow
	}
	if c.safeDetach {
		d.Flags |= serial.DescribeSafeDetach
		d.Safe = 0
	}
	if c.kind == serial.KindServo {
		d.PulseMinUS, d.PulseMaxUS = c.pulseMinUS, c.pulseMaxUS
	}
	return d
}

// same reports whether a request (type and payload) with the frame CRC crc
// is the one this slot answered. The payload is compared up to 8 bytes,
// the longest the firmware keeps; a longer one is no request that is acted
// on (its answer is a NAK whatever the bytes), and its CRC stands for the
// rest — as in the firmware, whose RAM has no room for it.
func (e *cached) same(req []byte, crc uint16) bool {
	const kept = 1 + 8 // type and 8 payload bytes
	if len(req) != len(e.req) || !bytes.Equal(req[:min(len(req), kept)], e.req[:min(len(e.req), kept)]) {
		return false
	}
	return len(req) <= kept || crc == e.crc
}
