// Package longtest marks the tests that `make test` runs short and `make
// test-long` runs in full. `make test` passes -short and must finish
// within ten minutes on a two-core machine; the long suites (the kill -9
// torture at 1000 rounds, the hostile flood, twenty daemons on one
// broker, …) run under `make test-long`. CI runs both, so a test marked
// here is never left out of CI: TestLongTestsAreListed keeps every marked
// test in the Makefile's LONG_TESTS, which is the -run pattern of `make
// test-long`.
package longtest

import "testing"

// Short reports whether the test runs short (go test -short), and says so
// in the test's log: a test that shrinks its rounds under -short calls it.
func Short(t testing.TB) bool {
	t.Helper()
	if testing.Short() {
		t.Log("short run: `make test-long` runs this test in full")
		return true
	}
	return false
}

// Skip skips the test under -short: for a test that cannot be made
// shorter and still mean anything. `make test-long`, which CI runs, runs it.
func Skip(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("long test: `make test-long` runs it (CI runs make test and make test-long)")
	}
}
