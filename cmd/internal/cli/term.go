package cli

import "os"

// Interactive reports whether f is a terminal a person watches, so that a
// command may redraw a progress line on it. Under CI (CI set, as every CI
// service sets it) it is false whatever f is: a log gets results, not
// carriage returns.
func Interactive(f *os.File) bool {
	if os.Getenv("CI") != "" {
		return false
	}
	return isTerminal(f)
}
