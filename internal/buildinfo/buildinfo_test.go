package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	vcs := func(kv ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "m", Version: "(devel)"}}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == "main" {
				bi.Main.Version = kv[i+1]
				continue
			}
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return bi
	}
	const rev, when = "0123456789abcdef0123456789abcdef01234567", "2025-04-01T10:00:00Z"
	for _, tc := range []struct {
		name                string
		ldV, ldC, ldD       string
		bi                  *debug.BuildInfo
		wantV, wantC, wantD string
		wantGo              string
	}{
		{name: "nothing at all", wantV: "dev", wantC: Unknown, wantD: Unknown, wantGo: runtime.Version()},
		{name: "go run without vcs", bi: vcs(), wantV: "dev", wantC: Unknown, wantD: Unknown, wantGo: "go1.99.1"},
		{name: "ldflags win over vcs", ldV: "v1.2.0", ldC: "c0ffee", ldD: "2024-01-02T03:04:05Z",
			bi:    vcs("vcs.revision", rev, "vcs.time", when, "vcs.modified", "true", "main", "v9.9.9"),
			wantV: "v1.2.0", wantC: "c0ffee", wantD: "2024-01-02T03:04:05Z", wantGo: "go1.99.1"},
		{name: "vcs fills a plain build", bi: vcs("vcs.revision", rev, "vcs.time", when, "vcs.modified", "false"),
			wantV: "dev", wantC: rev, wantD: when, wantGo: "go1.99.1"},
		{name: "modified tree is dirty", bi: vcs("vcs.revision", rev, "vcs.time", when, "vcs.modified", "true"),
			wantV: "dev-dirty", wantC: rev, wantD: when, wantGo: "go1.99.1"},
		{name: "go install at a version", bi: vcs("main", "v1.3.0"),
			wantV: "v1.3.0", wantC: Unknown, wantD: Unknown, wantGo: "go1.99.1"},
		{name: "toolchain's +dirty said once", bi: vcs("main", "v0.0.0-20250401100000-0123456789ab+dirty", "vcs.revision", rev, "vcs.modified", "true"),
			wantV: "v0.0.0-20250401100000-0123456789ab-dirty", wantC: rev, wantD: Unknown, wantGo: "go1.99.1"},
		{name: "only the version set", ldV: "v2.0.0", bi: vcs("vcs.revision", rev, "vcs.time", when),
			wantV: "v2.0.0", wantC: rev, wantD: when, wantGo: "go1.99.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := resolve(tc.ldV, tc.ldC, tc.ldD, tc.bi)
			want := Info{Version: tc.wantV, Commit: tc.wantC, Date: tc.wantD, GoVersion: tc.wantGo, Platform: runtime.GOOS + "/" + runtime.GOARCH}
			if got != want {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

// The test binary is built without -X: Get falls back to the toolchain
// and never reports an empty field.
func TestGetFillsEveryField(t *testing.T) {
	in := Get()
	for name, v := range map[string]string{"version": in.Version, "commit": in.Commit, "date": in.Date, "go": in.GoVersion, "platform": in.Platform} {
		if v == "" {
			t.Errorf("%s is empty", name)
		}
	}
	if in.GoVersion != runtime.Version() {
		t.Errorf("go version %q, the toolchain says %q", in.GoVersion, runtime.Version())
	}
	s := in.String()
	for _, want := range []string{in.Version, in.Commit, in.Date, in.GoVersion, in.Platform} {
		if !strings.Contains(s, want) {
			t.Errorf("String() lacks %q:\n%s", want, s)
		}
	}
}
