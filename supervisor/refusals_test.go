package supervisor

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// One agent refused without end — steps over a limit in its own open saga,
// steps on a stale lease — does not cost the journal a record per
// command: the first refusals are journaled one by one, the rest in
// aggregate once a second, and every one is still answered, counted in the
// metrics and accounted for in the journal. (A REFUSED record per command
// would be about 570 MB of journal an hour at the default rate limit, by
// bench --journal.)
func TestRefusalFloodIsJournaledInAggregate(t *testing.T) {
	for _, tc := range []struct {
		name, code string
		step       func(i int, lease string, epoch uint64, saga uint64) string
	}{
		{"over the limit", "LIMIT_MAX", func(i int, lease string, epoch uint64, saga uint64) string {
			return fmt.Sprintf(`{"id":"j%d","agent":"junk","op":"step","lease":%q,"epoch":%d,"saga":%d,"actuator":"elbow","value":170}`, i, lease, epoch, saga)
		}},
		{"stale lease", "LEASE_UNKNOWN", func(i int, _ string, epoch uint64, saga uint64) string {
			return fmt.Sprintf(`{"id":"j%d","agent":"junk","op":"step","lease":"stale","epoch":%d,"saga":%d,"actuator":"elbow","value":5}`, i, epoch, saga)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestSupervisor(t)
			do := func(payload string) api.Reply {
				req, derr := api.DecodeRequest([]byte(payload), 8192)
				if derr != nil {
					t.Fatalf("%s: %v", payload, derr)
				}
				return s.Handle(req, time.Now()) // past the lanes: no rate limit in the way
			}
			h := do(`{"id":"h","agent":"junk","op":"hello","ttl_ms":60000}`)
			b := do(fmt.Sprintf(`{"id":"b","agent":"junk","op":"begin","lease":%q,"epoch":%d}`, h.Lease, h.Epoch))
			if !h.OK || !b.OK {
				t.Fatalf("hello %+v begin %+v", h, b)
			}
			start := s.journal.LastSeq()
			const n = 2000
			t0 := time.Now()
			var code string
			for i := range n {
				r := do(tc.step(i, h.Lease, h.Epoch, b.Saga))
				if r.OK {
					t.Fatalf("junk %d served", i)
				}
				code = r.Code
			}
			took := time.Since(t0)
			s.lanes.Flush()
			if err := s.journal.Sync(); err != nil {
				t.Fatal(err)
			}
			if got := s.metrics.refusals.WithLabelValues(code).Value(); got != n {
				t.Fatalf("saga_refusals_total{code=%q} = %g, want %d", code, got, n)
			}
			single, counted := 0, 0
			err := wal.Scan(s.journal.Dir(), wal.Options{}, start+1, func(r wal.Record) error {
				rec, err := rollback.DecodeRecord(r.Type, r.Payload)
				if err != nil || rec.Type != rollback.RecRefused || rec.Agent != "junk" || rec.Code != code {
					return err
				}
				if rec.CmdID != "" {
					single++
					return nil
				}
				var k int
				if _, err := fmt.Sscanf(rec.Message, "%d ", &k); err != nil || !strings.Contains(rec.Message, "beyond the refusals journaled one by one") {
					return fmt.Errorf("aggregate record %q", rec.Message)
				}
				counted += k
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if single+counted != n {
				t.Fatalf("%d journaled one by one + %d in aggregate, want %d in all", single, counted, n)
			}
			if limit := refusalBurst + int(took.Seconds()*refusalRate) + 1; single > limit {
				t.Fatalf("%d refusals journaled one by one in %v: more than the budget's %d", single, took, limit)
			}
			t.Logf("%s: %d one by one, %d in aggregate, in %v", code, single, counted, took)
		})
	}
}
