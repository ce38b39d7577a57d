package gpio_test

import (
	"fmt"
	"time"

	"github.com/saga-supervisor/saga-supervisor/drivers/gpio"
)

// A servo's calibration maps angles onto pulse widths, and a pulse width
// within the period onto periph's duty cycle.
func ExampleServoConfig_PulseFor() {
	cfg := gpio.ServoConfig{
		MinPulse: 500 * time.Microsecond, MaxPulse: 2500 * time.Microsecond,
		MinAngle: -90, MaxAngle: 90,
	}
	for _, angle := range []float64{-90, 0, 45, 90, 120} {
		w, err := cfg.PulseFor(angle)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(angle, w, int32(gpio.DutyFor(w, gpio.DefaultPeriod)))
	}
	// Output:
	// -90 500µs 419430
	// 0 1.5ms 1258291
	// 45 2ms 1677722
	// 90 2.5ms 2097152
	// gpio: invalid value: angle 120 outside -90..90
}

// Wiring a Raspberry Pi: a relay board that energises on Low, an e-stop,
// and a servo on the kernel's PWM (Pi 5, no root needed).
func Example() {
	relay, err := gpio.OpenOutput(gpio.OutputConfig{Pin: "GPIO17", ActiveLow: true})
	if err != nil {
		fmt.Println(err) // on a machine without GPIO: pin not found
		return
	}
	_ = relay
	stop, err := gpio.OpenEStop(gpio.EStopConfig{Pin: "GPIO27", OnPress: func() { /* supervisor halt */ }})
	defer stop.Close()
	if err != nil {
		fmt.Println(err)
		return
	}
	servo, err := gpio.OpenSysfsServo(gpio.SysfsConfig{Chip: 0, Channel: 0}, gpio.ServoConfig{
		MinPulse: 500 * time.Microsecond, MaxPulse: 2500 * time.Microsecond, MinAngle: 0, MaxAngle: 180,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = servo
}
