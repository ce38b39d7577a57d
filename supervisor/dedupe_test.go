package supervisor

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/supervisor/ingress"
	"github.com/saga-supervisor/saga-supervisor/supervisor/lease"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// TestDocDeduplication holds the rule docs/API.md states once, under
// "Replies": its numbers are the ones built, and each of its clauses is
// what a request sent through the lanes (as the MQTT transport sends it)
// gets.
func TestDocDeduplication(t *testing.T) {
	b, err := os.ReadFile("../docs/API.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(b)), " ")
	for _, s := range []string{
		"**Every op is de-duplicated within a lease**, by its `id`:",
		fmt.Sprintf("the supervisor remembers an agent's last %d replies;", ingress.DefaultReplyCache),
		"a request that reuses an `id` for anything else gets `DUPLICATE_ID` and moved nothing;",
		fmt.Sprintf("(a lease's last %d step ids, and every id its saga carried), so a step sent again after its reply was forgotten gets `DUPLICATE_ID`;", lease.SeenPerLease),
		"a repeated halt halts again, and a repeated status is answered afresh",
		"a request refused before it was served (`RATE_LIMITED`, `BUSY`, `TOO_MANY_AGENTS`) is not remembered: sent again, it is served.",
	} {
		if !strings.Contains(doc, s) {
			t.Errorf("docs/API.md does not say %q", s)
		}
	}

	s, _ := newTestSupervisorWith(t, func(c *config.Config) {
		c.Agents.Allow = nil
		c.Agents.Rate, c.Agents.Burst = 1e6, 1e6 // the cache is filled below, faster than an agent may send
	})
	call := func(payload string) api.Reply {
		t.Helper()
		req, derr := api.DecodeRequest([]byte(payload), 8192)
		got := make(chan api.Reply, 1)
		s.Submit(req.Agent, req, derr, time.Now(), func(r api.Reply) { got <- r })
		select {
		case r := <-got:
			return r
		case <-time.After(10 * time.Second):
			t.Fatalf("no reply to %s", payload)
			return api.Reply{}
		}
	}
	h := call(`{"id":"h1","agent":"planner","op":"hello","ttl_ms":60000}`)
	leaseFields := fmt.Sprintf(`"lease":%q,"epoch":%d`, h.Lease, h.Epoch)
	saga := call(`{"id":"b1","agent":"planner","op":"begin",` + leaseFields + `}`).Saga
	step := func(id string, value float64) string {
		return fmt.Sprintf(`{"id":%q,"agent":"planner","op":"step",%s,"saga":%d,"actuator":"base","value":%g}`, id, leaseFields, saga, value)
	}
	steps := func() int {
		t.Helper()
		for _, o := range s.engine.Sagas() {
			if o.ID == saga {
				return len(o.Steps)
			}
		}
		t.Fatalf("saga %d is not open", saga)
		return 0
	}

	first := call(step("s1", 5))
	if !first.OK {
		t.Fatalf("step: %s %s", first.Code, first.Message)
	}
	// The same request again: the first reply, and nothing happens twice.
	if again := call(step("s1", 5)); !reflect.DeepEqual(again, first) || steps() != 1 {
		t.Errorf("the same step again: %+v (the saga has %d steps); want the first reply %+v and 1 step", again, steps(), first)
	}
	// The id reused for anything else: DUPLICATE_ID, nothing moved.
	if r := call(step("s1", 6)); r.OK || r.Code != "DUPLICATE_ID" || steps() != 1 {
		t.Errorf("the id reused for another value: %+v (the saga has %d steps); want DUPLICATE_ID and 1 step", r, steps())
	}
	// Past the last DefaultReplyCache replies, the first reply is
	// forgotten; the step is still never run twice.
	hb := 0
	forget := func() {
		t.Helper()
		for range ingress.DefaultReplyCache {
			hb++
			if r := call(fmt.Sprintf(`{"id":"hb%d","agent":"planner","op":"heartbeat",%s}`, hb, leaseFields)); !r.OK {
				t.Fatalf("heartbeat: %s %s", r.Code, r.Message)
			}
		}
	}
	forget()
	if r := call(step("s1", 5)); r.OK || r.Code != "DUPLICATE_ID" || steps() != 1 {
		t.Errorf("the same step again after its reply was forgotten: %+v (the saga has %d steps); want DUPLICATE_ID and 1 step", r, steps())
	}
	// A repeated status is answered afresh: the second sees the saga's
	// state now, not as the first reply had it.
	if r := call(`{"id":"st","agent":"planner","op":"status"}`); !r.OK || !strings.Contains(string(r.Status), fmt.Sprintf(`"open_sagas":[%d]`, saga)) {
		t.Fatalf("status: %+v", r)
	}
	if r := call(`{"id":"c1","agent":"planner","op":"commit",` + leaseFields + fmt.Sprintf(`,"saga":%d}`, saga)); !r.OK {
		t.Fatalf("commit: %s %s", r.Code, r.Message)
	}
	if r := call(`{"id":"st","agent":"planner","op":"status"}`); !r.OK || !strings.Contains(string(r.Status), `"open_sagas":[]`) {
		t.Errorf("the same status again: %s; want the status as it is now, no open saga", r.Status)
	}
	// Its saga closed and every reply forgotten, the step's id is still
	// remembered by the lease.
	forget()
	if r := call(step("s1", 5)); r.OK || r.Code != "DUPLICATE_ID" {
		t.Errorf("the same step again after its saga was committed: %+v; want DUPLICATE_ID", r)
	}
	// A new lease starts afresh: s1 is served in it.
	h2 := call(`{"id":"h2","agent":"planner","op":"hello","ttl_ms":60000}`)
	leaseFields = fmt.Sprintf(`"lease":%q,"epoch":%d`, h2.Lease, h2.Epoch)
	saga = call(`{"id":"b1","agent":"planner","op":"begin",` + leaseFields + `}`).Saga
	if r := call(step("s1", 6)); !r.OK || steps() != 1 {
		t.Errorf("s1 under a new lease: %+v; want it served", r)
	}
	// A repeated halt halts again: each is journaled, and the second is
	// not answered from the cache.
	for range 2 {
		if r := call(`{"id":"x1","agent":"planner","op":"halt","reason":"test"}`); !r.OK {
			t.Fatalf("halt: %s %s", r.Code, r.Message)
		}
	}
	s.engine.WaitHalts()
	if err := s.journal.Sync(); err != nil {
		t.Fatal(err)
	}
	halts := 0
	err = wal.Scan(s.journal.Dir(), wal.Options{}, 1, func(wr wal.Record) error {
		rec, err := rollback.DecodeRecord(wr.Type, wr.Payload)
		if err == nil && rec.Type == rollback.RecHalt {
			halts++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if halts != 2 {
		t.Errorf("the same halt twice journaled %d halts, want 2", halts)
	}
	if st := s.lanes.Stats(); st.Replayed != 1 {
		t.Errorf("the lanes answered %d requests from the cache, want 1 (the step sent again)", st.Replayed)
	}
}

// A request the lanes refused before serving it is not remembered: sent
// again with the same id, it is served (docs/API.md, "Replies").
func TestDocDeduplicationRefusedUnserved(t *testing.T) {
	s, _ := newTestSupervisorWith(t, func(c *config.Config) {
		c.Agents.Allow = nil
		c.Agents.Rate, c.Agents.Burst = 1, 1 // one request, then one a second
	})
	call := func(payload string) api.Reply {
		t.Helper()
		req, derr := api.DecodeRequest([]byte(payload), 8192)
		got := make(chan api.Reply, 1)
		s.Submit(req.Agent, req, derr, time.Now(), func(r api.Reply) { got <- r })
		return <-got
	}
	if r := call(`{"id":"h1","agent":"planner","op":"hello","ttl_ms":60000}`); !r.OK {
		t.Fatalf("hello: %s %s", r.Code, r.Message)
	}
	const h2 = `{"id":"h2","agent":"planner","op":"hello","ttl_ms":60000}`
	if r := call(h2); r.Code != "RATE_LIMITED" {
		t.Fatalf("a second hello at once: %+v, want RATE_LIMITED", r)
	}
	time.Sleep(1100 * time.Millisecond) // a token again
	if r := call(h2); !r.OK || r.Lease == "" {
		t.Errorf("the same hello sent again once a token was back: %+v; want it served", r)
	}
}
