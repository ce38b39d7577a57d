package cli

import (
	"errors"
	"flag"
	"fmt"
	"os/exec"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
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

// TestShellQuote: a word the shell reads back as it was written.
func TestShellQuote(t *testing.T) {
	sh := testtool.Need(t, "dash", "sh") // under CI a missing sh fails
	for _, s := range []string{"./saga-data/operator-token", "/etc/saga supervisor/x.yaml", "it's", "$(rm -rf /)", "a\"b", "", "-x", "~/a", "*"} {
		q := ShellQuote(s)
		out, err := exec.Command(sh, "-c", "printf %s "+q).Output()
		if err != nil || string(out) != s {
			t.Errorf("ShellQuote(%q) = %s: the shell reads %q (%v)", s, q, out, err)
		}
	}
	if q := ShellQuote("./saga-data/operator-token"); q != "./saga-data/operator-token" {
		t.Errorf("a plain path is quoted: %s", q)
	}
}
