package cli

import (
	"errors"
	"flag"
	"fmt"
	"testing"
)

// statusOf is what main exits with for each kind of error a command
// returns.
var statusOf = map[error]int{
	nil:                                     0,
	flag.ErrHelp:                            0,
	fmt.Errorf("wrapped: %w", flag.ErrHelp): 0,
	Exit(2, "usage"):                        2,
	fmt.Errorf("act I: %w", Exit(3, "x")):   3,
	errors.New("a failure with no status"):  1,
}

func TestStatus(t *testing.T) {
	for err, want := range statusOf {
		if got := Status(err); got != want {
			t.Errorf("Status(%v) = %d, want %d", err, got, want)
		}
	}
	if got := Exit(2, "bad %s", "flag").Error(); got != "bad flag" {
		t.Errorf("Exit's message %q", got)
	}
}

func TestIndent(t *testing.T) {
	if got := Indent("a\nb\n\n"); got != "    a\n    b\n" {
		t.Errorf("Indent: %q", got)
	}
}
