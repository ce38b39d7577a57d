// Package testtool finds the programs tests talk to (mosquitto, socat,
// chromium, promtool, lintian, systemd tools, script). CI installs every
// one of them (.ci/run), so under CI a missing program fails the test: a
// component CI can install is never skipped there. Elsewhere the test is
// skipped, naming the Debian package to install.
//
// It also says how slow the machine is taken to be (Slow).
package testtool

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SlowEnv names the factor Slow stretches times by: a number, at least 1.
// make test-arm sets it (scripts/qemu-arm.sh): emulated, an ARM binary
// runs several times slower than the host's own.
const SlowEnv = "SAGA_TEST_SLOW"

// Slow returns d stretched by SAGA_TEST_SLOW (1 when unset). It is for a
// time a test picks for the program to beat in a race the test does not
// mean to test, such as a lease's TTL that heartbeats must beat in a test
// of something else: a slow CPU must not make a correct program fail. Not
// for a bound the test asserts (a reply within its deadline, a halt within
// its budget): stretched, it would let a slow program pass.
func Slow(d time.Duration) time.Duration {
	return time.Duration(float64(d) * slowFactor())
}

func slowFactor() float64 {
	v := os.Getenv(SlowEnv)
	if v == "" {
		return 1
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 1 || f > 100 {
		panic(fmt.Sprintf("testtool: %s=%q: want a number from 1 to 100", SlowEnv, v))
	}
	return f
}

// Need returns the path of the first of names on PATH. None found: under
// CI (CI set) the test fails; elsewhere it is skipped.
func Need(t testing.TB, pkg string, names ...string) string {
	t.Helper()
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	what := strings.Join(names, " or ")
	if os.Getenv("CI") != "" {
		t.Fatalf("%s not found: .ci/run must install %s", what, pkg)
	}
	t.Skipf("%s not found: apt-get install %s", what, pkg)
	return ""
}
