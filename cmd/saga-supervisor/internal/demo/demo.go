// Package demo is `saga-supervisor demo`: the supervisor shown on a
// simulated arm in five acts (no supervisor; a fault unwound; a failed
// compensation; the supervisor killed mid-step and recovered by a new
// process; the controller killed mid-saga), and the two helper processes
// it starts by running its own executable again: demo-child (Act IV's
// supervisor) and demo-controller (Act V's controller).
package demo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/journaltool"
	"github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/simarm"
	"github.com/saga-supervisor/saga-supervisor/recovery"
	"github.com/saga-supervisor/saga-supervisor/rollback"
)

// demoMove is one command of the demo's pick sequence.
type demoMove struct {
	actuator string
	value    float64
}

// The pick sequence every act runs: swing, raise, reach, grip. The grip
// faults in every act.
var pick = []demoMove{{"base", 45}, {"shoulder", 60}, {"elbow", 90}, {"gripper", 30}}

// settle gives the simulated servos time to finish moving at their slew, so
// the world shows positions, not moves in progress.
const settle = 300 * time.Millisecond

// Run is `saga-supervisor demo [--dir DIR]`.
func Run(args []string, w io.Writer) error {
	fs := cli.NewFlags("demo")
	keep := fs.String("dir", "", "directory for the demo's files (default: a new temporary directory)")
	if err := fs.Parse(args); err != nil {
		return cli.Exit(2, "%v", err)
	}
	dir := *keep
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "saga-demo-"); err != nil {
			return err
		}
	}
	journal := filepath.Join(dir, "journal")
	fmt.Fprintf(w, "saga-supervisor demo — files in %s\n", dir)
	fmt.Fprintln(w, "A simulated arm (base, shoulder, elbow, gripper servos) on a simulated 7.4 V battery.")
	fmt.Fprintln(w, "Its world persists to a file, so what one process leaves, the next one finds.")

	if err := demoActI(w, filepath.Join(dir, "act1.world")); err != nil {
		return fmt.Errorf("act I: %w", err)
	}
	world := filepath.Join(dir, "arm.world")
	if err := demoActII(w, journal, world); err != nil {
		return fmt.Errorf("act II: %w", err)
	}
	if err := demoActIII(w, journal, world); err != nil {
		return fmt.Errorf("act III: %w", err)
	}
	if err := demoActIV(w, journal, world); err != nil {
		return fmt.Errorf("act IV: %w", err)
	}
	if err := demoActV(w, dir); err != nil {
		return fmt.Errorf("act V: %w", err)
	}

	fmt.Fprintln(w, "\n== The journal")
	var out strings.Builder
	if err := journaltool.Verify([]string{"--wal", journal}, &out); err != nil {
		fmt.Fprint(w, cli.Indent(out.String()))
		return fmt.Errorf("verify failed on the demo journal: %w", err)
	}
	fmt.Fprintf(w, "$ saga-supervisor verify --wal %s\n%s", journal, cli.Indent(out.String()))
	fmt.Fprintf(w, "Draw every saga and its unwind (Mermaid):\n    saga-supervisor graph --wal %s\n", journal)
	return nil
}

func demoActI(w io.Writer, world string) error {
	fmt.Fprintln(w, "\n== Act I — no supervisor")
	fmt.Fprintln(w, "The controller drives the servos directly. The fourth command faults.")
	a, err := simarm.Open(world, nil)
	if err != nil {
		return err
	}
	a.Servos["gripper"].FailAlways()
	ctx := context.Background()
	for i, m := range pick {
		err := a.Servos[m.actuator].Set(ctx, m.value)
		fmt.Fprintf(w, "  %d. %s → %g: %s\n", i+1, m.actuator, m.value, okOr(err))
		if err != nil {
			break
		}
	}
	a.Close()
	time.Sleep(settle)
	fmt.Fprintln(w, "The world file shows the arm left half-moved, and nothing knows where it was:")
	return simarm.ShowWorld(world)
}

// openSupervised takes over the journal (recovering anything left open) and
// builds the engine on the arm.
func openSupervised(journal, world string, wrap func(string, actuators.Driver) actuators.Driver) (*simarm.Arm, *recovery.Result, error) {
	a, err := simarm.Open(world, wrap)
	if err != nil {
		return nil, nil, err
	}
	res, err := recovery.Open(recovery.Options{Dir: journal, Engine: rollback.Config{
		Actuators: a.Registry, Supplies: a.Supplies, RetryBackoff: 20 * time.Millisecond,
	}})
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, res, nil
}

// runPick runs the pick sequence in one saga, with an over-limit command
// slipped in before the reach, and prints what the supervisor answered.
func runPick(w io.Writer, e *rollback.Engine, owner rollback.Owner) (*rollback.Report, error) {
	saga, err := e.Begin(owner)
	if err != nil {
		return nil, err
	}
	moves := append([]demoMove{}, pick[:2]...)
	moves = append(moves, demoMove{"elbow", 170}) // over the elbow's 135° limit
	moves = append(moves, pick[2:]...)
	for i, m := range moves {
		res, err := e.Step(saga, owner, rollback.Command{ID: fmt.Sprintf("cmd-%d", i+1), Actuator: m.actuator, Value: m.value,
			Deadline: time.Now().Add(time.Second)})
		switch code := rollback.CodeOf(err); {
		case err == nil:
			fmt.Fprintf(w, "  step %d: %s %g → %g: applied (intent durable first)\n", res.Step, m.actuator, res.Prior, res.Value)
		case code == rollback.CodeStepFailed || code == rollback.CodeStepInDoubt:
			var ee *rollback.Error
			errors.As(err, &ee)
			fmt.Fprintf(w, "  %s → %g: %s\n", m.actuator, m.value, err)
			return ee.Report, nil
		case code != "":
			fmt.Fprintf(w, "  %s → %g: REFUSED, nothing moved — %s\n", m.actuator, m.value, err)
		default:
			return nil, err
		}
	}
	return nil, e.Commit(saga, owner)
}

// supervisedPick takes the journal over and runs the pick under lease,
// with the gripper faulting at its first command and whatever fault adds,
// and prints the rollback report. The caller closes res, then a.
func supervisedPick(w io.Writer, journal, world, lease string, fault func(*simarm.Arm)) (*simarm.Arm, *recovery.Result, error) {
	a, res, err := openSupervised(journal, world, nil)
	if err != nil {
		return nil, nil, err
	}
	a.Servos["gripper"].FailOnNth(1)
	if fault != nil {
		fault(a)
	}
	rep, err := runPick(w, res.Engine, rollback.Owner{Agent: "planner", Lease: lease, Epoch: 1})
	if err != nil {
		res.Close()
		a.Close()
		return nil, nil, err
	}
	fmt.Fprint(w, "RollbackReport: ", rep.String())
	return a, res, nil
}

func demoActII(w io.Writer, journal, world string) error {
	fmt.Fprintln(w, "\n== Act II — the same commands through the supervisor")
	a, res, err := supervisedPick(w, journal, world, "demo-2", nil)
	if err != nil {
		return err
	}
	defer a.Close()
	defer res.Close()
	time.Sleep(settle)
	fmt.Fprintln(w, "The world file shows the arm back where it started:")
	return showWorldLive(a)
}

func demoActIII(w io.Writer, journal, world string) error {
	fmt.Fprintln(w, "\n== Act III — a compensation fails")
	fmt.Fprintln(w, "The elbow jams on its way back to 20°; the supervisor retries, then sends it to its safe")
	fmt.Fprintln(w, "policy (rest at 45°) and halts: the rest of the unwind is not attempted, and every actuator")
	fmt.Fprintln(w, "goes to its safe policy.")
	a, res, err := supervisedPick(w, journal, world, "demo-3", func(a *simarm.Arm) {
		a.Servos["elbow"].FailWhen(func(v float64) bool { return v == 20 })
	})
	if err != nil {
		return err
	}
	defer a.Close()
	defer res.Close()
	halted, why := res.Engine.Halted()
	fmt.Fprintf(w, "halted: %v (%s)\n", halted, why)
	time.Sleep(settle)
	fmt.Fprintln(w, "The world file shows what was left, and the report does not call it clean:")
	if err := showWorldLive(a); err != nil {
		return err
	}
	a.Servos["elbow"].Clear()
	if err := res.Engine.Reset("demo operator", res.Engine.HaltGen()); err != nil {
		return err
	}
	fmt.Fprintln(w, "An operator clears the jam, resets the halt (journaled) and homes the arm in a committed saga.")
	owner := rollback.Owner{Agent: "operator", Lease: "demo-home", Epoch: 1}
	saga, err := res.Engine.Begin(owner)
	if err != nil {
		return err
	}
	for _, name := range a.Registry.Names() {
		home := a.Registry.Get(name).Initial
		if _, err := res.Engine.Step(saga, owner, rollback.Command{ID: "home-" + name, Actuator: name, Value: home}); err != nil {
			return err
		}
	}
	return res.Engine.Commit(saga, owner)
}

// showWorldLive prints the world of an arm this process still holds open.
func showWorldLive(a *simarm.Arm) error {
	fmt.Print(cli.Indent(a.World.Format()))
	return nil
}

func demoActIV(w io.Writer, journal, world string) error {
	fmt.Fprintln(w, "\n== Act IV — the supervisor is killed mid-step")
	fmt.Fprintln(w, "A supervisor process runs the pick; the gripper's effect hangs after its intent is durable,")
	fmt.Fprintln(w, "and the process is killed with SIGKILL before any outcome is written.")
	child, out, err := startSelf("demo-child", "--wal", journal, "--world", world)
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(out)
	killed := false
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintf(w, "  [pid %d] %s\n", child.Process.Pid, line)
		if strings.HasPrefix(line, "effect applied, driver hung: gripper") {
			if err := child.Process.Signal(syscall.SIGKILL); err != nil {
				return err
			}
			killed = true
			fmt.Fprintf(w, "  kill -9 %d\n", child.Process.Pid)
			break
		}
	}
	io.Copy(io.Discard, out)
	werr := child.Wait()
	if !killed {
		return fmt.Errorf("the child never reached the gripper's effect (%v)", werr)
	}
	time.Sleep(settle)
	fmt.Fprintln(w, "The world file shows what the dead process left:")
	if err := simarm.ShowWorld(world); err != nil {
		return err
	}
	fmt.Fprintf(w, "A new process takes over the journal:\n$ saga-supervisor recover --wal %s --world %s\n", journal, world)
	rec, err := selfCommand("recover", "--wal", journal, "--world", world)
	if err != nil {
		return err
	}
	recOut, err := rec.Output()
	fmt.Fprint(w, cli.Indent(string(recOut)))
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	time.Sleep(settle)
	fmt.Fprintln(w, "The world file shows the arm back at home, where Act IV started:")
	return simarm.ShowWorld(world)
}

// selfCommand is this executable run again with args, its standard error
// ours.
func selfCommand(args ...string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c := exec.Command(self, args...)
	c.Stderr = os.Stderr
	return c, nil
}

// startSelf starts this executable again with args and returns it with its
// standard output.
func startSelf(args ...string) (*exec.Cmd, io.Reader, error) {
	c, err := selfCommand(args...)
	if err != nil {
		return nil, nil, err
	}
	out, err := c.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := c.Start(); err != nil {
		return nil, nil, err
	}
	return c, out, nil
}

// Child is Act IV's supervisor process: it runs the pick until the
// gripper's effect, which hangs (having moved), and waits to be killed.
func Child(args []string, w io.Writer) error {
	fs := cli.NewFlags("demo-child")
	journal := fs.String("wal", "", "")
	world := fs.String("world", "", "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	announce := func(name string, d actuators.Driver) actuators.Driver {
		return &announcingDriver{Driver: d, name: name, w: w, hang: name == "gripper"}
	}
	a, res, err := openSupervised(*journal, *world, announce)
	if err != nil {
		return err
	}
	defer a.Close()
	defer res.Close()
	owner := rollback.Owner{Agent: "planner", Lease: "demo-4", Epoch: 1}
	saga, err := res.Engine.Begin(owner)
	if err != nil {
		return err
	}
	for i, m := range pick {
		fmt.Fprintf(w, "step %d: %s → %g\n", i+1, m.actuator, m.value)
		if _, err := res.Engine.Step(saga, owner, rollback.Command{ID: fmt.Sprint(i + 1), Actuator: m.actuator, Value: m.value}); err != nil {
			return err
		}
	}
	return errors.New("the gripper did not hang")
}

// announcingDriver prints each effect as it happens: by the step protocol,
// its intent is durable by then. With hang set it models a driver that moved
// the output and then never answered: it announces the applied effect and
// blocks well past the driver timeout, so the process is killed with the
// step's outcome unwritten.
type announcingDriver struct {
	actuators.Driver
	name string
	w    io.Writer
	hang bool
}

func (d *announcingDriver) Set(ctx context.Context, v float64) error {
	err := d.Driver.Set(ctx, v)
	if err != nil || !d.hang {
		fmt.Fprintf(d.w, "effect applied: %s → %g (intent was durable first)\n", d.name, v)
		return err
	}
	fmt.Fprintf(d.w, "effect applied, driver hung: %s → %g; no outcome written\n", d.name, v)
	time.Sleep(10 * time.Second)
	return context.DeadlineExceeded
}

func okOr(err error) string {
	if err != nil {
		return "FAILED: " + err.Error()
	}
	return "ok"
}
