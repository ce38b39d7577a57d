// Package buildinfo says which build of saga-supervisor is running: its
// version, the commit it was built from, that commit's date and the Go
// toolchain. The Makefile sets the first three with -ldflags -X (see
// LDFLAGS there); a plain `go build` or `go run` leaves them empty, and
// they are then read from what the Go toolchain stamped into the binary
// (runtime/debug.ReadBuildInfo: the module version and the vcs.* settings).
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// Set at link time by the Makefile, e.g.
//
//	-X github.com/saga-supervisor/saga-supervisor/internal/buildinfo.version=v1.2.0
//
// -X can set only package-level string variables that are not
// initialised to a non-constant expression; these start empty.
var (
	version string
	commit  string
	date    string
)

// Unknown stands for a field neither the linker nor the toolchain filled.
const Unknown = "unknown"

// Info describes one build.
type Info struct {
	// Version is `git describe --tags --always --dirty` at build time, the
	// module version a `go install ...@v` stamped, or "dev". A build
	// from a modified work tree ends in "-dirty".
	Version string `json:"version"`
	// Commit is the full hash of the commit built, or Unknown.
	Commit string `json:"commit"`
	// Date is the commit's time (RFC 3339), not the build's: two builds
	// of one commit are the same. Unknown when not known.
	Date string `json:"date"`
	// GoVersion is the toolchain that built the binary (go1.26.8).
	GoVersion string `json:"go"`
	// Platform is GOOS/GOARCH of the binary.
	Platform string `json:"platform"`
}

// Get reports this binary's build.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(version, commit, date, bi)
}

// resolve combines what the linker set with what the toolchain stamped
// (bi, nil when the binary carries none). A value set with -X wins; the
// toolchain's fills only what is missing.
func resolve(ldVersion, ldCommit, ldDate string, bi *debug.BuildInfo) Info {
	in := Info{
		Version:   ldVersion,
		Commit:    ldCommit,
		Date:      ldDate,
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
	if bi != nil {
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if in.Commit == "" {
					in.Commit = s.Value
				}
			case "vcs.time":
				if in.Date == "" {
					in.Date = s.Value
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if in.Version == "" {
			// "(devel)" is what a build inside the module's own tree
			// says when the toolchain stamped no version.
			if v := bi.Main.Version; v != "" && v != "(devel)" {
				in.Version = v
			}
			// Go 1.24+ marks a modified tree "+dirty" in the module
			// version itself; say it the way git describe does, once.
			if in.Version != "" {
				in.Version = strings.TrimSuffix(in.Version, "+dirty")
			} else {
				in.Version = "dev"
			}
			if modified {
				in.Version += "-dirty"
			}
		}
	}
	if in.Version == "" {
		in.Version = "dev"
	}
	if in.Commit == "" {
		in.Commit = Unknown
	}
	if in.Date == "" {
		in.Date = Unknown
	}
	return in
}

// String is the build in a few lines, as `saga-supervisor version` prints it.
func (in Info) String() string {
	return "saga-supervisor " + in.Version + "\n" +
		"commit: " + in.Commit + "\n" +
		"date:   " + in.Date + "\n" +
		"go:     " + in.GoVersion + " " + in.Platform + "\n"
}
