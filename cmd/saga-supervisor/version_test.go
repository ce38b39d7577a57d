package main

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

// version prints the build's version, commit, date and Go version, as
// text and as JSON; the same fields either way. (With the Makefile's
// -ldflags the values are git's: packaging/'s test checks that on the
// binary inside the .deb.)
func TestVersionCommand(t *testing.T) {
	out, code := run(t, "version", "--json")
	if code != 0 {
		t.Fatalf("version --json: exit %d\n%s", code, out)
	}
	var in struct{ Version, Commit, Date, Go, Platform string }
	if err := json.Unmarshal([]byte(out), &in); err != nil {
		t.Fatalf("version --json is not JSON: %v\n%s", err, out)
	}
	if in.Version == "" || in.Commit == "" || in.Date == "" || in.Go != runtime.Version() || in.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Fatalf("version --json: %+v", in)
	}
	text, code := run(t, "version")
	if code != 0 {
		t.Fatalf("version: exit %d\n%s", code, text)
	}
	for _, want := range []string{"saga-supervisor " + in.Version + "\n", "commit: " + in.Commit, "date:   " + in.Date, "go:     " + in.Go + " " + in.Platform} {
		if !strings.Contains(text, want) {
			t.Errorf("version lacks %q:\n%s", want, text)
		}
	}
	if _, code := run(t, "version", "extra"); code != 2 {
		t.Errorf("version extra: exit %d, want 2", code)
	}
}
