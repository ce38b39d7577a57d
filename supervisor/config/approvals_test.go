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
	if c.Actuators["base"].RequiresApproval != 0 {
		t.Fatal("requires_approval defaults to true")
	}
	d := config.Default()
	if d.Approvals.MaxTTL != 5*time.Minute || len(d.Approvals.PublicKeys) != 0 || len(d.ApprovalRequired()) != 0 {
		t.Fatalf("default approvals %+v", d.Approvals)
	}

	pubCopy := filepath.Join(dir, "copy.pub")
	if b, err := os.ReadFile(pub); err != nil || os.WriteFile(pubCopy, b, 0o644) != nil {
		t.Fatal(err)
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
			"actuators.valve.requires_approval: want true, false or how many approvals (0..8)"},
		{"more approvals than keys", strings.Replace(approvalsYAML("approvals:\n  public_keys: ["+pub+", "+pub2+"]\n"), "requires_approval: true", "requires_approval: 3", 1), 7,
			"actuators.valve.requires_approval: valve requires 3 approvals from distinct keys but approvals.public_keys lists 2"},
		{"negative count", strings.Replace(approvalsYAML("approvals:\n  public_keys: ["+pub+"]\n"), "requires_approval: true", "requires_approval: -1", 1), 7,
			"actuators.valve.requires_approval: -1 is outside 0..8"},
		{"count over the per-step bound", strings.Replace(approvalsYAML("approvals:\n  public_keys: ["+pub+"]\n"), "requires_approval: true", "requires_approval: 9", 1), 7,
			"actuators.valve.requires_approval: 9 is outside 0..8"},
		{"a fraction", strings.Replace(approvalsYAML("approvals:\n  public_keys: ["+pub+"]\n"), "requires_approval: true", "requires_approval: 1.5", 1), 7,
			"want true, false or how many approvals"},
		{"one key in two files", approvalsYAML("approvals:\n  public_keys: [" + pub + ", " + pubCopy + "]\n"), 9,
			"approvals.public_keys[1]: holds key"},
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

// TestApprovalsCount: requires_approval is true (1), false (0) or a count
// up to the keys listed; Build hands the count to the supervisor.
func TestApprovalsCount(t *testing.T) {
	dir := t.TempDir()
	var pubs []string
	for i := range 3 {
		pubs = append(pubs, writeKey(t, dir, "op"+itoa(i)+".key"))
	}
	keys := "approvals:\n  public_keys: [" + strings.Join(pubs, ", ") + "]\n"
	for in, want := range map[string]config.Approvers{"true": 1, "false": 0, "0": 0, "1": 1, "2": 2, "3": 3} {
		c, err := config.Parse([]byte(strings.Replace(approvalsYAML(keys), "requires_approval: true", "requires_approval: "+in, 1)), "arm.yaml")
		if err != nil {
			t.Fatalf("requires_approval: %s: %v", in, err)
		}
		if got := c.Actuators["valve"].RequiresApproval; got != want {
			t.Errorf("requires_approval: %s decoded to %d, want %d", in, got, want)
		}
		if got := len(c.ApprovalRequired()); got != min(int(want), 1) {
			t.Errorf("requires_approval: %s: ApprovalRequired lists %d actuators", in, got)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
