package rollback

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"testing"
)

// fullRecord sets every field, so its mask has every known bit.
func fullRecord() Record {
	return Record{Type: RecIntent, Saga: 9, Step: 2, Actuator: "elbow", Target: 1, Prior: 2, Requested: 3,
		Agent: "planner", Lease: "L", Epoch: 4, CmdID: "c", Code: "X", Message: "m", Attempt: 1, Flags: FlagClamped, UnixNano: 5}
}

// Every known field bit is written by the encoder and read back by the
// decoder: a field added to the mask but not to both halves fails here,
// not in a journal.
func TestEveryFieldBitRoundTrips(t *testing.T) {
	r := fullRecord()
	p := r.AppendEncode(nil)
	mask, _ := binary.Uvarint(p)
	if mask != fieldMask {
		t.Fatalf("a record with every field set encodes mask %#x, want fieldMask %#x", mask, uint64(fieldMask))
	}
	got, err := DecodeRecord(uint8(r.Type), p)
	if err != nil || got != r {
		t.Fatalf("round trip: %v\n got %+v\nwant %+v", err, got, r)
	}
}

// A record written by a later version — a field this decoder does not know
// (any unknown mask bit), of any width (a byte, a uint16, a uint32, a
// uint64, a uvarint, a string), anywhere in the mask — and every
// truncation of every record is refused with ErrBadRecord: never a panic,
// never a record that silently drops the field.
func TestDecodeRecordRefusesUnknownFieldsAndTruncations(t *testing.T) {
	widths := map[string][]byte{
		"none":     nil,
		"byte":     {0x7f},
		"uint16":   binary.LittleEndian.AppendUint16(nil, 0xbeef),
		"uint32":   binary.LittleEndian.AppendUint32(nil, 0xdeadbeef),
		"uint64":   binary.LittleEndian.AppendUint64(nil, math.MaxUint64),
		"uvarint":  binary.AppendUvarint(nil, 1<<40),
		"string":   appendString(nil, "a field from the future"),
		"bad len":  {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"overflow": {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
	}
	bases := append(sampleRecords(), fullRecord(), Record{Type: RecReset})
	try := func(name string, typ uint8, p []byte) {
		t.Helper()
		defer func() {
			if v := recover(); v != nil {
				t.Fatalf("%s: DecodeRecord panicked: %v (payload %x)", name, v, p)
			}
		}()
		if _, err := DecodeRecord(typ, p); !errors.Is(err, ErrBadRecord) {
			t.Fatalf("%s: err = %v, want ErrBadRecord (payload %x)", name, err, p)
		}
	}
	n := 0
	for bi, base := range bases {
		enc := base.AppendEncode(nil)
		mask, k := binary.Uvarint(enc)
		body := enc[k:]
		for bit := bits.Len64(fieldMask); bit < 64; bit++ {
			m := binary.AppendUvarint(nil, mask|1<<bit)
			for wname, w := range widths {
				// The new field's bytes where a later version would put
				// them (after the known ones), and before them.
				after := append(append(append([]byte(nil), m...), body...), w...)
				before := append(append(append([]byte(nil), m...), w...), body...)
				try(fmt.Sprintf("record %d, bit %d, %s after", bi, bit, wname), uint8(base.Type), after)
				try(fmt.Sprintf("record %d, bit %d, %s before", bi, bit, wname), uint8(base.Type), before)
				n += 2
			}
		}
		for cut := range len(enc) {
			try(fmt.Sprintf("record %d cut at %d", bi, cut), uint8(base.Type), enc[:cut])
			n++
		}
		for _, w := range widths {
			if len(w) > 0 {
				try(fmt.Sprintf("record %d with trailing bytes", bi), uint8(base.Type), append(append([]byte(nil), enc...), w...))
			}
		}
		for _, typ := range []uint8{0, uint8(maxRecordType) + 1, 255} {
			try(fmt.Sprintf("record %d as type %d", bi, typ), typ, enc)
		}
	}
	if n < 1000 {
		t.Fatalf("only %d cases", n)
	}
}
