package serial

import (
	"fmt"
	"math"
)

// Values travel as signed 32-bit integers in thousandths of the actuator's
// unit (milli-degrees, milli-duty, milli-volts), little-endian. That covers
// ±2,147,483.647 units at a resolution of 0.001, which no servo angle, duty
// cycle or setpoint we drive comes close to. math.MinInt32 is reserved:
// NoReading marks a supply the MCU cannot read.
const (
	// NoReading in a telemetry supply field means the MCU has no valid
	// reading for that supply.
	NoReading int32 = math.MinInt32
	// MaxMilli and MinMilli bound a value on the wire.
	MaxMilli int32 = math.MaxInt32
	MinMilli int32 = -math.MaxInt32
)

// ToMilli converts a value in the actuator's unit to its wire form, rounded
// to the nearest thousandth. A value that is not finite, or does not fit in
// [MinMilli, MaxMilli] after rounding, is refused with an error of code
// CodeValueRange.
func ToMilli(v float64) (int32, error) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, &Error{Code: CodeValueRange, Msg: fmt.Sprintf("value %v is not finite", v)}
	}
	m := math.Round(v * 1000)
	if m > float64(MaxMilli) || m < float64(MinMilli) {
		return 0, &Error{Code: CodeValueRange, Msg: fmt.Sprintf("value %g does not fit the wire encoding (±%g)", v, float64(MaxMilli)/1000)}
	}
	return int32(m), nil
}

// FromMilli converts a wire value to the actuator's unit.
func FromMilli(m int32) float64 { return float64(m) / 1000 }
