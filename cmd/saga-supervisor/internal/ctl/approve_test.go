package ctl

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/approval"
	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// ctlOffline runs an op that needs no broker.
func ctlOffline(args ...string) (string, string, int) {
	var out ctlBuffer
	err := Run(args, &out)
	return out.String(), errText(err), cli.Status(err)
}

func TestCtlKeygenApprove(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "op.key")
	out, msg, code := ctlOffline("keygen", "--out", key)
	if code != 0 || !strings.Contains(out, "key id") {
		t.Fatalf("keygen exited %d (%s): %s", code, msg, out)
	}
	if st, err := os.Stat(key); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("private key: %v %v", st, err)
	}
	pub, err := approval.LoadPublicKey(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(key)
	if _, msg, code := ctlOffline("keygen", "--out", key); code != 1 || !strings.Contains(msg, "exists") {
		t.Fatalf("keygen over an existing key exited %d: %s", code, msg)
	}
	if after, _ := os.ReadFile(key); string(after) != string(before) {
		t.Fatal("keygen overwrote a key")
	}
	if _, msg, code := ctlOffline("keygen"); code != 2 || !strings.Contains(msg, "--out") {
		t.Fatalf("keygen without --out exited %d: %s", code, msg)
	}

	out, msg, code = ctlOffline("approve", "--key", key, "--device", "arm1", "--actuator", "gripper", "--value", "30.5", "--saga", "7", "--ttl", "10s")
	if code != 0 {
		t.Fatalf("approve exited %d: %s", code, msg)
	}
	tok := strings.TrimSuffix(out, "\n")
	if strings.ContainsAny(tok, " \n") {
		t.Fatalf("approve printed more than the token: %q", out)
	}
	c, err := approval.Verify([]ed25519.PublicKey{pub}, tok, time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Check("arm1", "gripper", 30.5, 7); err != nil || c.NotAfter.Sub(c.NotBefore) != 10*time.Second {
		t.Fatalf("claims %+v: %v", c, err)
	}
	for _, bad := range [][]string{
		{"approve", "--key", key, "--actuator", "gripper", "--saga", "7"},                                // no value
		{"approve", "--key", key, "--actuator", "gripper", "--value", "1"},                               // no saga
		{"approve", "--key", key, "--value", "1", "--saga", "7"},                                         // no actuator
		{"approve", "--actuator", "gripper", "--value", "1", "--saga", "7"},                              // no key
		{"approve", "--key", key, "--actuator", "gripper", "--value", "1", "--saga", "7", "--ttl", "2h"}, // ttl
		{"approve", "--key", key + ".pub", "--actuator", "gripper", "--value", "1", "--saga", "7"},       // a public key
	} {
		if _, msg, code := ctlOffline(bad...); code != 2 {
			t.Errorf("%q exited %d: %s", bad, code, msg)
		}
	}
	os.Chmod(key, 0o644)
	if _, msg, code := ctlOffline("approve", "--key", key, "--actuator", "gripper", "--value", "1", "--saga", "7"); code != 2 || !strings.Contains(msg, "mode 0644") {
		t.Fatalf("approve with a readable key exited %d: %s", code, msg)
	}
}

// TestCtlApprovalEndToEnd: keygen, then run-saga against a daemon whose
// gripper requires approval — refused without one, moved with one signed by
// --approval-key, refused with a bad one typed at --ask-approval.
func TestCtlApprovalEndToEnd(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "op.key")
	if _, msg, code := ctlOffline("keygen", "--out", key); code != 0 {
		t.Fatal(msg)
	}
	dd := daemontest.Start(t, "", func(c *config.Config) {
		g := c.Actuators["gripper"]
		g.RequiresApproval = 1
		c.Actuators["gripper"] = g
		c.Approvals.PublicKeys = []string{key + ".pub"}
		pub, err := approval.LoadPublicKey(key + ".pub")
		if err != nil {
			t.Fatal(err)
		}
		c.Approvals.Keys = []ed25519.PublicKey{pub}
	})
	d := &ctlDaemon{sup: dd.Sup, url: dd.URL()}

	out, msg, code := d.ctl(t, "run-saga", "base=10", "gripper=30")
	if code != 1 || !strings.Contains(msg, "APPROVAL_REQUIRED") {
		t.Fatalf("run-saga without approval exited %d: %s\n%s", code, msg, out)
	}
	if d.commanded("gripper") != 0 || d.commanded("base") != 0 {
		t.Fatalf("after refusal: gripper %v base %v", d.commanded("gripper"), d.commanded("base"))
	}

	out, msg, code = d.ctl(t, "run-saga", "--approval-key", key, "base=10", "gripper=30")
	if code != 0 || !strings.Contains(out, "committed") {
		t.Fatalf("run-saga --approval-key exited %d: %s\n%s", code, msg, out)
	}
	if d.commanded("gripper") != 30 || d.commanded("base") != 10 {
		t.Fatalf("after approved saga: gripper %v base %v", d.commanded("gripper"), d.commanded("base"))
	}

	old := stdin
	t.Cleanup(func() { stdin = old })
	stdin = strings.NewReader("not-a-token\n")
	out, msg, code = d.ctl(t, "run-saga", "--ask-approval", "gripper=40")
	if code != 1 || !strings.Contains(msg, "APPROVAL_INVALID") || !strings.Contains(out, "approval for saga") {
		t.Fatalf("run-saga --ask-approval with a bad token exited %d: %s\n%s", code, msg, out)
	}
	if d.commanded("gripper") != 30 {
		t.Fatalf("a bad approval moved the gripper to %v", d.commanded("gripper"))
	}
	if _, msg, code := d.ctl(t, "run-saga", "--ask-approval", "--approval-key", key, "gripper=40"); code != 2 {
		t.Fatalf("both approval flags exited %d: %s", code, msg)
	}
}

// TestCtlApproveSeveralKeys: approve with --key repeated prints one token
// per key, each verifying under its own key; one key given twice is a
// usage error.
func TestCtlApproveSeveralKeys(t *testing.T) {
	dir := t.TempDir()
	var pubs []ed25519.PublicKey
	var files []string
	for _, n := range []string{"alice.key", "bob.key"} {
		f := filepath.Join(dir, n)
		if _, msg, code := ctlOffline("keygen", "--out", f); code != 0 {
			t.Fatal(msg)
		}
		pub, err := approval.LoadPublicKey(f + ".pub")
		if err != nil {
			t.Fatal(err)
		}
		pubs, files = append(pubs, pub), append(files, f)
	}
	out, msg, code := ctlOffline("approve", "--key", files[0], "--key", files[1], "--device", "arm1", "--actuator", "gripper", "--value", "30", "--saga", "7")
	if code != 0 {
		t.Fatalf("approve exited %d: %s", code, msg)
	}
	toks := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(toks) != 2 {
		t.Fatalf("approve with two keys printed %q", out)
	}
	v, err := approval.NewVerifier(pubs, 0)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := v.Step(toks, time.Now(), "arm1", "gripper", 30, 7)
	if err != nil || cs[0].KeyID != approval.KeyID(pubs[0]) || cs[1].KeyID != approval.KeyID(pubs[1]) {
		t.Fatalf("the two tokens as one step's approvals: %+v, %v", cs, err)
	}
	if _, msg, code := ctlOffline("approve", "--key", files[0], "--key", files[0], "--actuator", "gripper", "--value", "30", "--saga", "7"); code != 2 || !strings.Contains(msg, "same key") {
		t.Fatalf("one key twice exited %d: %s", code, msg)
	}
}

// TestCtlTwoPersonApproval: run-saga against a daemon whose gripper needs
// two approvals from two keys — one key is too few, both move it, and a
// line of --ask-approval is split into several tokens.
func TestCtlTwoPersonApproval(t *testing.T) {
	dir := t.TempDir()
	var files []string
	var pubs []ed25519.PublicKey
	for _, n := range []string{"alice.key", "bob.key"} {
		f := filepath.Join(dir, n)
		if _, msg, code := ctlOffline("keygen", "--out", f); code != 0 {
			t.Fatal(msg)
		}
		pub, err := approval.LoadPublicKey(f + ".pub")
		if err != nil {
			t.Fatal(err)
		}
		files, pubs = append(files, f), append(pubs, pub)
	}
	dd := daemontest.Start(t, "", func(c *config.Config) {
		g := c.Actuators["gripper"]
		g.RequiresApproval = 2
		c.Actuators["gripper"] = g
		c.Approvals.PublicKeys = []string{files[0] + ".pub", files[1] + ".pub"}
		c.Approvals.Keys = pubs
	})
	d := &ctlDaemon{sup: dd.Sup, url: dd.URL()}

	if out, msg, code := d.ctl(t, "status"); code != 0 || !strings.Contains(out, "moves only with 2 operators' approvals") {
		t.Fatalf("status exited %d: %s\n%s", code, msg, out)
	}
	out, msg, code := d.ctl(t, "run-saga", "--approval-key", files[0], "gripper=30")
	if code != 1 || !strings.Contains(msg, "APPROVALS_TOO_FEW") {
		t.Fatalf("run-saga with one key exited %d: %s\n%s", code, msg, out)
	}
	out, msg, code = d.ctl(t, "run-saga", "--approval-key", files[0], "--approval-key", files[1], "gripper=30")
	if code != 0 || !strings.Contains(out, "committed") || d.commanded("gripper") != 30 {
		t.Fatalf("run-saga with two keys exited %d (gripper %v): %s\n%s", code, d.commanded("gripper"), msg, out)
	}
	old := stdin
	t.Cleanup(func() { stdin = old })
	stdin = strings.NewReader("not-a-token not-one-either\n")
	out, msg, code = d.ctl(t, "run-saga", "--ask-approval", "gripper=40")
	if code != 1 || !strings.Contains(msg, "APPROVAL_INVALID") {
		t.Fatalf("run-saga --ask-approval with two bad tokens exited %d: %s\n%s", code, msg, out)
	}
	stdin = strings.NewReader("not-a-token\n")
	out, msg, code = d.ctl(t, "run-saga", "--ask-approval", "gripper=40")
	if code != 1 || !strings.Contains(msg, "APPROVALS_TOO_FEW") || d.commanded("gripper") != 30 {
		t.Fatalf("run-saga --ask-approval with one token exited %d: %s\n%s", code, msg, out)
	}
}
