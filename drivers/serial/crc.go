package serial

// CRC-16/CCITT-FALSE (also catalogued as CRC-16/IBM-3740 and
// CRC-16/AUTOSAR): polynomial 0x1021, initial value 0xFFFF, input and output
// not reflected, no final XOR. Its check value, the CRC of the nine ASCII
// bytes "123456789", is 0x29B1. The bitwise form fits a microcontroller; the
// host uses a table, and a test keeps the two equal.

// crcTable holds the CRC of every byte value, shifted into the high byte.
var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// CRC16 returns the CRC-16/CCITT-FALSE of p.
func CRC16(p []byte) uint16 { return updateCRC16(0xFFFF, p) }

func updateCRC16(crc uint16, p []byte) uint16 {
	for _, b := range p {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^b]
	}
	return crc
}
