// Package pihost initialises the periph host drivers a Raspberry Pi needs,
// and only those: the GPIO character device (gpioioctl, any Linux board,
// the Pi 5 included), sysfs (I2C buses, and GPIO on older kernels), and
// on ARM the BCM283x SoC with the Pi's header names (bcm283x, rpi;
// raspberrypi.go).
//
// periph's host.Init links the drivers of every board periph knows
// (Allwinner, AM335x, BeagleBone, C.H.I.P., ODROID-C1, Pine64) and 1-wire
// over netlink: 0.2 MB of the arm64 binary (docs/DESIGN.md, "Memory").
// On another board, pins and buses are still found through gpioioctl and
// sysfs, by their kernel names, without that board's header aliases.
package pihost

import (
	"periph.io/x/conn/v3/driver/driverreg"
	_ "periph.io/x/host/v3/gpioioctl" // /dev/gpiochip*: every Linux board
	_ "periph.io/x/host/v3/sysfs"     // /dev/i2c-*, /sys/class/gpio
)

// Init loads the drivers once (later calls are cheap), as host.Init does.
func Init() (*driverreg.State, error) { return driverreg.Init() }
