//go:build saga_lean

package main

// hardwareCommands is empty in the saga_lean build: it links no hardware
// package (simmcu.go).
var hardwareCommands []command
