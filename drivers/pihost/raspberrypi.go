//go:build arm || arm64

package pihost

import (
	_ "periph.io/x/host/v3/bcm283x" // the Pi's SoC: memory-mapped GPIO, pin functions
	_ "periph.io/x/host/v3/rpi"     // the Pi's header pin names
)
