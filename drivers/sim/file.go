package sim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"unicode/utf8"
)

// The world file is an array of fixed-size slots. Slot 0 is the header; each
// later slot holds one device, in the order devices were first made. A slot
// never moves, so recording a change is one WriteAt of one slot: cheap enough
// for every Set, and it never rewrites another device's state.
//
// slotSize divides the 4 KiB page size and slots are slot-aligned, so a slot
// never straddles two pages. A write within one page is copied into the page
// cache whole or not at all even when the writer is killed, so a SIGKILL
// cannot tear a slot; the checksums are there for every other kind of damage
// (a foreign file, truncation, a power cut, a stray edit).
//
// Header (slot 0), little-endian:
//
//	[0:8)   magic "SAGASIMW"
//	[8:12)  format version (1)
//	[12:16) slot size (128)
//	[16:20) CRC-32 (IEEE) of [0:16)
//	[20:128) zero
//
// Device slot:
//
//	[0:4)   CRC-32 (IEEE) of [4:128)
//	[4]     kind (1 servo, 2 digital, 3 setpoint, 4 pulse, 5 supply)
//	[5]     flags (bit 0: detached)
//	[6]     name length, 1..maxName
//	[7]     zero
//	[8:16)  commanded value (float64)
//	[16:24) position at [24:32) (float64)
//	[24:32) time of that position, Unix nanoseconds (int64)
//	[32:40) servo slew, units per second; 0 or +Inf: no slew limit (float64)
//	[40:48) pulse kick count (uint64)
//	[48:56) zero
//	[56:128) name, UTF-8
const (
	slotSize    = 128
	fileVersion = 1
	maxName     = slotSize - nameOff
	nameOff     = 56
	flagDetach  = 1 << 0
	// maxSlots bounds what OpenWorld reads into memory, so a huge foreign
	// file is refused rather than loaded.
	maxSlots = 1 << 16
)

// fileMagic opens every world file, so a foreign file is told apart at once.
const fileMagic = "SAGASIMW"

// ErrBadWorldFile is wrapped by every error OpenWorld returns for a file that
// is not a readable world file (foreign, truncated or damaged).
var ErrBadWorldFile = errors.New("sim: not a valid world file")

// kind is what a simulated device is. It is stored in the world file so that
// a name cannot silently change kind between processes.
type kind uint8

const (
	kindServo kind = 1 + iota
	kindDigital
	kindSetpoint
	kindPulse
	kindSupply
)

func (k kind) String() string {
	switch k {
	case kindServo:
		return "servo"
	case kindDigital:
		return "digital"
	case kindSetpoint:
		return "setpoint"
	case kindPulse:
		return "pulse"
	case kindSupply:
		return "supply"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

func (k kind) valid() bool { return k >= kindServo && k <= kindSupply }

// state is the physical state of one device: all that the world file keeps.
type state struct {
	kind      kind
	detached  bool
	commanded float64
	// from and since say where the device physically was at a moment; a
	// servo's position at any later time follows from them, the command and
	// the slew, so time passing needs no writes and no goroutine.
	from  float64
	since int64 // Unix nanoseconds by the World's clock
	slew  float64
	kicks uint64
}

func encodeHeader(b *[slotSize]byte) {
	*b = [slotSize]byte{}
	copy(b[0:8], fileMagic)
	binary.LittleEndian.PutUint32(b[8:12], fileVersion)
	binary.LittleEndian.PutUint32(b[12:16], slotSize)
	binary.LittleEndian.PutUint32(b[16:20], crc32.ChecksumIEEE(b[0:16]))
}

func checkHeader(b []byte) error {
	if len(b) < slotSize {
		return fmt.Errorf("%w: %d bytes is shorter than the header", ErrBadWorldFile, len(b))
	}
	if string(b[0:8]) != fileMagic {
		return fmt.Errorf("%w: bad magic %q (not a saga-supervisor sim world)", ErrBadWorldFile, b[0:8])
	}
	if crc32.ChecksumIEEE(b[0:16]) != binary.LittleEndian.Uint32(b[16:20]) {
		return fmt.Errorf("%w: header checksum mismatch", ErrBadWorldFile)
	}
	if v := binary.LittleEndian.Uint32(b[8:12]); v != fileVersion {
		return fmt.Errorf("%w: format version %d, this build reads %d", ErrBadWorldFile, v, fileVersion)
	}
	if s := binary.LittleEndian.Uint32(b[12:16]); s != slotSize {
		return fmt.Errorf("%w: slot size %d, want %d", ErrBadWorldFile, s, slotSize)
	}
	return nil
}

// encodeSlot fills b with the slot of one device. It writes every byte, so a
// reused buffer carries nothing over from an earlier state.
func encodeSlot(b *[slotSize]byte, name string, st *state) {
	*b = [slotSize]byte{}
	b[4] = byte(st.kind)
	if st.detached {
		b[5] |= flagDetach
	}
	b[6] = byte(len(name))
	le := binary.LittleEndian
	le.PutUint64(b[8:16], math.Float64bits(st.commanded))
	le.PutUint64(b[16:24], math.Float64bits(st.from))
	le.PutUint64(b[24:32], uint64(st.since))
	le.PutUint64(b[32:40], math.Float64bits(st.slew))
	le.PutUint64(b[40:48], st.kicks)
	copy(b[nameOff:], name)
	le.PutUint32(b[0:4], crc32.ChecksumIEEE(b[4:]))
}

// decodeSlot checks and reads one device slot. It accepts only what
// encodeSlot can produce, so damage that happens to keep the checksum valid
// still cannot feed a NaN or an unknown kind into the simulation.
func decodeSlot(b []byte) (string, state, error) {
	le := binary.LittleEndian
	if crc32.ChecksumIEEE(b[4:slotSize]) != le.Uint32(b[0:4]) {
		return "", state{}, errors.New("checksum mismatch")
	}
	st := state{
		kind:      kind(b[4]),
		detached:  b[5]&flagDetach != 0,
		commanded: math.Float64frombits(le.Uint64(b[8:16])),
		from:      math.Float64frombits(le.Uint64(b[16:24])),
		since:     int64(le.Uint64(b[24:32])),
		slew:      math.Float64frombits(le.Uint64(b[32:40])),
		kicks:     le.Uint64(b[40:48]),
	}
	n := int(b[6])
	switch {
	case !st.kind.valid():
		return "", state{}, fmt.Errorf("unknown device kind %d", b[4])
	case b[5]&^flagDetach != 0:
		return "", state{}, fmt.Errorf("unknown flags %#x", b[5])
	case n == 0 || n > maxName:
		return "", state{}, fmt.Errorf("name length %d", n)
	case !finite(st.commanded) || !finite(st.from):
		return "", state{}, errors.New("non-finite value")
	case !validSlew(st.slew):
		return "", state{}, fmt.Errorf("invalid slew %g", st.slew)
	}
	name := string(b[nameOff : nameOff+n])
	if err := checkName(name); err != nil {
		return "", state{}, err
	}
	return name, st, nil
}

// decodeFile reads a whole world file. It returns the devices in slot order.
func decodeFile(data []byte) ([]string, []state, error) {
	if err := checkHeader(data); err != nil {
		return nil, nil, err
	}
	if len(data)%slotSize != 0 {
		return nil, nil, fmt.Errorf("%w: size %d is not a whole number of %d-byte slots", ErrBadWorldFile, len(data), slotSize)
	}
	n := len(data)/slotSize - 1
	if n > maxSlots {
		return nil, nil, fmt.Errorf("%w: %d devices, more than %d", ErrBadWorldFile, n, maxSlots)
	}
	names := make([]string, 0, n)
	states := make([]state, 0, n)
	seen := make(map[string]bool, n)
	for i := range n {
		name, st, err := decodeSlot(data[(i+1)*slotSize : (i+2)*slotSize])
		if err != nil {
			return nil, nil, fmt.Errorf("%w: device slot %d: %v", ErrBadWorldFile, i, err)
		}
		if seen[name] {
			return nil, nil, fmt.Errorf("%w: device slot %d: name %q appears twice", ErrBadWorldFile, i, name)
		}
		seen[name] = true
		names = append(names, name)
		states = append(states, st)
	}
	return names, states, nil
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func validSlew(s float64) bool { return s >= 0 && !math.IsNaN(s) }

// checkName keeps names printable in one table row and storable in one slot.
func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("empty device name")
	case len(name) > maxName:
		return fmt.Errorf("device name %.20q... is longer than %d bytes", name, maxName)
	case !utf8.ValidString(name):
		return fmt.Errorf("device name %q is not UTF-8", name)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("device name %q has a control character", name)
		}
	}
	return nil
}
