package supervisor

import (
	"cmp"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// How long each part may go without progress before Alive says the
// supervisor is hung. The poll loop refreshes every PollEvery (100 ms by
// default) and reads the engine's state: a deadlock in the engine stops
// it first. A journal batch may take seconds on a worn SD card; a request
// waits at most for its driver (actuator timeouts are at most 10 s) and
// its journal batch.
const (
	aliveRefresh = 2 * time.Second
	aliveJournal = 10 * time.Second
	aliveIngress = 30 * time.Second
)

// liveness is what Alive remembers between calls: the last durable
// journal record and served request, and since when each has not moved
// while work was waiting.
type liveness struct {
	lastRefresh atomic.Int64 // unix nanoseconds of the last finished refresh

	mu sync.Mutex
	// The bounds (the consts above; tests shorten them). Zero: the const.
	journalAfter, ingressAfter time.Duration
	durable                    uint64
	durableSince               time.Time
	served                     uint64
	servedSince                time.Time
}

// Alive reports whether the supervisor is making progress: the poll loop
// refreshed lately; every journal record written is made durable within
// aliveJournal; and when requests wait, one is served within
// aliveIngress. It is what feeds systemd's watchdog: a supervisor that
// is up but hung stops feeding it and is restarted (and recovers), where
// a ticker of its own would have kept a hung one alive forever. An idle
// supervisor is alive: no work waiting is no work stuck.
func (s *Supervisor) Alive() error {
	now := time.Now()
	if last := time.Unix(0, s.alive.lastRefresh.Load()); now.Sub(last) > aliveRefresh {
		return fmt.Errorf("supervisor: no refresh for %v: the poll loop or the engine is stuck", now.Sub(last).Round(time.Millisecond))
	}
	lv := &s.alive
	lv.mu.Lock()
	defer lv.mu.Unlock()
	if lv.durableSince.IsZero() {
		lv.durableSince, lv.servedSince = now, now
	}
	written, durable := s.journal.LastSeq(), s.journal.DurableSeq()
	switch {
	case durable >= written || durable != lv.durable:
		lv.durable, lv.durableSince = durable, now
	case now.Sub(lv.durableSince) > cmp.Or(lv.journalAfter, aliveJournal):
		return fmt.Errorf("supervisor: journal record %d not durable after %v: the journal is stuck", durable+1, now.Sub(lv.durableSince).Round(time.Millisecond))
	}
	st := s.lanes.Stats()
	switch {
	case st.InFlight == 0 || st.Served != lv.served:
		lv.served, lv.servedSince = st.Served, now
	case now.Sub(lv.servedSince) > cmp.Or(lv.ingressAfter, aliveIngress):
		return fmt.Errorf("supervisor: %d requests waiting, none served for %v: the front door is stuck", st.InFlight, now.Sub(lv.servedSince).Round(time.Millisecond))
	}
	return nil
}
