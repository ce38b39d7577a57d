package serial

import "testing"

// crcBitwise is the MCU's form of the CRC (docs/SERIAL.md), kept here to
// prove the host's table gives the same answers.
func crcBitwise(p []byte) uint16 {
	crc := uint16(0xFFFF)
	for _, b := range p {
		crc ^= uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

func TestCRC16(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint16
	}{
		{"123456789", 0x29B1}, // the catalogue's check value for CRC-16/CCITT-FALSE
		{"", 0xFFFF},          // the initial value, untouched
		{"A", 0xB915},
		{"\x00", 0xE1F0},
	} {
		if got := CRC16([]byte(c.in)); got != c.want {
			t.Errorf("CRC16(%q) = %#04x, want %#04x", c.in, got, c.want)
		}
		if got := crcBitwise([]byte(c.in)); got != c.want {
			t.Errorf("bitwise CRC(%q) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	buf := make([]byte, 300)
	for i := range buf {
		buf[i] = byte(i*7 + 3)
		if a, b := CRC16(buf[:i]), crcBitwise(buf[:i]); a != b {
			t.Fatalf("len %d: table %#04x, bitwise %#04x", i, a, b)
		}
	}
}
