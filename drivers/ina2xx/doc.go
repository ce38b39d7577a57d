// Package ina2xx reads Texas Instruments INA219 and INA226 current and power
// monitors over I2C, written against periph.io/x/conn/v3 from the chips'
// register maps (periph's devices module is not used).
//
// Both chips measure the bus voltage (the supply being watched) and the
// voltage across a shunt resistor. INA219.Volts and INA226.Volts return the
// bus voltage and the time of the reading, which is the supervisor's
// VoltSource; with the shunt's resistance configured, Amps returns the
// current as shunt voltage / resistance. The chips' own calibration, current
// and power registers are not used.
//
// # Registers
//
// All registers are 16 bits, big-endian. A read is one I2C transaction that
// writes the register address and reads two bytes; a write sends the address
// and the two bytes.
//
//	INA219 (no ID registers; presence is checked by reading the
//	configuration back after writing it)
//	  0x00 configuration  BRNG(13) 16/32 V, PG(12:11) shunt range 40..320 mV,
//	                      BADC(10:7), SADC(6:3) resolution/averaging, MODE(2:0)
//	  0x01 shunt voltage  signed, LSB 10 µV
//	  0x02 bus voltage    bits 15..3 in 4 mV steps, bit 1 CNVR (a conversion
//	                      finished since the power register was last read),
//	                      bit 0 OVF (math overflow)
//	  0x03 power          read only to clear CNVR
//
//	INA226
//	  0x00 configuration  AVG(11:9), VBUSCT(8:6), VSHCT(5:3), MODE(2:0)
//	  0x01 shunt voltage  signed, LSB 2.5 µV
//	  0x02 bus voltage    15 bits, LSB 1.25 mV; bit 15 is always 0
//	  0x06 mask/enable    bit 3 CVRF (conversion ready, cleared by reading),
//	                      bit 2 OVF (math overflow)
//	  0xFE manufacturer   0x5449 ("TI")
//	  0xFF die ID         0x2260
//
// # Never a frozen value
//
// Every reading is read from the chip: an I2C error is returned as an error
// (wrapping ErrBus), never as the last good value. An overflow flag, or a
// register value the chip cannot produce, is an error too. And because a
// chip that stopped converting (put in power-down by someone else, or
// wedged) would keep serving its last result, the conversion-ready flag is
// watched: if no conversion has finished for StaleAfter, readings fail with
// ErrStale. (A negative StaleAfter turns this off, for clones whose flag
// does not work.)
package ina2xx
