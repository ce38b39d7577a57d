package sim

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// helperEnv carries the world file path to the helper process; its presence
// is what turns TestHelperProcess from a no-op into the helper.
const helperEnv = "SAGA_SIM_HELPER_WORLD"

// TestHelperProcess is not a test: TestWorldSurvivesKill runs the test
// binary again with only this function and helperEnv set, so that a real
// process writes to a world file and is then killed with SIGKILL.
func TestHelperProcess(t *testing.T) {
	path := os.Getenv(helperEnv)
	if path == "" {
		return
	}
	w, err := OpenWorld(path)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	steps := []func() error{
		func() error { return w.Servo("base", 0, 0).Set(ctx, 45) },
		func() error { return w.Servo("shoulder", 0, 0).Set(ctx, -30) },
		func() error { return w.Servo("gripper", 0, 0).Set(ctx, 20) },
		func() error { return w.Servo("gripper", 0, 0).Halt() },
		func() error { return w.Digital("pump", 0).Set(ctx, 1) },
		func() error { return w.Pulse("kicker").Set(ctx, 1) },
		func() error { return w.Supply("battery", 8.4).SetVolts(6.9) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			fmt.Println("error:", err)
			os.Exit(2)
		}
	}
	// Tell the parent the effects are done, then wait, world still open, to
	// be killed. Sleeping rather than blocking forever, because a process
	// whose goroutines all block is stopped by the runtime as deadlocked.
	fmt.Println("ready")
	time.Sleep(time.Hour)
	os.Exit(3)
}

func TestWorldSurvivesKill(t *testing.T) {
	path := worldPath(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l := sc.Text(); l == "ready" || strings.HasPrefix(l, "error:") {
				ready <- l
				return
			}
		}
		ready <- "helper ended without a word"
	}()
	select {
	case l := <-ready:
		if l != "ready" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal(l)
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("helper never got ready")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Wait reaps the process, so its file and lock are gone before we open.
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("helper did not die by the kill: %v", err)
	}

	w := openWorld(t, path)
	got := w.Snapshot()
	check := func(name string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("%s left as %+v", name, got[name])
		}
	}
	check("base", got["base"].Position == 45)
	check("shoulder", got["shoulder"].Position == -30)
	check("gripper", got["gripper"].Position == 20 && got["gripper"].Detached)
	check("pump", got["pump"].Position == 1)
	check("kicker", got["kicker"].Kicks == 1)
	check("battery", got["battery"].Position == 6.9)
	// The new process's initial values do not override what it finds.
	if v := readBack(t, w.Servo("base", 0, 0)); v != 45 {
		t.Errorf("base reopened at %g, want 45", v)
	}
	t.Logf("left standing:\n%s", w.Format())
}
