package supervisor

import (
	"crypto/ed25519"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/approval"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// approvalRig is a supervisor of the demo arm whose gripper requires
// approval, with the operator's key and a clock the test sets.
type approvalRig struct {
	t    *testing.T
	cfg  *config.Config
	priv ed25519.PrivateKey
	s    *Supervisor
	b    *Built
	mu   sync.Mutex
	now  time.Time
	n    int
}

func newApprovalRig(t *testing.T) *approvalRig {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Agents.Allow = nil // agents of any name (an intruder among them); permissions are tested on their own
	cfg.Journal.Dir = filepath.Join(dir, "journal")
	cfg.Sim.World = filepath.Join(dir, "world")
	g := cfg.Actuators["gripper"]
	g.RequiresApproval = 1
	cfg.Actuators["gripper"] = g
	pub, priv, err := approval.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Approvals.Keys = []ed25519.PublicKey{pub}
	r := &approvalRig{t: t, cfg: cfg, priv: priv, now: time.Now()}
	r.start()
	return r
}

func (r *approvalRig) clock() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.now
}

func (r *approvalRig) start() {
	r.t.Helper()
	b, err := FromConfig(r.cfg, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	b.Options.Approvals.Now = r.clock
	s, err := New(b.Options)
	if err != nil {
		b.Close()
		r.t.Fatal(err)
	}
	r.s, r.b = s, b
	r.t.Cleanup(func() { s.Close(); b.Close() })
}

func (r *approvalRig) stop() {
	r.s.Close()
	r.b.Close()
}

func (r *approvalRig) sign(saga uint64, actuator string, value float64, from, until time.Duration) string {
	r.t.Helper()
	now := r.clock()
	tok, err := approval.Sign(r.priv, approval.Claims{Device: r.cfg.Device, Actuator: actuator, Value: value, Saga: saga,
		NotBefore: now.Add(from), NotAfter: now.Add(until)})
	if err != nil {
		r.t.Fatal(err)
	}
	return tok
}

func (r *approvalRig) do(req api.Request) api.Reply {
	r.n++
	if req.ID == "" {
		req.ID = fmt.Sprint("r", r.n)
	}
	return r.s.Handle(req, time.Now())
}

func (r *approvalRig) commanded(name string) float64 {
	return r.b.World.Snapshot()[name].Commanded
}

type agent struct {
	r     *approvalRig
	name  string
	lease string
	epoch uint64
}

func (r *approvalRig) hello(name string) *agent {
	r.t.Helper()
	h := r.do(api.Request{Agent: name, Op: api.OpHello, TTLMS: 60000})
	if !h.OK {
		r.t.Fatalf("hello: %+v", h)
	}
	return &agent{r: r, name: name, lease: h.Lease, epoch: h.Epoch}
}

func (a *agent) begin() uint64 {
	a.r.t.Helper()
	rep := a.r.do(api.Request{Agent: a.name, Op: api.OpBegin, Lease: a.lease, Epoch: a.epoch})
	if !rep.OK {
		a.r.t.Fatalf("begin: %+v", rep)
	}
	return rep.Saga
}

func (a *agent) step(saga uint64, actuator string, value float64, token string) api.Reply {
	return a.r.do(api.Request{Agent: a.name, Op: api.OpStep, Lease: a.lease, Epoch: a.epoch, Saga: saga,
		Actuator: actuator, Value: value, Approval: token})
}

func TestApprovals(t *testing.T) {
	r := newApprovalRig(t)
	a := r.hello("planner")
	saga := a.begin()
	want := func(what string, rep api.Reply, code string) {
		t.Helper()
		if code == "" && !rep.OK || code != "" && (rep.OK || rep.Code != code) {
			t.Fatalf("%s: %+v, want %q", what, rep, code)
		}
	}
	gripper := r.commanded("gripper")

	// No approval: refused, nothing moves.
	want("no approval", a.step(saga, "gripper", 30, ""), "APPROVAL_REQUIRED")
	if g := r.commanded("gripper"); g != gripper {
		t.Fatalf("gripper moved to %v without an approval", g)
	}
	// An actuator that needs none moves without one.
	want("base, no approval", a.step(saga, "base", 10, ""), "")

	// A valid approval moves it.
	tok30 := r.sign(saga, "gripper", 30, 0, 30*time.Second)
	want("approved", a.step(saga, "gripper", 30, tok30), "")
	if g := r.commanded("gripper"); g != 30 {
		t.Fatalf("gripper at %v after an approved step to 30", g)
	}
	want("approved 40", a.step(saga, "gripper", 40, r.sign(saga, "gripper", 40, 0, 30*time.Second)), "")
	// The same approval again, in a new step id: replayed, nothing moves.
	want("replay", a.step(saga, "gripper", 30, tok30), "APPROVAL_REPLAYED")
	if g := r.commanded("gripper"); g != 40 {
		t.Fatalf("a replayed approval moved the gripper to %v", g)
	}

	// Expired, not yet valid, too long a validity.
	want("expired", a.step(saga, "gripper", 20, r.sign(saga, "gripper", 20, -time.Minute, -3*time.Second)), "APPROVAL_EXPIRED")
	want("not yet valid", a.step(saga, "gripper", 20, r.sign(saga, "gripper", 20, 3*time.Second, time.Minute)), "APPROVAL_EXPIRED")
	want("within skew", a.step(saga, "gripper", 21, r.sign(saga, "gripper", 21, time.Second, time.Minute)), "")
	want("ttl over max", a.step(saga, "gripper", 20, r.sign(saga, "gripper", 20, 0, 6*time.Minute)), "APPROVAL_INVALID")
	// For another saga, value, actuator, device.
	want("other saga", a.step(saga, "gripper", 20, r.sign(saga+1, "gripper", 20, 0, time.Minute)), "APPROVAL_MISMATCH")
	want("other value", a.step(saga, "gripper", 20, r.sign(saga, "gripper", 20.000001, 0, time.Minute)), "APPROVAL_MISMATCH")
	want("other actuator", a.step(saga, "gripper", 20, r.sign(saga, "elbow", 20, 0, time.Minute)), "APPROVAL_MISMATCH")
	other, _ := approval.Sign(r.priv, approval.Claims{Device: "arm2", Actuator: "gripper", Value: 20, Saga: saga,
		NotBefore: r.clock(), NotAfter: r.clock().Add(time.Minute)})
	want("other device", a.step(saga, "gripper", 20, other), "APPROVAL_MISMATCH")
	_, stranger, _ := approval.GenerateKey()
	forged, _ := approval.Sign(stranger, approval.Claims{Device: "arm1", Actuator: "gripper", Value: 20, Saga: saga,
		NotBefore: r.clock(), NotAfter: r.clock().Add(time.Minute)})
	want("unknown key", a.step(saga, "gripper", 20, forged), "APPROVAL_INVALID")
	want("garbage", a.step(saga, "gripper", 20, "bm90IGEgdG9rZW4"), "APPROVAL_INVALID")
	// An approval sent where none is needed is still checked.
	want("bad approval on base", a.step(saga, "base", 11, forged), "APPROVAL_INVALID")
	want("good approval on base", a.step(saga, "base", 12, r.sign(saga, "base", 12, 0, time.Minute)), "")
	if g := r.commanded("gripper"); g != 21 {
		t.Fatalf("refused approvals moved the gripper to %v", g)
	}

	// A step the engine's gate refuses for another reason does not spend
	// its approval: not the owner, a deadline passed, a limit.
	tok25 := r.sign(saga, "gripper", 25, 0, time.Minute)
	b := r.hello("intruder")
	want("another agent's saga", b.step(saga, "gripper", 25, tok25), "SAGA_NOT_OWNER")
	late := r.s.Handle(api.Request{ID: "late", Agent: a.name, Op: api.OpStep, Lease: a.lease, Epoch: a.epoch, Saga: saga,
		Actuator: "gripper", Value: 25, DeadlineMS: 10, Approval: tok25}, time.Now().Add(-time.Second))
	want("deadline passed", late, "DEADLINE_PASSED")
	want("then in time", a.step(saga, "gripper", 25, tok25), "")
	want("and never again", a.step(saga, "gripper", 25, tok25), "APPROVAL_REPLAYED")
	tok99 := r.sign(saga, "gripper", 99, 0, time.Minute)
	want("over the limit", a.step(saga, "gripper", 99, tok99), "LIMIT_MAX")
	want("over the limit again: not replayed", a.step(saga, "gripper", 99, tok99), "LIMIT_MAX")

	// Expiry makes a spent nonce forgettable, and the approval is refused
	// as expired from then on.
	if n := r.s.approve.spent.len(); n != 5 {
		t.Fatalf("%d nonces remembered, want 5", n)
	}

	// Every refusal is journaled with its code.
	if err := r.s.journal.Sync(); err != nil {
		t.Fatal(err)
	}
	refused := map[string]int{}
	err := wal.Scan(r.s.journal.Dir(), wal.Options{}, 1, func(wr wal.Record) error {
		rec, err := rollback.DecodeRecord(wr.Type, wr.Payload)
		if err == nil && rec.Type == rollback.RecRefused {
			refused[rec.Code]++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for code, n := range map[string]int{"APPROVAL_REQUIRED": 1, "APPROVAL_REPLAYED": 2, "APPROVAL_EXPIRED": 2,
		"APPROVAL_INVALID": 4, "APPROVAL_MISMATCH": 4} {
		if refused[code] != n {
			t.Errorf("journal has %d REFUSED %s, want %d (all: %v)", refused[code], code, n, refused)
		}
	}
}

// TestApprovalNotReplayableAfterRestart: the spent nonces are in memory
// only, yet an approval cannot move anything after a restart, because the
// saga it names is closed and saga ids are never handed out again.
func TestApprovalNotReplayableAfterRestart(t *testing.T) {
	r := newApprovalRig(t)
	a := r.hello("planner")
	saga := a.begin()
	used := r.sign(saga, "gripper", 30, 0, time.Minute)
	unused := r.sign(saga, "gripper", 31, 0, time.Minute)
	if rep := a.step(saga, "gripper", 30, used); !rep.OK {
		t.Fatalf("approved step: %+v", rep)
	}
	r.stop() // the saga is unwound; a crash would leave it to recovery, which finishes it the same way
	r.start()
	if n := r.s.approve.spent.len(); n != 0 {
		t.Fatalf("a new process remembers %d nonces", n)
	}
	a = r.hello("planner")
	for _, tok := range []struct {
		name  string
		v     float64
		token string
	}{{"used", 30, used}, {"unused", 31, unused}} {
		if rep := a.step(saga, "gripper", tok.v, tok.token); rep.OK || rep.Code != "SAGA_UNKNOWN" {
			t.Fatalf("%s approval of saga %d after a restart: %+v, want SAGA_UNKNOWN", tok.name, saga, rep)
		}
	}
	for range 3 {
		if s := a.begin(); s <= saga {
			t.Fatalf("saga id %d handed out after saga %d: ids must never repeat", s, saga)
		}
	}
	if g := r.commanded("gripper"); g != 0 {
		t.Fatalf("gripper at %v, want 0 (the unwind put it back, nothing moved it since)", g)
	}
}

func TestSpentSetBoundedAndExpires(t *testing.T) {
	s := newSpentSet(2)
	now := time.Now()
	n := func(b byte) (x [approval.NonceLen]byte) { x[0] = b; return }
	one := func(nonce [approval.NonceLen]byte, expires time.Time) []spent {
		return []spent{{nonce: nonce, expires: expires}}
	}
	if err := s.spend(one(n(1), now.Add(time.Second).Round(0)), now); err != nil {
		t.Fatal(err)
	}
	if err := s.spend(one(n(1), now.Add(time.Second).Round(0)), now); err == nil || err.Code != "APPROVAL_REPLAYED" {
		t.Fatalf("replay: %v", err)
	}
	if err := s.spend(one(n(2), now.Add(time.Minute).Round(0)), now); err != nil {
		t.Fatal(err)
	}
	if err := s.spend(one(n(3), now.Add(time.Minute).Round(0)), now); err == nil || err.Code != "APPROVALS_FULL" {
		t.Fatalf("full: %v", err)
	}
	// After the first expires (both clocks), it is forgotten and room is made.
	later := now.Add(2 * time.Second)
	if err := s.spend(one(n(3), now.Add(time.Minute).Round(0)), later); err != nil {
		t.Fatal(err)
	}
	if err := s.spend(one(n(2), now.Add(time.Minute).Round(0)), later); err == nil || err.Code != "APPROVAL_REPLAYED" {
		t.Fatalf("unexpired nonce forgotten: %v", err)
	}
}
