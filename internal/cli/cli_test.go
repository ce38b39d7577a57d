package cli

import (
	"errors"
	"flag"
	"fmt"
	"testing"
)

func TestStatus(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{flag.ErrHelp, 0},
		{fmt.Errorf("wrapped: %w", flag.ErrHelp), 0},
		{Exit(2, "usage"), 2},
		{fmt.Errorf("act I: %w", Exit(3, "x")), 3},
		{errors.New("plain"), 1},
	} {
		if got := Status(tt.err); got != tt.want {
			t.Errorf("Status(%v) = %d, want %d", tt.err, got, tt.want)
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
