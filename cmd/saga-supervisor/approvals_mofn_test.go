package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/client"
	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
)

// TestTwoPersonApproval runs the real binary on Debian's mosquitto with the
// gripper marked requires_approval: 2 and three operator keys made by
// `ctl keygen`; the Go client sends tokens `ctl approve` signed. One
// signature is refused, one key twice is refused, two from two keys move
// the gripper, and a spent signature sent again beside a fresh one is
// refused without spending the fresh one. Each refusal moves nothing.
func TestTwoPersonApproval(t *testing.T) {
	broker := startMosquitto(t)
	dir := t.TempDir()
	var keys, pubs []string
	for _, who := range []string{"alice", "bob", "carol"} {
		k := filepath.Join(dir, who+".key")
		if out, code := run(t, "ctl", "keygen", "--out", k); code != 0 {
			t.Fatalf("keygen: exit %d\n%s", code, out)
		}
		keys, pubs = append(keys, k), append(pubs, k+".pub")
	}
	d := &daemonProc{t: t, http: fmt.Sprintf("127.0.0.1:%d", testtool.FreePort(t))}
	d.cfgPath = writeDaemonConfig(t, dir, broker, d.http)
	text, err := os.ReadFile(d.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	const gripper = "  gripper:\n    kind: servo\n"
	if !strings.Contains(string(text), gripper) {
		t.Fatalf("the default config no longer has %q", gripper)
	}
	cfg := strings.Replace(string(text), gripper, gripper+"    requires_approval: 2\n", 1) +
		"\napprovals:\n  public_keys: [" + strings.Join(pubs, ", ") + "]\n"
	if err := os.WriteFile(d.cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, "check-config", d.cfgPath); code != 0 {
		t.Fatalf("check-config: exit %d\n%s", code, out)
	}
	d.start()
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		d.cmd.Wait()
		if t.Failed() {
			t.Logf("the daemon's output:\n%s", lastBytes(d.out.String(), 8<<10))
		}
	})
	d.waitReady()

	ctx, cancel := context.WithTimeout(context.Background(), testtool.Slow(60*time.Second))
	defer cancel()
	c, err := client.Dial(ctx, client.Options{Broker: broker, Agent: "planner", Device: "arm1", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	saga, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	approve := func(key string, value float64) string {
		t.Helper()
		out, code := run(t, "ctl", "approve", "--key", key, "--device", "arm1", "--saga", fmt.Sprint(saga.ID()),
			"--actuator", "gripper", "--value", fmt.Sprint(value))
		if code != 0 {
			t.Fatalf("approve: exit %d\n%s", code, out)
		}
		return strings.TrimSpace(out)
	}
	gripperAt := func() float64 {
		t.Helper()
		for _, a := range d.status()["actuators"].([]any) {
			if m := a.(map[string]any); m["name"] == "gripper" {
				return m["commanded"].(float64)
			}
		}
		t.Fatal("no gripper in the status")
		return 0
	}
	refused := func(what, code string, tokens ...string) {
		t.Helper()
		_, err := saga.Step(ctx, "gripper", 30, client.WithApprovals(tokens...))
		if client.CodeOf(err) != code || !client.IsRefusal(err) {
			t.Fatalf("%s: %v, want %s", what, err, code)
		}
		if g := gripperAt(); g != 0 {
			t.Fatalf("%s moved the gripper to %v", what, g)
		}
	}

	a, b := approve(keys[0], 30), approve(keys[1], 30)
	refused("one signature", "APPROVALS_TOO_FEW", a)
	refused("one key twice", "APPROVAL_DUPLICATE_KEY", a, approve(keys[0], 30))
	refused("one signature twice", "APPROVAL_DUPLICATE", a, a)
	if _, err := saga.Step(ctx, "gripper", 30, client.WithApproval(a), client.WithApproval(b)); err != nil {
		t.Fatalf("two signatures from two keys: %v", err)
	}
	if g := gripperAt(); g != 30 {
		t.Fatalf("approved step: gripper at %v, want 30", g)
	}
	// A spent signature beside a fresh one: replayed, and the fresh one is
	// not spent by the refusal, so it still counts.
	fresh := approve(keys[2], 30)
	if _, err := saga.Step(ctx, "gripper", 30, client.WithApprovals(fresh, b)); client.CodeOf(err) != "APPROVAL_REPLAYED" {
		t.Fatalf("a fresh signature and a spent one: %v, want APPROVAL_REPLAYED", err)
	}
	if _, err := saga.Step(ctx, "gripper", 30, client.WithApprovals(a, b)); client.CodeOf(err) != "APPROVAL_REPLAYED" {
		t.Fatalf("both spent signatures again: %v, want APPROVAL_REPLAYED", err)
	}
	if _, err := saga.Step(ctx, "gripper", 30, client.WithApprovals(fresh, approve(keys[0], 30))); err != nil {
		t.Fatalf("the fresh signature, not spent by the refused step, with another: %v", err)
	}
	b40 := approve(keys[1], 40)
	if _, err := saga.Step(ctx, "gripper", 40, client.WithApprovals(approve(keys[2], 40), b40)); err != nil {
		t.Fatalf("two more: %v", err)
	}
	if err := saga.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	daemontest.WaitFor(t, "the gripper at 40", testtool.Slow(5*time.Second), func() bool { return gripperAt() == 40 })
}
