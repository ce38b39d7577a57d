package supervisor

import (
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// eventRecorder records the events the supervisor publishes.
type eventRecorder struct {
	mu     sync.Mutex
	events []api.Event
}

func (p *eventRecorder) PublishEvent(e api.Event) {
	p.mu.Lock()
	p.events = append(p.events, e)
	p.mu.Unlock()
}
func (p *eventRecorder) PublishState(api.State) {}
func (p *eventRecorder) SetStatus(api.Status)   {}

// rollbacks returns the reports of the rollback events published so far.
func (p *eventRecorder) rollbacks() []*api.ReportJSON {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*api.ReportJSON
	for _, e := range p.events {
		if e.Kind == api.EventRollback {
			out = append(out, e.Report)
		}
	}
	return out
}

// TestDocRollbackEvents holds what docs/API.md says under "Rollback
// reports": every report of the running supervisor is published on
// events, an abort's (also in its reply) as well as a lease's end.
func TestDocRollbackEvents(t *testing.T) {
	b, err := os.ReadFile("../docs/API.md")
	if err != nil {
		t.Fatal(err)
	}
	if doc := strings.Join(strings.Fields(string(b)), " "); !strings.Contains(doc,
		"**every report of the running supervisor is also published on `events`** (a `rollback` event), asked for or not: an abort's,") {
		t.Error("docs/API.md no longer says that every rollback report is published on events: this test holds that rule")
	}

	pub := &eventRecorder{}
	s, _ := newTestSupervisorWith(t, func(c *config.Config) { c.Agents.Allow = nil }, func(o *Options) { o.Publisher = pub })
	must := func(req api.Request) api.Reply {
		t.Helper()
		req.Agent = "planner"
		r := s.Handle(req, time.Now())
		if !r.OK {
			t.Fatalf("%+v: %s %s", req, r.Code, r.Message)
		}
		return r
	}
	h := must(api.Request{ID: "h", Op: api.OpHello, TTLMS: 60000})
	saga := must(api.Request{ID: "b", Op: api.OpBegin, Lease: h.Lease, Epoch: h.Epoch}).Saga
	must(api.Request{ID: "s", Op: api.OpStep, Lease: h.Lease, Epoch: h.Epoch, Saga: saga, Actuator: "base", Value: 5})
	abort := must(api.Request{ID: "a", Op: api.OpAbort, Lease: h.Lease, Epoch: h.Epoch, Saga: saga, Reason: "asked"})
	if got := pub.rollbacks(); len(got) != 1 || !reflect.DeepEqual(got[0], abort.Report) {
		t.Fatalf("after an abort, rollback events %+v; want one, the abort reply's report %+v", got, abort.Report)
	}

	// A lease's end (bye) unwinds the saga still open under it.
	saga = must(api.Request{ID: "b2", Op: api.OpBegin, Lease: h.Lease, Epoch: h.Epoch}).Saga
	must(api.Request{ID: "s2", Op: api.OpStep, Lease: h.Lease, Epoch: h.Epoch, Saga: saga, Actuator: "base", Value: 6})
	must(api.Request{ID: "bye", Op: api.OpBye, Lease: h.Lease, Epoch: h.Epoch})
	if got := pub.rollbacks(); len(got) != 2 || got[1].Saga != saga {
		t.Fatalf("after a bye, rollback events %+v; want a second, of saga %d", got, saga)
	}
}
