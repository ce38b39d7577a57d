package lease

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// Every test with a clock runs in a synctest bubble: time.Now, timers and
// time.Sleep are fake there, so expiry is exact to the nanosecond and no
// test waits on real time.

type endCall struct {
	l      Lease
	reason string
	at     time.Time
}

// recorder is an OnEnd that remembers every call.
type recorder struct {
	mu    sync.Mutex
	calls []endCall
}

func (r *recorder) onEnd(l Lease, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, endCall{l, reason, time.Now()})
}

func (r *recorder) all() []endCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]endCall(nil), r.calls...)
}

// of returns the calls for one lease id.
func (r *recorder) of(id string) []endCall {
	var out []endCall
	for _, c := range r.all() {
		if c.l.ID == id {
			out = append(out, c)
		}
	}
	return out
}

func newManager(t *testing.T, o Options) (*Manager, *recorder) {
	t.Helper()
	rec := &recorder{}
	if o.OnEnd == nil {
		o.OnEnd = rec.onEnd
	}
	m, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m, rec
}

func wantCode(t *testing.T, err error, want Code) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	var le *Error
	if !errors.As(err, &le) {
		t.Fatalf("error %v is not a *lease.Error, want %s", err, want)
	}
	if le.Code != want {
		t.Fatalf("code %s (%v), want %s", le.Code, err, want)
	}
}

func hello(t *testing.T, m *Manager, agent string, ttl time.Duration) Lease {
	t.Helper()
	l, err := m.Hello(agent, ttl)
	if err != nil {
		t.Fatalf("hello %s: %v", agent, err)
	}
	return l
}

func TestNewOptions(t *testing.T) {
	bad := []struct {
		name string
		o    Options
	}{
		{"min above max", Options{MinTTL: 2 * time.Second, MaxTTL: time.Second}},
		{"negative min", Options{MinTTL: -time.Second}},
		{"default below min", Options{DefaultTTL: 10 * time.Millisecond}},
		{"default above max", Options{DefaultTTL: 2 * time.Minute}},
		{"default outside custom bounds", Options{MinTTL: 2 * time.Second, MaxTTL: 3 * time.Second}},
		{"negative max leases", Options{MaxLeases: -1}},
		{"epoch near wrap", Options{FirstEpoch: 1 << 63}},
	}
	for _, c := range bad {
		if _, err := New(c.o); err == nil {
			t.Errorf("%s: New accepted %+v", c.name, c.o)
		}
	}
	m, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.defaultTTL != DefaultTTL || m.minTTL != DefaultMinTTL || m.maxTTL != DefaultMaxTTL || m.maxLeases != DefaultMaxLeases {
		t.Fatalf("defaults: %v %v %v %d", m.defaultTTL, m.minTTL, m.maxTTL, m.maxLeases)
	}
}

func TestHelloTTL(t *testing.T) {
	cases := []struct {
		name  string
		agent string
		ttl   time.Duration
		want  time.Duration // granted TTL
		code  Code
	}{
		{"default", "a", 0, DefaultTTL, ""},
		{"min", "a", 50 * time.Millisecond, 50 * time.Millisecond, ""},
		{"max", "a", 60 * time.Second, 60 * time.Second, ""},
		{"below min", "a", 50*time.Millisecond - 1, 0, CodeBadRequest},
		{"above max", "a", 60*time.Second + 1, 0, CodeBadRequest},
		{"negative", "a", -time.Second, 0, CodeBadRequest},
		{"empty agent", "", time.Second, 0, CodeBadRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m, _ := newManager(t, Options{})
				start := time.Now()
				l, err := m.Hello(c.agent, c.ttl)
				wantCode(t, err, c.code)
				if c.code != "" {
					if m.Count() != 0 {
						t.Fatal("a refused hello granted a lease")
					}
					return
				}
				if l.TTL != c.want || !l.Expires.Equal(start.Add(c.want)) || l.Agent != c.agent {
					t.Fatalf("granted %+v, want TTL %v expiring at start+TTL", l, c.want)
				}
				wantCode(t, m.Check(c.agent, l.ID, l.Epoch), "")
			})
		})
	}
}

func TestEpochsIncreaseFromFirstEpoch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, _ := newManager(t, Options{FirstEpoch: 41})
		ids := map[string]bool{}
		var last uint64 = 41
		// Supersede, expire, end and grant to other agents in between: the
		// epoch only ever goes up, by one per grant.
		for i, agent := range []string{"a", "b", "a", "c", "a", "b"} {
			l := hello(t, m, agent, 100*time.Millisecond)
			if l.Epoch != last+1 {
				t.Fatalf("grant %d: epoch %d after %d", i, l.Epoch, last)
			}
			if want := fmt.Sprintf("L%d-", l.Epoch); !strings.HasPrefix(l.ID, want) || ids[l.ID] {
				t.Fatalf("grant %d: id %q (want prefix %q, unique)", i, l.ID, want)
			}
			ids[l.ID] = true
			last = l.Epoch
			if i == 3 {
				time.Sleep(time.Second) // every lease expires
			}
			if i == 4 {
				m.EndAgent("a", "")
			}
		}
	})
}

func TestHeartbeatExtends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, rec := newManager(t, Options{})
		l := hello(t, m, "a", time.Second)
		time.Sleep(600 * time.Millisecond)
		hb, err := m.Heartbeat("a", l.ID, l.Epoch)
		wantCode(t, err, "")
		if !hb.Expires.Equal(time.Now().Add(time.Second)) || hb.ID != l.ID || hb.Epoch != l.Epoch {
			t.Fatalf("heartbeat returned %+v", hb)
		}
		time.Sleep(900 * time.Millisecond) // 1.5 s after the grant
		synctest.Wait()
		wantCode(t, m.Check("a", l.ID, l.Epoch), "")
		if n := len(rec.all()); n != 0 {
			t.Fatalf("%d OnEnd calls for a renewed lease", n)
		}
		if s := m.Snapshot(); len(s) != 1 || !s[0].Expires.Equal(hb.Expires) {
			t.Fatalf("snapshot %+v", s)
		}
	})
}

// A heartbeat served late — it waited in the agent's queue — renews the
// lease from when it was received, so the lease ends TTL after the
// heartbeat reached the supervisor, not TTL after it was served (renewed
// from serving, a lease under load ends late by however long its last
// heartbeat waited).
func TestHeartbeatRenewsFromReceipt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, rec := newManager(t, Options{})
		l := hello(t, m, "a", time.Second)
		time.Sleep(500 * time.Millisecond)
		received := time.Now()
		time.Sleep(80 * time.Millisecond) // queued behind the agent's steps
		hb, err := m.HeartbeatAt("a", l.ID, l.Epoch, received)
		wantCode(t, err, "")
		if !hb.Expires.Equal(received.Add(time.Second)) {
			t.Fatalf("renewed to %v after receipt, want 1s", hb.Expires.Sub(received))
		}
		time.Sleep(time.Second - 80*time.Millisecond)
		synctest.Wait()
		if calls := rec.of(l.ID); len(calls) != 1 || calls[0].reason != ReasonExpired {
			t.Fatalf("OnEnd calls %+v at TTL after receipt, want one, expired", calls)
		}
		// A received time from another clock (the future, or before the
		// lease could have been renewed) is not trusted.
		l2 := hello(t, m, "b", time.Second)
		for _, at := range []time.Time{time.Now().Add(time.Hour), time.Now().Add(-time.Hour)} {
			hb, err := m.HeartbeatAt("b", l2.ID, l2.Epoch, at)
			wantCode(t, err, "")
			if !hb.Expires.Equal(time.Now().Add(time.Second)) {
				t.Fatalf("received %v: renewed to %v", at, hb.Expires)
			}
		}
	})
}

func TestExpiryFiresOnceAtExactlyTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, rec := newManager(t, Options{})
		start := time.Now()
		l := hello(t, m, "a", 200*time.Millisecond)
		time.Sleep(200*time.Millisecond - 1)
		synctest.Wait()
		if len(rec.all()) != 0 {
			t.Fatal("ended before its TTL")
		}
		wantCode(t, m.Check("a", l.ID, l.Epoch), "")
		time.Sleep(1)
		synctest.Wait()
		calls := rec.of(l.ID)
		if len(calls) != 1 || calls[0].reason != ReasonExpired || !calls[0].at.Equal(start.Add(200*time.Millisecond)) {
			t.Fatalf("OnEnd calls %+v, want one, expired, at exactly the TTL", calls)
		}
		wantCode(t, m.Check("a", l.ID, l.Epoch), CodeExpired)
		_, err := m.Heartbeat("a", l.ID, l.Epoch)
		wantCode(t, err, CodeExpired)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n := len(rec.all()); n != 1 {
			t.Fatalf("%d OnEnd calls, want exactly one", n)
		}
		if m.Count() != 0 {
			t.Fatal("an expired lease is counted")
		}
	})
}

func TestHeartbeatJustBeforeExpiryKeepsAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 100 * time.Millisecond
		m, rec := newManager(t, Options{})
		l := hello(t, m, "a", ttl)
		time.Sleep(ttl - 1)
		if _, err := m.Heartbeat("a", l.ID, l.Epoch); err != nil {
			t.Fatal(err)
		}
		renewed := time.Now()
		// The original timer fires now and must re-arm, not end the lease.
		time.Sleep(1)
		synctest.Wait()
		wantCode(t, m.Check("a", l.ID, l.Epoch), "")
		time.Sleep(ttl - 2)
		synctest.Wait()
		wantCode(t, m.Check("a", l.ID, l.Epoch), "")
		if len(rec.all()) != 0 {
			t.Fatal("ended while renewed")
		}
		time.Sleep(1)
		synctest.Wait()
		calls := rec.of(l.ID)
		if len(calls) != 1 || !calls[0].at.Equal(renewed.Add(ttl)) {
			t.Fatalf("OnEnd calls %+v, want one at the heartbeat plus TTL", calls)
		}
	})
}

// skewedClock is the bubble's clock plus an adjustable offset: it lets a
// test put the manager's clock past a lease's expiry while the lease's timer
// has not fired yet, and the other way round.
type skewedClock struct{ skew atomic.Int64 }

func (c *skewedClock) now() time.Time { return time.Now().Add(time.Duration(c.skew.Load())) }

func TestCheckRefusedOnceTTLPassedBeforeTimerRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := &skewedClock{}
		m, rec := newManager(t, Options{Now: clock.now})
		l := hello(t, m, "a", time.Second)
		clock.skew.Store(int64(time.Second)) // the clock says expired; no timer has fired
		synctest.Wait()
		if len(rec.all()) != 0 {
			t.Fatal("test premise: the timer must not have run")
		}
		wantCode(t, m.Check("a", l.ID, l.Epoch), CodeExpired)
		_, err := m.Heartbeat("a", l.ID, l.Epoch)
		wantCode(t, err, CodeExpired) // no reviving it either
		if !m.Seen(l.ID, "c1") {
			t.Fatal("Seen must fail closed on an expired lease")
		}
		if m.Count() != 0 || len(m.Snapshot()) != 0 {
			t.Fatal("an expired lease is reported live")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if calls := rec.of(l.ID); len(calls) != 1 || calls[0].reason != ReasonExpired {
			t.Fatalf("OnEnd calls %+v, want one, expired", calls)
		}
	})
}

func TestSlowClockDelaysExpiryNeverAdvancesIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := &skewedClock{}
		m, rec := newManager(t, Options{Now: clock.now})
		start := time.Now()
		l := hello(t, m, "a", time.Second)
		clock.skew.Store(int64(-100 * time.Millisecond))
		time.Sleep(time.Second)
		synctest.Wait()
		wantCode(t, m.Check("a", l.ID, l.Epoch), "")
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if calls := rec.of(l.ID); len(calls) != 1 || !calls[0].at.Equal(start.Add(1100*time.Millisecond)) {
			t.Fatalf("OnEnd calls %+v, want one when the clock reaches Expires", calls)
		}
	})
}

func TestSupersedingHelloEndsOldLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, rec := newManager(t, Options{})
		old := hello(t, m, "a", time.Second)
		other := hello(t, m, "b", time.Second)
		renewed := hello(t, m, "a", time.Second)
		// OnEnd has run before Hello returned.
		if calls := rec.of(old.ID); len(calls) != 1 || calls[0].reason != ReasonSuperseded {
			t.Fatalf("OnEnd calls for the old lease %+v, want one, superseded", calls)
		}
		if renewed.Epoch <= old.Epoch || renewed.ID == old.ID {
			t.Fatalf("new lease %+v does not supersede %+v", renewed, old)
		}
		wantCode(t, m.Check("a", old.ID, old.Epoch), CodeExpired)
		wantCode(t, m.Check("a", renewed.ID, old.Epoch), CodeExpired) // the old fence on the new lease
		wantCode(t, m.Check("a", renewed.ID, renewed.Epoch), "")
		wantCode(t, m.Check("b", other.ID, other.Epoch), "") // other agents untouched
		if m.Count() != 2 {
			t.Fatalf("count %d, want 2", m.Count())
		}
		// The old lease's timer does not end it a second time.
		time.Sleep(500 * time.Millisecond)
		m.Heartbeat("a", renewed.ID, renewed.Epoch)
		m.Heartbeat("b", other.ID, other.Epoch)
		time.Sleep(600 * time.Millisecond)
		synctest.Wait()
		if n := len(rec.all()); n != 1 {
			t.Fatalf("%d OnEnd calls, want 1", n)
		}
	})
}

func TestHelloWaitsForPreviousLeasesOnEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		entered := make(chan Lease, 1)
		m, err := New(Options{OnEnd: func(l Lease, reason string) {
			if reason == ReasonExpired {
				entered <- l
				<-gate // the supervisor still unwinding the agent's sagas
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		hello(t, m, "a", 100*time.Millisecond)
		time.Sleep(100 * time.Millisecond)
		<-entered
		got := make(chan Lease)
		go func() {
			l, _ := m.Hello("a", 0)
			got <- l
		}()
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("a new lease was granted while OnEnd for the old one ran")
		default:
		}
		// Other agents are not held up.
		hello(t, m, "b", 0)
		close(gate)
		if l := <-got; l.Agent != "a" {
			t.Fatalf("granted %+v", l)
		}
	})
}

func TestEndAndEndAgent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, rec := newManager(t, Options{})
		a := hello(t, m, "a", time.Second)
		wantCode(t, m.End("b", a.ID, ""), CodeNotHolder)
		wantCode(t, m.Check("a", a.ID, a.Epoch), "") // a refused bye ends nothing
		wantCode(t, m.End("a", "L999-0", ""), CodeUnknown)
		wantCode(t, m.End("a", a.ID, ""), "")
		if calls := rec.of(a.ID); len(calls) != 1 || calls[0].reason != ReasonBye {
			t.Fatalf("OnEnd calls %+v, want one, bye, before End returned", calls)
		}
		wantCode(t, m.End("a", a.ID, ""), CodeExpired)
		wantCode(t, m.Check("a", a.ID, a.Epoch), CodeExpired)

		b := hello(t, m, "b", time.Second)
		got, ok := m.EndAgent("b", "")
		if !ok || got.ID != b.ID {
			t.Fatalf("EndAgent ended %+v, %v", got, ok)
		}
		c := hello(t, m, "c", time.Second)
		m.EndAgent("c", "serial link lost")
		if _, ok := m.EndAgent("c", ""); ok {
			t.Fatal("EndAgent ended a lease twice")
		}
		if _, ok := m.EndAgent("nobody", ""); ok {
			t.Fatal("EndAgent ended a lease of an agent without one")
		}
		if calls := rec.of(b.ID); len(calls) != 1 || calls[0].reason != ReasonWill {
			t.Fatalf("will: %+v", calls)
		}
		if calls := rec.of(c.ID); len(calls) != 1 || calls[0].reason != "serial link lost" {
			t.Fatalf("link lost: %+v", calls)
		}
		wantCode(t, m.Check("b", b.ID, b.Epoch), CodeExpired)

		// A bye arriving after the TTL passed (timer not yet run) still
		// ends the lease, and honestly as expired.
		clock := &skewedClock{}
		m2, rec2 := newManager(t, Options{Now: clock.now})
		d := hello(t, m2, "d", time.Second)
		clock.skew.Store(int64(time.Second))
		wantCode(t, m2.End("d", d.ID, ""), "")
		if calls := rec2.of(d.ID); len(calls) != 1 || calls[0].reason != ReasonExpired {
			t.Fatalf("late bye: %+v", calls)
		}
		if n := len(rec.all()); n != 3 {
			t.Fatalf("%d OnEnd calls, want 3", n)
		}
	})
}

func TestCheckAndHeartbeatRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, _ := newManager(t, Options{FirstEpoch: 10})
		a := hello(t, m, "a", time.Second)
		b := hello(t, m, "b", time.Second)
		c := hello(t, m, "c", time.Second)
		if err := m.End("c", c.ID, ""); err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			name  string
			agent string
			id    string
			epoch uint64
			want  Code
		}{
			{"live", "a", a.ID, a.Epoch, ""},
			{"unknown id", "a", "L1-00", 0, CodeUnknown},
			{"empty id", "a", "", 0, CodeUnknown},
			{"unknown id, epoch never granted", "a", "L99-00", 99, CodeUnknown},
			{"unknown id, a live epoch", "a", "L99-00", a.Epoch, CodeUnknown},
			{"another agent's lease", "b", a.ID, a.Epoch, CodeNotHolder},
			{"unknown agent", "z", a.ID, a.Epoch, CodeNotHolder},
			{"stale epoch on a live lease", "a", a.ID, a.Epoch - 1, CodeExpired},
			{"newer epoch on a live lease", "a", a.ID, b.Epoch, CodeExpired},
			{"no epoch on a live lease", "a", a.ID, 0, CodeExpired},
			{"ended lease", "c", c.ID, c.Epoch, CodeExpired},
			{"ended lease, no epoch", "c", c.ID, 0, CodeExpired},
			{"ended lease, another agent", "a", c.ID, c.Epoch, CodeExpired},
			{"unknown id, retired epoch", "c", "L99-00", c.Epoch, CodeExpired},
			{"epoch from before a restart", "a", "L7-00", 7, CodeExpired},
			{"the first epoch itself", "a", "L10-00", 10, CodeExpired},
		}
		// (t.Run is not allowed inside a bubble: one loop, every case reported.)
		for _, tc := range cases {
			checkErr := m.Check(tc.agent, tc.id, tc.epoch)
			_, hbErr := m.Heartbeat(tc.agent, tc.id, tc.epoch)
			for op, err := range map[string]error{"Check": checkErr, "Heartbeat": hbErr} {
				var le *Error
				if (tc.want == "") != (err == nil) || (err != nil && (!errors.As(err, &le) || le.Code != tc.want)) {
					t.Errorf("%s: %s = %v, want %q", tc.name, op, err, tc.want)
				}
			}
		}
		// None of the refusals touched a live lease.
		if m.Count() != 2 {
			t.Fatalf("count %d, want 2", m.Count())
		}
	})
}

func TestEndedLeasesBoundedAndStillRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, rec := newManager(t, Options{})
		const n = RememberEnded + 10
		var first, last Lease
		for i := range n {
			l := hello(t, m, "a", time.Second)
			if i == 0 {
				first = l
			}
			last = l
		}
		m.EndAgent("a", "")
		if got := len(rec.all()); got != n {
			t.Fatalf("%d OnEnd calls, want %d", got, n)
		}
		m.mu.Lock()
		held, ring := len(m.ended.reason), len(m.ended.ring)
		m.mu.Unlock()
		if held != RememberEnded || ring != RememberEnded {
			t.Fatalf("remembering %d ids in a ring of %d, want %d", held, ring, RememberEnded)
		}
		// The oldest id is forgotten, but its epoch still retires it.
		wantCode(t, m.Check("a", first.ID, first.Epoch), CodeExpired)
		wantCode(t, m.Check("a", first.ID, 0), CodeUnknown)
		// A recent one is known by its id alone.
		err := m.Check("a", last.ID, 0)
		wantCode(t, err, CodeExpired)
		if !strings.Contains(err.Error(), "ended (will)") {
			t.Fatalf("message %q does not say why", err)
		}
	})
}

func TestSeen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, _ := newManager(t, Options{})
		a := hello(t, m, "a", time.Second)
		b := hello(t, m, "b", time.Second)
		steps := []struct {
			lease, cmd string
			want       bool
		}{
			{a.ID, "1", false},
			{a.ID, "1", true}, // a redelivery
			{a.ID, "2", false},
			{b.ID, "1", false}, // per lease
			{b.ID, "1", true},
			{a.ID, "", false}, // no id: nothing to remember
			{a.ID, "", false},
			{"L99-00", "1", true}, // not live: fail closed
			{a.ID, strings.Repeat("x", 1<<20), false},
			{a.ID, strings.Repeat("x", 1<<20), true},
		}
		for i, s := range steps {
			if got := m.Seen(s.lease, s.cmd); got != s.want {
				t.Fatalf("step %d: Seen(%.10q, %.10q) = %v", i, s.lease, s.cmd, got)
			}
		}

		// The bound: after SeenPerLease newer ids the oldest is forgotten.
		c := hello(t, m, "c", time.Second)
		m.Seen(c.ID, "oldest")
		for i := range SeenPerLease {
			if m.Seen(c.ID, fmt.Sprint("cmd-", i)) {
				t.Fatalf("fresh id %d reported seen", i)
			}
		}
		if !m.Seen(c.ID, fmt.Sprint("cmd-", 0)) || !m.Seen(c.ID, fmt.Sprint("cmd-", SeenPerLease-1)) {
			t.Fatal("ids within the bound forgotten")
		}
		if m.Seen(c.ID, "oldest") {
			t.Fatal("an id past the bound is still remembered: memory is not bounded")
		}
		m.mu.Lock()
		set, ring := len(m.byID[c.ID].seen.set), len(m.byID[c.ID].seen.ring)
		m.mu.Unlock()
		if set != SeenPerLease || ring != SeenPerLease {
			t.Fatalf("seen holds %d ids in a ring of %d, want %d", set, ring, SeenPerLease)
		}

		m.End("a", a.ID, "")
		if !m.Seen(a.ID, "3") {
			t.Fatal("Seen must fail closed on an ended lease")
		}
	})
}

func TestClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, rec := newManager(t, Options{})
		var granted []Lease
		for _, agent := range []string{"a", "b", "c"} {
			granted = append(granted, hello(t, m, agent, 100*time.Millisecond))
		}
		m.Close()
		calls := rec.all()
		if len(calls) != 3 {
			t.Fatalf("%d OnEnd calls, want 3", len(calls))
		}
		for i, c := range calls {
			if want := granted[2-i]; c.l.ID != want.ID || c.reason != ReasonShutdown {
				t.Fatalf("call %d: %s %s, want %s shutdown (newest first)", i, c.l.ID, c.reason, want.ID)
			}
		}
		if m.Count() != 0 || len(m.Snapshot()) != 0 {
			t.Fatal("leases live after Close")
		}
		_, err := m.Hello("d", 0)
		wantCode(t, err, CodeShutdown)
		wantCode(t, m.Check("a", granted[0].ID, granted[0].Epoch), CodeExpired)
		time.Sleep(time.Second) // no timer is left to fire
		synctest.Wait()
		m.Close()
		if n := len(rec.all()); n != 3 {
			t.Fatalf("%d OnEnd calls after Close, want 3", n)
		}
	})
}

func TestCloseWaitsForRunningOnEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		var calls atomic.Int32
		m, err := New(Options{OnEnd: func(l Lease, reason string) {
			calls.Add(1)
			if reason == ReasonExpired {
				<-gate
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		hello(t, m, "a", 100*time.Millisecond)
		hello(t, m, "b", time.Second)
		time.Sleep(100 * time.Millisecond)
		synctest.Wait() // a's OnEnd is running, blocked
		closed := make(chan struct{})
		go func() {
			m.Close()
			close(closed)
		}()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned while an OnEnd ran")
		default:
		}
		close(gate)
		<-closed
		if n := calls.Load(); n != 2 {
			t.Fatalf("%d OnEnd calls, want 2", n)
		}
	})
}

func TestMaxLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, _ := newManager(t, Options{MaxLeases: 2})
		hello(t, m, "a", 0)
		b := hello(t, m, "b", 0)
		_, err := m.Hello("c", 0)
		wantCode(t, err, CodeTooManyLeases)
		hello(t, m, "a", 0) // superseding frees its own place first
		m.End("b", b.ID, "")
		hello(t, m, "c", 0)
	})
}

// TestConcurrent runs hellos, heartbeats, checks, Seen, byes and wills of a
// few agents from many goroutines, with expiries between them, and checks
// that every lease granted ends exactly once, that epochs are unique, and
// that no lease is granted before OnEnd for the agent's previous one
// returned. Run it under -race.
func TestConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu      sync.Mutex
			granted = map[string]Lease{}
			ended   = map[string]int{}
			epochs  = map[uint64]bool{}
		)
		var m *Manager
		m, err := New(Options{MinTTL: time.Millisecond, OnEnd: func(l Lease, reason string) {
			mu.Lock()
			ended[l.ID]++
			mu.Unlock()
			m.Count() // calling back into the manager is allowed
		}})
		if err != nil {
			t.Fatal(err)
		}
		agents := []string{"a", "b", "c", "d", "e"}
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(g), 1))
				var mine []Lease
				for i := range 300 {
					agent := agents[r.IntN(len(agents))]
					switch op := r.IntN(10); {
					case op < 3:
						l, err := m.Hello(agent, time.Duration(5+r.IntN(20))*time.Millisecond)
						if err != nil {
							t.Errorf("hello: %v", err)
							return
						}
						mu.Lock()
						if epochs[l.Epoch] {
							t.Errorf("epoch %d granted twice", l.Epoch)
						}
						epochs[l.Epoch] = true
						granted[l.ID] = l
						for _, p := range granted {
							if p.Agent == agent && p.Epoch < l.Epoch && ended[p.ID] == 0 {
								t.Errorf("lease %s granted before OnEnd for %s", l.ID, p.ID)
							}
						}
						mu.Unlock()
						mine = append(mine, l)
					case op < 8 && len(mine) > 0:
						l := mine[r.IntN(len(mine))]
						m.Heartbeat(l.Agent, l.ID, l.Epoch)
						m.Check(l.Agent, l.ID, l.Epoch)
						m.Seen(l.ID, fmt.Sprint(i%7))
					case op == 8 && len(mine) > 0:
						l := mine[r.IntN(len(mine))]
						m.End(l.Agent, l.ID, "")
					case op == 9:
						m.EndAgent(agent, "")
						m.Snapshot()
					}
					if r.IntN(8) == 0 {
						time.Sleep(time.Duration(r.IntN(30)) * time.Millisecond)
					}
				}
			})
		}
		wg.Wait()
		m.Close()
		mu.Lock()
		defer mu.Unlock()
		if len(granted) < 100 {
			t.Fatalf("only %d leases granted: the test exercised little", len(granted))
		}
		for id := range granted {
			if ended[id] != 1 {
				t.Errorf("lease %s: OnEnd called %d times, want 1", id, ended[id])
			}
		}
		for id := range ended {
			if _, ok := granted[id]; !ok {
				t.Errorf("OnEnd for %s, never granted", id)
			}
		}
	})
}

// Ending is true once less than half a live lease's TTL is left, false
// again after a heartbeat, and false for an agent without a lease (the
// broker's door holds back only an agent with time to spare).
func TestEnding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, _ := newManager(t, Options{})
		if m.Ending("a") {
			t.Fatal("an agent without a lease is ending")
		}
		l := hello(t, m, "a", time.Second)
		if m.Ending("a") {
			t.Fatal("a fresh lease is ending")
		}
		time.Sleep(400 * time.Millisecond)
		if m.Ending("a") {
			t.Fatal("ending with 600ms of 1s left")
		}
		time.Sleep(200 * time.Millisecond)
		if !m.Ending("a") {
			t.Fatal("not ending with 400ms of 1s left")
		}
		if _, err := m.Heartbeat("a", l.ID, l.Epoch); err != nil {
			t.Fatal(err)
		}
		if m.Ending("a") {
			t.Fatal("ending right after a heartbeat")
		}
	})
}
