package supervisor

import (
	"crypto/ed25519"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/approval"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// newMofNRig is an approval rig whose gripper requires need approvals from
// distinct keys, n keys trusted; it returns the operators' private keys.
func newMofNRig(t *testing.T, need, n int) (*approvalRig, []ed25519.PrivateKey) {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Agents.Allow = nil
	cfg.Journal.Dir = filepath.Join(dir, "journal")
	cfg.Sim.World = filepath.Join(dir, "world")
	g := cfg.Actuators["gripper"]
	g.RequiresApproval = config.Approvers(need)
	cfg.Actuators["gripper"] = g
	var privs []ed25519.PrivateKey
	for range n {
		pub, priv, err := approval.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		cfg.Approvals.Keys = append(cfg.Approvals.Keys, pub)
		privs = append(privs, priv)
	}
	r := &approvalRig{t: t, cfg: cfg, priv: privs[0], now: time.Now()}
	r.start()
	return r, privs
}

func (r *approvalRig) signBy(priv ed25519.PrivateKey, saga uint64, actuator string, value float64) string {
	r.t.Helper()
	now := r.clock()
	tok, err := approval.Sign(priv, approval.Claims{Device: r.cfg.Device, Actuator: actuator, Value: value, Saga: saga,
		NotBefore: now, NotAfter: now.Add(time.Minute)})
	if err != nil {
		r.t.Fatal(err)
	}
	return tok
}

func (a *agent) stepWith(saga uint64, actuator string, value float64, tokens ...string) api.Reply {
	return a.r.do(api.Request{Agent: a.name, Op: api.OpStep, Lease: a.lease, Epoch: a.epoch, Saga: saga,
		Actuator: actuator, Value: value, Approval: api.JoinApprovals(tokens...)})
}

// TestApprovalsTwoOfThree: a gripper requiring 2 approvals of 3 keys moves
// only with two good ones from two keys; every misuse has its code, moves
// nothing and spends none of the nonces sent with it.
func TestApprovalsTwoOfThree(t *testing.T) {
	r, k := newMofNRig(t, 2, 3)
	a := r.hello("planner")
	saga := a.begin()
	want := func(what string, rep api.Reply, code string) {
		t.Helper()
		if code == "" && !rep.OK || code != "" && (rep.OK || rep.Code != code) {
			t.Fatalf("%s: %+v, want %q", what, rep, code)
		}
	}
	at := func(what string, v float64) {
		t.Helper()
		if g := r.commanded("gripper"); g != v {
			t.Fatalf("%s: gripper at %v, want %v", what, g, v)
		}
	}
	start := r.commanded("gripper")
	sign := func(i int, v float64) string { return r.signBy(k[i], saga, "gripper", v) }

	for _, as := range r.s.Status().Actuators {
		if want := map[string]int{"gripper": 2}[as.Name]; as.ApprovalsRequired != want {
			t.Fatalf("status: %s approvals_required %d, want %d", as.Name, as.ApprovalsRequired, want)
		}
	}
	want("none", a.stepWith(saga, "gripper", 30), "APPROVAL_REQUIRED")
	a0 := sign(0, 30)
	want("one", a.stepWith(saga, "gripper", 30, a0), "APPROVALS_TOO_FEW")
	want("one key twice", a.stepWith(saga, "gripper", 30, a0, sign(0, 30)), "APPROVAL_DUPLICATE_KEY")
	want("one token twice", a.stepWith(saga, "gripper", 30, a0, a0), "APPROVAL_DUPLICATE")
	_, stranger, _ := approval.GenerateKey()
	want("a stranger's key", a.stepWith(saga, "gripper", 30, a0, r.signBy(stranger, saga, "gripper", 30)), "APPROVAL_INVALID")
	want("one for another value", a.stepWith(saga, "gripper", 30, a0, sign(1, 31)), "APPROVAL_MISMATCH")
	now := r.clock()
	old, _ := approval.Sign(k[1], approval.Claims{Device: r.cfg.Device, Actuator: "gripper", Value: 30, Saga: saga,
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(-10 * time.Second)})
	want("one expired", a.stepWith(saga, "gripper", 30, a0, old), "APPROVAL_EXPIRED")
	at("after every misuse", start)

	// A step refused by a limit spends neither approval.
	b99, c99 := sign(1, 99), sign(2, 99)
	want("over the limit", a.stepWith(saga, "gripper", 99, b99, c99), "LIMIT_MAX")
	if n := r.s.approve.spent.len(); n != 0 {
		t.Fatalf("%d nonces spent by refused steps, want 0", n)
	}

	// Two from distinct keys: admitted, both spent.
	b0 := sign(1, 30)
	want("two of three", a.stepWith(saga, "gripper", 30, a0, b0), "")
	at("approved", 30)
	if n := r.s.approve.spent.len(); n != 2 {
		t.Fatalf("%d nonces spent, want 2", n)
	}
	// One spent signature replayed beside a fresh one: refused, and the
	// fresh one is not spent, so it still counts in the next step.
	c0 := sign(2, 30)
	want("a fresh one and a spent one", a.stepWith(saga, "gripper", 30, c0, b0), "APPROVAL_REPLAYED")
	want("both spent ones", a.stepWith(saga, "gripper", 30, a0, b0), "APPROVAL_REPLAYED")
	want("the fresh one was not spent", a.stepWith(saga, "gripper", 30, c0, sign(0, 30)), "")
	// All three keys: more than required is fine, each counts once.
	want("three of three", a.stepWith(saga, "gripper", 40, sign(0, 40), sign(1, 40), sign(2, 40)), "")
	at("three approved", 40)
	if n := r.s.approve.spent.len(); n != 7 {
		t.Fatalf("%d nonces spent, want 7", n)
	}
	// The INTENT of each approved step names its approvers' keys and
	// nonces, for the audit trail.
	if err := r.s.journal.Sync(); err != nil {
		t.Fatal(err)
	}
	var notes []string
	err := wal.Scan(r.s.journal.Dir(), wal.Options{}, 1, func(wr wal.Record) error {
		rec, err := rollback.DecodeRecord(wr.Type, wr.Payload)
		if err == nil && rec.Type == rollback.RecIntent && rec.Actuator == "gripper" {
			notes = append(notes, rec.Message)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	id := func(i int) string { return approval.KeyID(k[i].Public().(ed25519.PublicKey)) }
	if len(notes) != 3 || !strings.Contains(notes[0], id(0)+"/") || !strings.Contains(notes[0], id(1)+"/") || strings.Contains(notes[0], id(2)) ||
		!strings.Contains(notes[2], id(0)+"/") || !strings.Contains(notes[2], id(1)+"/") || !strings.Contains(notes[2], id(2)+"/") {
		t.Fatalf("the approved steps' INTENT messages %q do not name their approvers (%s, %s, %s)", notes, id(0), id(1), id(2))
	}
	// Approvals on an actuator that needs none are checked as a set too.
	want("base, one key twice", a.stepWith(saga, "base", 10, r.signBy(k[0], saga, "base", 10), r.signBy(k[0], saga, "base", 10)), "APPROVAL_DUPLICATE_KEY")
	want("base, none", a.stepWith(saga, "base", 10), "")
}

// TestApprovalsTrueIsOne: requires_approval: true still means one
// approval, and a second one from another key is welcome but not needed.
func TestApprovalsTrueIsOne(t *testing.T) {
	r, k := newMofNRig(t, 1, 2)
	a := r.hello("planner")
	saga := a.begin()
	if rep := a.stepWith(saga, "gripper", 30, r.signBy(k[1], saga, "gripper", 30)); !rep.OK {
		t.Fatalf("one approval of a one-approval actuator: %+v", rep)
	}
	if rep := a.stepWith(saga, "gripper", 31, r.signBy(k[0], saga, "gripper", 31), r.signBy(k[1], saga, "gripper", 31)); !rep.OK {
		t.Fatalf("two approvals of a one-approval actuator: %+v", rep)
	}
}
