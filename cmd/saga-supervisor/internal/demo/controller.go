package demo

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/saga-supervisor/saga-supervisor/client"
	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/journaltool"
	"github.com/saga-supervisor/saga-supervisor/daemon"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// demoActV: the daemon's own composition (config, leases, MQTT API on an
// in-process broker) and a controller in another process that is killed
// mid-saga.
func demoActV(w io.Writer, dir string) error {
	fmt.Fprintln(w, "\n== Act V — the controller dies mid-saga")
	fmt.Fprintln(w, "The supervisor runs as the daemon does (embedded default config, in-process MQTT broker);")
	fmt.Fprintln(w, "a controller in another process takes a 3 s lease over MQTT, moves the arm, and is killed.")
	cfg := config.Default()
	cfg.Journal.Dir = filepath.Join(dir, "act5", "journal")
	cfg.Sim.World = filepath.Join(dir, "act5", "world")
	cfg.HTTP.Listen = ""
	// The daemon as `run` starts it: the embedded broker locked, the
	// controller logging in as planner with the password generated for it.
	cfg.MQTT.Listen = "127.0.0.1:0"
	cfg.MQTT.Auth.PasswordFile = filepath.Join(dir, "act5", "mqtt", "passwd")
	cfg.MQTT.Auth.CredentialsDir = filepath.Join(dir, "act5", "mqtt", "credentials")
	d, err := daemon.Start(daemon.Options{Config: cfg})
	if err != nil {
		return err
	}
	defer d.Close()
	sup, broker := d.Sup, d.Broker.Broker

	child, out, err := startSelf("demo-controller", "--broker", broker.URL(), "--device", cfg.Device,
		"--password-file", filepath.Join(cfg.MQTT.Auth.CredentialsDir, "planner"))
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(out)
	holding := false
	for sc.Scan() {
		fmt.Fprintf(w, "  [controller pid %d] %s\n", child.Process.Pid, sc.Text())
		if strings.HasPrefix(sc.Text(), "holding") {
			holding = true
			break
		}
	}
	if !holding {
		child.Wait()
		return fmt.Errorf("the controller never reached its hold")
	}
	time.Sleep(settle)
	fmt.Fprintln(w, "The world, mid-saga:")
	fmt.Fprint(w, cli.Indent(d.Built.World.Format()))
	killed := time.Now()
	child.Process.Signal(syscall.SIGKILL)
	fmt.Fprintf(w, "  kill -9 %d\n", child.Process.Pid)
	go io.Copy(io.Discard, out)
	child.Wait()
	for len(sup.Engine().OpenSagas()) > 0 {
		if time.Since(killed) > 10*time.Second {
			return fmt.Errorf("the controller's saga was never unwound")
		}
		time.Sleep(time.Millisecond)
	}
	took := time.Since(killed)
	h, err := journaltool.ReadHistory(cfg.Journal.Dir)
	if err != nil {
		return err
	}
	for _, s := range h.Sagas {
		if s.State != rollback.SagaUnwound {
			continue
		}
		switch s.Reason {
		case "lease will":
			fmt.Fprintf(w, "The broker published the controller's MQTT will, so the supervisor ended its lease at once:\n")
		case "lease expired":
			fmt.Fprintf(w, "The controller's lease ran out:\n")
		}
		fmt.Fprintf(w, "saga %d of %s unwound %s, %v after the kill (journal: %q).\n", s.ID, s.Agent, s.Verdict, took.Round(time.Millisecond), s.Reason)
		for i := len(s.Steps) - 1; i >= 0; i-- {
			st := s.Steps[i]
			fmt.Fprintf(w, "    step %d %-9s %g → %g  %s\n", st.Step, st.Actuator, st.Target, st.Prior, st.Bucket)
		}
	}
	fmt.Fprintln(w, "(A controller that hangs instead of dying loses its lease when the 3 s TTL runs out.)")
	time.Sleep(settle)
	fmt.Fprintln(w, "The world file shows the arm back where the controller found it:")
	fmt.Fprint(w, cli.Indent(d.Built.World.Format()))
	return nil
}

// Controller is Act V's controller process: it moves the arm in a
// saga over MQTT and then waits, holding its lease, to be killed.
func Controller(args []string, w io.Writer) error {
	fs := cli.NewFlags("demo-controller")
	broker := fs.String("broker", "", "")
	device := fs.String("device", "arm1", "")
	passwordFile := fs.String("password-file", "", "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// 3 s: the kill ends the lease at once (the will), whatever the TTL;
	// at 1 s a loaded machine (qemu under make test-arm) sometimes
	// acknowledged no heartbeat for a whole TTL, and the controller lost
	// its lease before it reached its hold.
	c, err := client.Dial(ctx, client.Options{Broker: *broker, Agent: "planner", Device: *device, TTL: 3 * time.Second,
		PasswordFile: *passwordFile})
	if err != nil {
		return err
	}
	l, _ := c.Lease()
	fmt.Fprintf(w, "hello: lease %s epoch %d, TTL %v\n", l.ID, l.Epoch, l.TTL)
	saga, err := c.Begin(ctx)
	if err != nil {
		return err
	}
	for _, m := range pick[:3] {
		res, err := saga.Step(ctx, m.actuator, m.value)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "step %d: %s %g → %g\n", res.Step, m.actuator, res.Prior, res.Value)
	}
	fmt.Fprintln(w, "holding the arm mid-saga (heartbeating every TTL/4)")
	<-c.Lost()
	return c.Err()
}
