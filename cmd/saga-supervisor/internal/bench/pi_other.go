//go:build !linux

package bench

import (
	"io"
	"os"
	"time"
)

// bench pi needs Linux: cgroups, seccomp and /proc.

const launchCmd = "pi-exec"

type cgroupFS struct {
	version int
	parent  string
}

type cpuCgroup struct{ dir string }

func findCgroupFS(string) (cgroupFS, error) { return cgroupFS{}, errPiUnsupported }

func newCPUCgroup(cgroupFS, string, float64, time.Duration, int) (*cpuCgroup, error) {
	return nil, errPiUnsupported
}

func (c *cpuCgroup) String() string         { return "" }
func (c *cpuCgroup) procs() string          { return "" }
func (c *cpuCgroup) holds(int) error        { return errPiUnsupported }
func (c *cpuCgroup) stat() throttle         { return throttle{} }
func (c *cpuCgroup) remove() error          { return nil }
func ownCgroupDir(cgroupFS) (string, error) { return "", errPiUnsupported }
func moveSelf(string) error                 { return errPiUnsupported }
func runLaunch([]string, io.Writer) error   { return errPiUnsupported }

func launchArgs(procs string, filter bool, daemon []string) []string { return daemon }

type syncHolder struct{ held, heldNs interface{ Load() int64 } }

func receiveListener(*os.File, time.Duration) (int, error) { return -1, errPiUnsupported }
func holdSyncs(int, fsyncDelay) *syncHolder                { return nil }
func (h *syncHolder) close()                               {}
func (h *syncHolder) err() error                           { return nil }
