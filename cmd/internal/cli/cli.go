// Package cli holds what the saga-supervisor command's subcommands share:
// an error that carries the process's exit status out of a command, flag
// sets that return errors instead of exiting, and indented text.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Command is a subcommand: it parses its arguments, writes its result to
// stdout and returns nil, an *ExitError or another error (exit status 1).
type Command func(args []string, stdout io.Writer) error

// ExitError carries a process exit code out of a command.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }

// Exit is an *ExitError with status code and a formatted message.
func Exit(code int, format string, args ...any) error {
	return &ExitError{Code: code, Err: fmt.Errorf(format, args...)}
}

// Status is the exit status of a command that returned err: 0 for nil or
// flag.ErrHelp (help was asked for), an ExitError's code, 1 otherwise.
func Status(err error) int {
	var ee *ExitError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ee):
		return ee.Code
	}
	return 1
}

// NewFlags makes a flag set that returns errors instead of exiting.
func NewFlags(name string) *flag.FlagSet {
	return flag.NewFlagSet("saga-supervisor "+name, flag.ContinueOnError)
}

// Indent indents every line of s by four spaces and ends it with one
// newline.
func Indent(s string) string {
	s = strings.TrimRight(s, "\n")
	return "    " + strings.ReplaceAll(s, "\n", "\n    ") + "\n"
}

// ErrOr is err's text, or s when err is nil.
func ErrOr(err error, s string) string {
	if err != nil {
		return err.Error()
	}
	return s
}
