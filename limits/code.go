package limits

// Code says why a command or a supply refuses motion. The zero value, [OK],
// allows it. Codes appear on the wire and in the journal, so their strings
// are part of the protocol: never rename one, only add.
type Code string

// The codes. OK is the only code that allows motion.
const (
	OK Code = ""

	LimitMin  Code = "LIMIT_MIN"  // below the actuator's Min
	LimitMax  Code = "LIMIT_MAX"  // above the actuator's Max
	LimitStep Code = "LIMIT_STEP" // a larger change from the previous command than MaxStep
	LimitSlew Code = "LIMIT_SLEW" // a faster change than MaxRate
	NotFinite Code = "NOT_FINITE" // NaN or ±Inf

	SupplyLow     Code = "SUPPLY_LOW"     // the supply is below its (or the actuator's) minimum
	SupplyHigh    Code = "SUPPLY_HIGH"    // the supply is above its (or the actuator's) maximum
	SupplyUnknown Code = "SUPPLY_UNKNOWN" // the supply has never given a valid reading
	SupplyStale   Code = "SUPPLY_STALE"   // the supply's last valid reading is too old
	SupplyTripped Code = "SUPPLY_TRIPPED" // the supply tripped and is latched, though its latest reading is in range
)

// Valid reports whether c is OK or one of the codes above. A journal reader
// uses it to notice a record written by a newer version.
func (c Code) Valid() bool {
	switch c {
	case OK, LimitMin, LimitMax, LimitStep, LimitSlew, NotFinite,
		SupplyLow, SupplyHigh, SupplyUnknown, SupplyStale, SupplyTripped:
		return true
	}
	return false
}
