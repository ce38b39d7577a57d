//go:build !saga_lean

package wiring

import "github.com/saga-supervisor/saga-supervisor/supervisor/config"

// checkCalibration checks the calibration of a servo in section key: the
// pulse widths at the ends of its angle range. min_pulse, max_pulse,
// min_angle and max_angle are required; pulses returns what is wrong with
// the pulse widths for this driver (the key and why; "" when nothing);
// the angles must increase and hold the actuator's min and max — a limit
// outside the calibration would be a command the servo cannot be driven to.
func checkCalibration(c *config.Check, key string, minAngle, maxAngle float64, pulses func() (rel, msg string)) {
	keys := []string{"min_pulse", "max_pulse", "min_angle", "max_angle"}
	calibrated := true
	for _, k := range keys {
		if !c.Set(key + "." + k) {
			c.Errorf(key+"."+k, "required: the servo's calibration (pulse widths at the ends of its angle range)")
			calibrated = false
		}
	}
	if !calibrated || !c.OK(key+".min_pulse", key+".max_pulse", key+".min_angle", key+".max_angle") {
		return
	}
	if rel, msg := pulses(); msg != "" {
		c.Errorf(key+"."+rel, "%s", msg)
	}
	a := c.Actuator
	switch {
	case minAngle >= maxAngle:
		c.Errorf(key+".min_angle", "%g is not below max_angle %g", minAngle, maxAngle)
	case c.OK("min", "max") && (a.Min < minAngle || a.Max > maxAngle):
		c.Errorf("min", "[min, max] = [%g, %g] must lie within the calibrated angles [%g, %g]", a.Min, a.Max, minAngle, maxAngle)
	}
}

// first returns the first of rels that was written, or the last.
func first(c *config.Check, rels ...string) string {
	for _, r := range rels {
		if c.Set(r) {
			return r
		}
	}
	return rels[len(rels)-1]
}
