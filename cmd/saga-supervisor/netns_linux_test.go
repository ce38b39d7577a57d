package main

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
)

// netnsEnv names the test a child process runs inside its own network
// namespace (inOwnNetns).
const netnsEnv = "SAGA_TEST_NETNS"

// inOwnNetns runs the calling (top-level) test again in a child of this
// test binary, in a new user and network namespace with only a loopback:
// there the embedded default's fixed ports (127.0.0.1:1883 and :8080) are
// free however busy the machine. It returns true in that child (the test
// goes on there) and false in the parent, which has then reported the
// child's result. Where the kernel gives no such namespace the test is
// skipped.
func inOwnNetns(t *testing.T) bool {
	t.Helper()
	if os.Getenv(netnsEnv) == t.Name() {
		if err := testtool.LoopbackUp(); err != nil {
			t.Skipf("cannot bring up the loopback of a network namespace of our own: %v", err)
		}
		return true
	}
	args := []string{"-test.run=^" + t.Name() + "$", "-test.v", "-test.count=1"}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), netnsEnv+"="+t.Name(), testBinaryEnv+"="+binary)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
		// Root of the new user namespace (this user outside it), so that
		// the child may bring its loopback up.
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		GidMappingsEnableSetgroups: false,
	}
	out, err := cmd.CombinedOutput()
	if err != nil && cmd.ProcessState == nil {
		t.Skipf("no network namespace of our own here: %v", err)
	}
	t.Logf("in a network namespace of its own:\n%s", out)
	switch {
	case err != nil:
		t.Fatalf("the test failed in its network namespace: %v", err)
	case strings.Contains(string(out), "--- SKIP: "+t.Name()):
		t.Skip("skipped in its network namespace")
	case !strings.Contains(string(out), "--- PASS: "+t.Name()):
		t.Fatal("the test did not run in its network namespace")
	}
	return false
}
