//go:build !saga_lean

package main

import "github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/simmcu"

// hardwareCommands are the commands that link hardware packages: sim-mcu
// serves drivers/sim/mcu over drivers/serial. The saga_lean build leaves
// them out (simmcu_lean.go).
var hardwareCommands = []command{
	{name: "sim-mcu", hidden: true, run: simmcu.Run},
}
