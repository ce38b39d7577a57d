package cli

import "strings"

// ShellQuote returns s as one word of a POSIX shell command line: as it
// is when it holds only characters no shell treats specially, in single
// quotes otherwise (a single quote inside closed, escaped, reopened).
// Commands the program prints for a user to run quote their paths with it,
// so they work as printed.
func ShellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
