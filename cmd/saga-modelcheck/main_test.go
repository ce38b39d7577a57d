package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
)

// binary is the command, built once, run as a user would.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "saga-modelcheck-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "saga-modelcheck")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the binary:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// withoutCI is the test's environment less CI, as on a developer's machine.
func withoutCI() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CI=") {
			env = append(env, kv)
		}
	}
	return env
}

// TestCheckSummaryIsOneLineInCI: under CI the model check prints one line
// with its figures (it printed the invariants and seven lines of account).
func TestCheckSummaryIsOneLineInCI(t *testing.T) {
	cmd := exec.Command(binary, "--max-steps", "2")
	cmd.Env = append(withoutCI(), "CI=true")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("check: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != 1 {
		t.Fatalf("check under CI printed %d lines, want one:\n%s", len(lines), out)
	}
	if !regexp.MustCompile(`^model check: [1-9]\d* cases in [\d.]+s \(\d+/s\), 0 violations; sagas of 1\.\.2 steps`).MatchString(lines[0]) {
		t.Errorf("summary line: %q", lines[0])
	}
	if strings.ContainsAny(string(out), "\r\033") {
		t.Errorf("a progress line was drawn into a log: %q", out)
	}
}

// TestCheckShowsProgressOnATerminal runs the check on a real terminal
// (script(1) gives it a pty): it redraws a progress line with the rate and
// the time left, then the full account.
func TestCheckShowsProgressOnATerminal(t *testing.T) {
	script := testtool.Need(t, "bsdutils", "script")
	cmd := exec.Command(script, "-qfec", binary+" --max-steps 3 --sagas 2 --progress-every 5ms", "/dev/null")
	cmd.Env = withoutCI()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("check on a terminal: %v\n%s", err, out)
	}
	s := string(out)
	if !regexp.MustCompile(`\r\x1b\[Kmodel check: \d+ cases, \d+/s, \d+ of \d+ runs \(\d+%\), ETA \d`).MatchString(s) {
		t.Errorf("no progress line with a rate and an ETA:\n%q", s)
	}
	for _, want := range []string{"invariants:", "cases run:", "violations:       0 cases"} {
		if !strings.Contains(s, want) {
			t.Errorf("the terminal's account lacks %q:\n%s", want, s)
		}
	}
}
