package cli

import (
	"os"

	"golang.org/x/sys/unix"
)

// isTerminal: a terminal answers the termios query; a pipe or file does not.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
