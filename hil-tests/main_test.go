//go:build !saga_lean

package hil

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

var (
	rigFlag = flag.String("hil.config", "", "rig file of a real rig (docs/HIL.md); empty: run on sim drivers")
	binFlag = flag.String("hil.binary", "", "a prebuilt saga-supervisor to test instead of building one (e.g. `make cross` output on a rig)")
	// The AVR profile: the firmware's ELF on saga-avr-rig instead of the
	// sim board (docs/HIL.md, "The emulated AVR rig").
	boardFlag  = flag.String("hil.rig", "", "without -hil.config, the board: sim (default) or avr (HIL_RIG=avr too)")
	avrELFFlag = flag.String("hil.avr-elf", "", "the firmware ELF the avr board runs (default: HIL_AVR_ELF, else "+defaultAVRELF+" under the repository)")
)

// binary is the saga-supervisor under test, built once by TestMain.
var binary string

// rigFile is the parsed -hil.config, nil in sim mode.
var rigFile *RigFile

func TestMain(m *testing.M) {
	if os.Getenv(controllerEnv) != "" {
		// This process is a controller a scenario started (and will kill).
		os.Exit(runController())
	}
	flag.Parse()
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		// Fuzz workers run TestMain too; the decoders need no binary.
		os.Exit(m.Run())
	}
	if *rigFlag != "" {
		r, err := LoadRig(*rigFlag)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		rigFile = r
	}
	board := *boardFlag
	if board == "" {
		board = os.Getenv("HIL_RIG")
	}
	switch board {
	case "", "sim":
	case "avr":
		if rigFile != nil {
			fmt.Fprintln(os.Stderr, "hil: -hil.rig=avr and -hil.config are two rigs: give one")
			os.Exit(2)
		}
		avrMode = true
	default:
		fmt.Fprintf(os.Stderr, "hil: -hil.rig (HIL_RIG) %q: want sim or avr\n", board)
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "hil-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		if *binFlag != "" {
			binary = *binFlag
			if avrMode {
				avrSetup(dir)
			}
			return m.Run()
		}
		binary = filepath.Join(dir, "saga-supervisor")
		// Without -race: the scenarios are about behaviour across
		// processes, and a race binary is several times slower to start
		// and run on a 2-core machine. HIL_RACE=1 builds it with -race.
		args := []string{"build", "-o", binary}
		if os.Getenv("HIL_RACE") != "" {
			args = append(args, "-race")
		}
		build := exec.Command("go", append(args, "github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor")...)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		t0 := time.Now()
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "hil: building saga-supervisor:", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "hil: built %s in %v\n", binary, time.Since(t0).Round(time.Millisecond))
		if avrMode {
			avrSetup(dir)
		}
		return m.Run()
	}()
	os.Exit(code)
}
