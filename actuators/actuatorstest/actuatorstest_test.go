package actuatorstest_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/actuators/actuatorstest"
	"github.com/saga-supervisor/saga-supervisor/internal/longtest"
)

// mem is an in-memory driver that keeps every promise of package
// actuators, unless its mutant says which one to break.
type mem struct {
	mutant string

	mu      sync.Mutex
	value   float64
	halted  bool
	broken  bool
	refuses bool
	closed  bool
	halts   int
}

var errBroken = errors.New("mem: link lost")

func (m *mem) Set(ctx context.Context, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < -10 || v > 10 {
		if m.mutant == "nan_plain" && math.IsNaN(v) {
			return errors.New("mem: NaN") // forgets ErrNotApplied
		}
		return fmt.Errorf("mem: %g out of range: %w", v, actuators.ErrNotApplied)
	}
	if err := ctx.Err(); err != nil {
		if m.mutant == "hangs_on_done_ctx" {
			time.Sleep(time.Hour)
		}
		if m.mutant != "ignores_ctx" {
			return fmt.Errorf("mem: not sent: %w (%w)", actuators.ErrNotApplied, err)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		return fmt.Errorf("mem: closed: %w", actuators.ErrLinkLost)
	case m.broken:
		m.value = v // reached the device; the answer did not come back
		if m.mutant == "doubt_lies" {
			return fmt.Errorf("mem: %w: %w", errBroken, actuators.ErrNotApplied)
		}
		return fmt.Errorf("mem: %w: %w", errBroken, actuators.ErrLinkLost)
	case m.refuses:
		if m.mutant == "refuse_moves" {
			m.value = v
		}
		return fmt.Errorf("mem: refused: %w", actuators.ErrNotApplied)
	}
	m.value, m.halted = v, false
	return nil
}

func (m *mem) ReadBack(ctx context.Context) (float64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.halted && m.mutant != "halt_reads_value" {
		return 0, fmt.Errorf("mem: %w", actuators.ErrNoReading)
	}
	return m.value, nil
}

func (m *mem) Halt() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.halts++
	if m.mutant == "halt_once" && m.halts > 1 {
		return errors.New("mem: already halted")
	}
	m.halted = true
	return nil
}

func (m *mem) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed && m.mutant == "close_twice_panics" {
		panic("mem: closed twice")
	}
	m.closed = true
	return nil
}

func subject(mutant string) actuatorstest.Subject {
	return actuatorstest.Subject{
		New: func(t *testing.T) actuatorstest.Instance {
			m := &mem{mutant: mutant}
			flip := func(f *bool) func() func() {
				return func() func() {
					m.mu.Lock()
					*f = true
					m.mu.Unlock()
					return func() { m.mu.Lock(); *f = false; m.mu.Unlock() }
				}
			}
			return actuatorstest.Instance{Driver: m, Break: flip(&m.broken), Refuse: flip(&m.refuses)}
		},
		Kind: actuators.Setpoint,
		Min:  -10, Max: 10,
		Values:          []float64{-10, 0, 2.5, 10},
		ReadBack:        true,
		AfterHalt:       actuatorstest.HaltNoReading,
		OutOfRange:      []float64{math.NaN(), math.Inf(1), math.Inf(-1), 10.001, -11},
		HaltWhileBroken: true,
		Timeout:         200 * time.Millisecond,
		Slack:           300 * time.Millisecond,
	}
}

// TestMem: the healthy in-memory driver passes every check.
func TestMem(t *testing.T) { actuatorstest.Run(t, subject("")) }

// volts is a supply whose readings fail as the mutant says.
type volts struct {
	mutant string
	mu     sync.Mutex
	v      float64
	failed bool
}

func (s *volts) Volts() (float64, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed {
		if s.mutant == "stale_zero" {
			return 0, time.Now(), nil // a dead sensor read as 0 V
		}
		return 0, time.Time{}, errors.New("volts: stale")
	}
	if s.mutant == "undated" {
		return s.v, time.Time{}, nil
	}
	return s.v, time.Now(), nil
}

func supplySubject(mutant string) actuatorstest.SupplySubject {
	return actuatorstest.SupplySubject{
		New: func(t *testing.T) actuatorstest.SupplyInstance {
			s := &volts{mutant: mutant, v: 12}
			return actuatorstest.SupplyInstance{
				Source:   s,
				Volts:    12,
				SetVolts: func(v float64) { s.mu.Lock(); s.v = v; s.mu.Unlock() },
				Fail: func() func() {
					s.mu.Lock()
					s.failed = true
					s.mu.Unlock()
					return func() { s.mu.Lock(); s.failed = false; s.mu.Unlock() }
				},
			}
		},
		Others: []float64{11, 0},
		Wait:   50 * time.Millisecond,
	}
}

func TestVolts(t *testing.T) { actuatorstest.RunSupply(t, supplySubject("")) }

const mutantEnv = "ACTUATORSTEST_MUTANT"

// TestMutant runs the suite on one mutant, named by the environment; it is
// run by TestSuiteCatchesMutants in a child process, and expected to fail.
func TestMutant(t *testing.T) {
	name := os.Getenv(mutantEnv)
	if name == "" {
		t.Skip("the child-process half of TestSuiteCatchesMutants, which runs it with " + mutantEnv + " set")
	}
	if strings.HasPrefix(name, "supply:") {
		actuatorstest.RunSupply(t, supplySubject(strings.TrimPrefix(name, "supply:")))
		return
	}
	actuatorstest.Run(t, subject(name))
}

// TestSuiteCatchesMutants shows that checks can fail: each mutant breaks
// one promise, and the suite must fail it in the named subtest.
func TestSuiteCatchesMutants(t *testing.T) {
	longtest.Skip(t) // a child process per mutant
	for mutant, check := range map[string]string{
		"nan_plain":          "TestMutant/not_applied", // NaN refused without ErrNotApplied
		"doubt_lies":         "TestMutant/in_doubt",    // an in-doubt failure claims not applied
		"refuse_moves":       "TestMutant/in_doubt",    // a refusal that moved the output
		"ignores_ctx":        "TestMutant/context",     // a done context still drives the output
		"hangs_on_done_ctx":  "TestMutant/context",     // a done context hangs the Set
		"halt_once":          "TestMutant/halt",        // Halt is not idempotent
		"halt_reads_value":   "TestMutant/halt",        // ReadBack after Halt is not ErrNoReading
		"supply:stale_zero":  "TestMutant/failed",      // a failed reading reads as 0 V
		"supply:undated":     "TestMutant/read",        // a reading without its time
		"close_twice_panics": "TestMutant/close",       // a second Close panics
	} {
		t.Run(mutant, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestMutant$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), mutantEnv+"="+mutant)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the suite passed the mutant (err %v):\n%s", err, out)
			}
			if !strings.Contains(string(out), "--- FAIL: "+check+" ") {
				t.Fatalf("the suite failed the mutant, but not in %s:\n%s", check, out)
			}
		})
	}
}
