package serial

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Frame layout (docs/SERIAL.md has the full specification):
//
//	offset  size  field
//	0       1     SYNC  0xA5
//	1       1     LEN   payload length n, 0..MaxPayload
//	2       1     SEQ   sequence number
//	3       1     TYPE  message type
//	4       n     PAYLOAD
//	4+n     2     CRC   CRC-16/CCITT-FALSE over LEN, SEQ, TYPE and PAYLOAD,
//	                    little-endian (low byte first)
const (
	Sync        byte = 0xA5 // first byte of every frame
	MaxPayload       = 200  // largest payload a frame may carry
	headerLen        = 4    // SYNC, LEN, SEQ, TYPE
	crcLen           = 2
	MinFrameLen      = headerLen + crcLen              // a frame with an empty payload
	MaxFrameLen      = headerLen + MaxPayload + crcLen // the longest frame
)

// ErrPayloadTooLong is returned when a frame would carry more than
// MaxPayload bytes.
var ErrPayloadTooLong = errors.New("serial: payload longer than MaxPayload")

// Type is a message type. Types with the high bit set are sent by the MCU,
// the others by the host.
type Type uint8

// The message types of protocol version 1.
const (
	TypeHello Type = 0x01 // host: start a session (payload Hello)
	TypeSet   Type = 0x02 // host: drive a channel (SetRequest)
	TypeHalt  Type = 0x03 // host: make a channel inert (HaltRequest)
	TypePing  Type = 0x04 // host: heartbeat (empty payload)
	// TypeDescribe asks for one channel's row of the MCU's table
	// (DescribeRequest). It is optional: an MCU that does not know it
	// answers NAK UNSUPPORTED, as protocol version 1 has every MCU answer
	// a type it does not know.
	TypeDescribe Type = 0x05

	TypeHelloAck    Type = 0x81 // MCU: session started (HelloAck)
	TypeSetAck      Type = 0x82 // MCU: SET applied (ChannelReport)
	TypeHaltAck     Type = 0x83 // MCU: HALT applied (ChannelReport)
	TypePong        Type = 0x84 // MCU: heartbeat answered (Pong)
	TypeDescribeAck Type = 0x85 // MCU: one channel described (ChannelDescription)
	TypeTelemetry   Type = 0xA0 // MCU: unsolicited state report (Telemetry)
	TypeNak         Type = 0xFF // MCU: request refused, nothing changed (Nak)
)

// FromMCU reports whether frames of this type are sent by the MCU.
func (t Type) FromMCU() bool { return t&0x80 != 0 }

// String returns the type's name from docs/SERIAL.md, or its number.
func (t Type) String() string { return nameOr(typeNames, t, "TYPE_0x%02X") }

var typeNames = map[Type]string{
	TypeHello: "HELLO", TypeSet: "SET", TypeHalt: "HALT", TypePing: "PING", TypeDescribe: "DESCRIBE",
	TypeHelloAck: "HELLO_ACK", TypeSetAck: "SET_ACK", TypeHaltAck: "HALT_ACK", TypePong: "PONG",
	TypeDescribeAck: "DESCRIBE_ACK", TypeTelemetry: "TELEMETRY", TypeNak: "NAK",
}

// nameOr returns k's name in names, or, for a value with none, the number
// formatted by unknown: a peer may send any byte.
func nameOr[K ~uint8](names map[K]string, k K, unknown string) string {
	if name, ok := names[k]; ok {
		return name
	}
	return fmt.Sprintf(unknown, uint8(k))
}

// Frame is one decoded frame.
type Frame struct {
	Seq     uint8
	Type    Type
	Payload []byte
}

// AppendBinary appends the encoded frame to b.
func (f Frame) AppendBinary(b []byte) ([]byte, error) {
	if len(f.Payload) > MaxPayload {
		return b, fmt.Errorf("%w: %d bytes", ErrPayloadTooLong, len(f.Payload))
	}
	start := len(b)
	b = append(b, Sync, byte(len(f.Payload)), f.Seq, byte(f.Type))
	b = append(b, f.Payload...)
	return binary.LittleEndian.AppendUint16(b, CRC16(b[start+1:])), nil
}

// MarshalBinary returns the encoded frame.
func (f Frame) MarshalBinary() ([]byte, error) {
	return f.AppendBinary(make([]byte, 0, MinFrameLen+len(f.Payload)))
}

// DecoderStats counts what a Decoder has seen.
type DecoderStats struct {
	Frames    uint64 // valid frames returned
	BadCRC    uint64 // candidate frames dropped for a CRC mismatch
	BadLength uint64 // candidate frames dropped for a LEN over MaxPayload
	Truncated uint64 // partial frames dropped by Abandon
	Skipped   uint64 // bytes discarded while hunting for a sync byte
}

// Decoder finds frames in a byte stream that may hold garbage, torn frames
// and corrupted ones. It hunts for the sync byte, checks LEN and the CRC,
// and on any failure drops only that sync byte and hunts again from the
// next byte, so a good frame that begins inside a bad one is still found.
// A frame that fails a check is counted and never returned.
//
// A Decoder is not safe for concurrent use. The zero value is ready.
type Decoder struct {
	buf   []byte // buf[r:] is not yet consumed
	r     int
	gap   bool // Abandon was called: no incomplete frame is waited for
	stats DecoderStats
}

// Write adds bytes received from the line. It never fails. The decoder holds
// at most one partial frame plus the bytes not yet taken by Next, so a
// caller that calls Next until it reports false after every Write keeps its
// memory bounded.
func (d *Decoder) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	d.gap = false
	if d.r > 0 {
		d.buf = d.buf[:copy(d.buf, d.buf[d.r:])]
		d.r = 0
	}
	d.buf = append(d.buf, p...)
	return len(p), nil
}

// Next returns the next valid frame, or false when the buffered bytes hold
// none yet. The frame's payload is a fresh copy.
func (d *Decoder) Next() (Frame, bool) {
	for {
		b := d.buf[d.r:]
		i := 0
		for i < len(b) && b[i] != Sync {
			i++
		}
		if i > 0 {
			d.stats.Skipped += uint64(i)
			d.drop(i)
			b = b[i:]
		}
		if len(b) < 2 {
			if d.gap && len(b) == 1 {
				d.stats.Truncated++
				d.drop(1)
			}
			d.gap = false
			return Frame{}, false
		}
		n := int(b[1])
		if n > MaxPayload {
			d.stats.BadLength++
			d.drop(1)
			continue
		}
		size := MinFrameLen + n
		if len(b) < size {
			if d.gap {
				d.stats.Truncated++
				d.drop(1)
				continue
			}
			return Frame{}, false
		}
		if CRC16(b[1:headerLen+n]) != binary.LittleEndian.Uint16(b[headerLen+n:size]) {
			d.stats.BadCRC++
			d.drop(1)
			continue
		}
		f := Frame{Seq: b[2], Type: Type(b[3]), Payload: append([]byte{}, b[headerLen:headerLen+n]...)}
		d.drop(size)
		d.stats.Frames++
		return f, true
	}
}

// Pending reports whether bytes are buffered that may still become a frame:
// a partial frame waiting for the rest.
func (d *Decoder) Pending() bool { return len(d.buf) > d.r }

// Abandon tells the decoder that the line has been quiet for longer than a
// frame takes to arrive. A sender never pauses inside a frame, so no
// incomplete frame in the buffer can be real: until the next Write, Next
// drops every one it meets (counting each as Truncated) and hunts on, and
// still returns the complete frames it finds behind them. Without this, a
// false sync byte in garbage, or a corrupted LEN, would hold back the good
// frames behind it until enough further bytes arrived to fail its CRC.
func (d *Decoder) Abandon() {
	d.gap = d.Pending()
}

// Stats returns the decoder's counters.
func (d *Decoder) Stats() DecoderStats { return d.stats }

func (d *Decoder) drop(n int) {
	d.r += n
	if d.r == len(d.buf) {
		d.buf, d.r = d.buf[:0], 0
	}
}
