package main

import (
	"bufio"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A SIGTERM that arrives while the daemon is still starting (recovery,
// binding, connecting) is not the default action, an exit on the spot: it
// is held until the start is done and then stops the daemon the orderly
// way, which logs "stopped" and exits 0. Without the handler installed
// before the start, the process dies of the signal.
func TestSIGTERMDuringStartStopsInOrder(t *testing.T) {
	path := daemonConfig(t, `""`)
	cmd := exec.Command(binary, "run", "--config", path, "--log-format", "text")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var log []string
	deadline := time.After(30 * time.Second)
	for signalled := false; ; {
		select {
		case line, ok := <-lines:
			if !ok {
				err := cmd.Wait()
				all := strings.Join(log, "\n")
				if err != nil {
					t.Fatalf("a SIGTERM during the start: %v, want an orderly stop (exit 0)\n%s", err, all)
				}
				if !strings.Contains(all, "msg=stopped") {
					t.Fatalf("no orderly stop logged:\n%s", all)
				}
				return
			}
			log = append(log, line)
			// "starting" is logged just before the daemon starts: the
			// journal, the broker and the transport are still to come.
			if !signalled && strings.Contains(line, "msg=starting") {
				cmd.Process.Signal(syscall.SIGTERM)
				signalled = true
			}
		case <-deadline:
			t.Fatalf("the daemon neither stopped nor died within 30 s:\n%s", strings.Join(log, "\n"))
		}
	}
}
