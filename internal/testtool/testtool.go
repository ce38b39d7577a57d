// Package testtool finds the programs tests talk to (mosquitto, socat,
// chromium, promtool, lintian, systemd tools, script). CI installs every
// one of them (.ci/run), so under CI a missing program fails the test: a
// component CI can install is never skipped there. Elsewhere the test is
// skipped, naming the Debian package to install.
package testtool

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

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
