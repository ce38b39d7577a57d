//go:build saga_profile

package main

// Profiling for benchmarks, in builds with -tags saga_profile only (never
// the release: `make build` and the packages have no such tag). With
// SAGA_PROFILE_DIR set, the process writes DIR/armed at start; SIGUSR1
// starts a CPU profile (DIR/cpu-N.pprof) and an execution trace
// (DIR/trace-N.out), SIGUSR2 stops both and writes DIR/done-N. `bench pi
// --profile DIR` uses it around the halts, to see where a halt's time goes
// under a CPU quota (docs/PROOF.md).

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"syscall"
)

func init() {
	dir := os.Getenv("SAGA_PROFILE_DIR")
	if dir == "" {
		return
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
	if err := os.WriteFile(filepath.Join(dir, "armed"), nil, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "saga_profile:", err)
		return
	}
	go func() {
		var cpuF, trF *os.File
		n := 0
		for s := range sigs {
			switch {
			case s == syscall.SIGUSR1 && cpuF == nil:
				n++
				var err error
				if cpuF, err = os.Create(filepath.Join(dir, fmt.Sprintf("cpu-%d.pprof", n))); err == nil {
					err = pprof.StartCPUProfile(cpuF)
				}
				if err == nil {
					if trF, err = os.Create(filepath.Join(dir, fmt.Sprintf("trace-%d.out", n))); err == nil {
						err = trace.Start(trF)
					}
				}
				if err != nil {
					fmt.Fprintln(os.Stderr, "saga_profile:", err)
				}
			case s == syscall.SIGUSR2 && cpuF != nil:
				pprof.StopCPUProfile()
				trace.Stop()
				cpuF.Close()
				trF.Close()
				cpuF, trF = nil, nil
				os.WriteFile(filepath.Join(dir, fmt.Sprintf("done-%d", n)), nil, 0o600)
			}
		}
	}()
}
