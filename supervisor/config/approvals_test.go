package config_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/approval"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// writeKey writes a key pair under dir and returns the public key's path.
func writeKey(t *testing.T, dir, name string) string {
	t.Helper()
	pub, priv, err := approval.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := approval.WriteKeyPair(path, pub, priv, ""); err != nil {
		t.Fatal(err)
	}
	return path + ".pub"
}

func approvalsYAML(approvals string) string {
	return `device: arm1
actuators:
  base: {kind: servo, driver: sim, min: -90, max: 90}
  valve:
    kind: digital
    driver: sim
    requires_approval: true
` + approvals
}

func TestApprovalsConfig(t *testing.T) {
	dir := t.TempDir()
	pub := writeKey(t, dir, "op.key")
	pub2 := writeKey(t, dir, "op2.key")
	// Public keys are not secret: a world-readable one is fine.
	if err := os.Chmod(pub, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse([]byte(approvalsYAML("approvals:\n  public_keys: ["+pub+", "+pub2+"]\n  max_ttl: 1m\n")), "arm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Approvals.Keys) != 2 || c.Approvals.MaxTTL != time.Minute {
		t.Fatalf("approvals %+v", c.Approvals)
	}
	if got := c.ApprovalRequired(); len(got) != 1 || got[0] != "valve" {
		t.Fatalf("ApprovalRequired %v", got)
	}
	if c.Actuators["base"].RequiresApproval {
		t.Fatal("requires_approval defaults to true")
	}
	d := config.Default()
	if d.Approvals.MaxTTL != 5*time.Minute || len(d.Approvals.PublicKeys) != 0 || len(d.ApprovalRequired()) != 0 {
		t.Fatalf("default approvals %+v", d.Approvals)
	}

	notKey := filepath.Join(dir, "not-a-key")
	os.WriteFile(notKey, []byte("hello\n"), 0o644)
	privFile := filepath.Join(dir, "op.key")
	for _, tt := range []struct {
		name, yaml string
		line       int
		want       string
	}{
		{"requires approval, no keys", approvalsYAML(""), 7,
			"arm.yaml:7:24: actuators.valve.requires_approval: valve requires approval but approvals.public_keys lists no key"},
		{"requires approval, empty list", approvalsYAML("approvals:\n  public_keys: []\n"), 7,
			"actuators.valve.requires_approval: valve requires approval"},
		{"max_ttl over an hour", approvalsYAML("approvals:\n  public_keys: [" + pub + "]\n  max_ttl: 61m\n"), 10,
			"approvals.max_ttl: 1h1m0s is outside 1s..1h0m0s"},
		{"max_ttl under a second", approvalsYAML("approvals:\n  public_keys: [" + pub + "]\n  max_ttl: 500ms\n"), 10,
			"approvals.max_ttl: 500ms is outside 1s..1h0m0s"},
		{"missing key file", approvalsYAML("approvals:\n  public_keys:\n    - " + pub + "\n    - " + dir + "/nope.pub\n"), 11,
			"approvals.public_keys[1]: stat " + dir + "/nope.pub: no such file"},
		{"malformed key file", approvalsYAML("approvals:\n  public_keys: [" + notKey + "]\n"), 9,
			"approvals.public_keys[0]: " + notKey + ": want one line"},
		{"a private key listed as public", approvalsYAML("approvals:\n  public_keys: [" + privFile + "]\n"), 9,
			"holds an ed25519-private key"},
		{"key listed twice", approvalsYAML("approvals:\n  public_keys: [" + pub + ", " + pub + "]\n"), 9,
			"is listed twice"},
		{"not a list", approvalsYAML("approvals:\n  public_keys: " + pub + "\n"), 9,
			"approvals.public_keys: want a list"},
		{"not a string", approvalsYAML("approvals:\n  public_keys: [1]\n"), 9,
			"approvals.public_keys[0]: want a string"},
		{"not a bool", strings.Replace(approvalsYAML(""), "requires_approval: true", "requires_approval: yes-please", 1), 7,
			"actuators.valve.requires_approval: want true or false"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tt.yaml), "arm.yaml")
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "arm.yaml:"+itoa(tt.line)+":") {
				t.Fatalf("error:\n%v\nwant %q at line %d", err, tt.want, tt.line)
			}
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
