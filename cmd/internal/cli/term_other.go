//go:build !linux

package cli

import "os"

// isTerminal is false off Linux, where the daemon does not run: no
// progress line is drawn.
func isTerminal(*os.File) bool { return false }
