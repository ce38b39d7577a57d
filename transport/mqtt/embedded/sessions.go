package embedded

import (
	"sync"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
)

// sessionSweepEvery is how often the broker checks that every connected
// client can still be reached (sessions.sweep).
const sessionSweepEvery = 100 * time.Millisecond

// sessions keeps mochi's table of clients true to the connections. mochi
// (v2.7.9) ends a clean session by checking that it was not taken over and
// then, on the old connection's goroutine, unsubscribing its filters and
// deleting its client id: by id, not by client. A new connection of the
// same id that registered in between — the supervisor reconnecting at once
// after an impostor took its id — stays connected, answers pings and got
// its subscriptions acknowledged (retained messages included), but is
// gone from the table and the topic index: nothing published reaches it
// again, and nothing says so. awaitPredecessor narrows that window (it
// waits up to a second for the old clean-up); under load it can still be
// missed. The sweep closes it: a connected client missing from the table
// is put back, with its subscriptions.
type sessions struct {
	srv      *mqtt.Server
	mu       sync.Mutex
	live     map[*mqtt.Client]struct{}
	repaired func(cl *mqtt.Client, filters int)
	stop     chan struct{}
	done     chan struct{}
}

func newSessions(srv *mqtt.Server, repaired func(*mqtt.Client, int)) *sessions {
	s := &sessions{srv: srv, live: map[*mqtt.Client]struct{}{}, repaired: repaired, stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

func (s *sessions) established(cl *mqtt.Client) {
	s.mu.Lock()
	s.live[cl] = struct{}{}
	s.mu.Unlock()
}

func (s *sessions) ended(cl *mqtt.Client) {
	s.mu.Lock()
	delete(s.live, cl)
	s.mu.Unlock()
}

func (s *sessions) run() {
	defer close(s.done)
	t := time.NewTicker(sessionSweepEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.sweep()
		}
	}
}

// sweep puts back every connected client whose id no longer leads to it,
// when nothing connected holds that id instead.
func (s *sessions) sweep() {
	s.mu.Lock()
	live := make([]*mqtt.Client, 0, len(s.live))
	for cl := range s.live {
		live = append(live, cl)
	}
	s.mu.Unlock()
	for _, cl := range live {
		if cl.Closed() || cl.IsTakenOver() {
			continue
		}
		cur, ok := s.srv.Clients.Get(cl.ID)
		if ok && (cur == cl || !cur.Closed()) {
			continue
		}
		s.srv.Clients.Add(cl)
		if cl.Closed() {
			// It closed as it was put back: its own clean-up may have
			// run already, so take back the entry rather than leave a
			// closed client in the table.
			if cur, ok := s.srv.Clients.Get(cl.ID); ok && cur == cl {
				s.srv.Clients.Delete(cl.ID)
			}
			continue
		}
		subs := cl.State.Subscriptions.GetAll()
		for _, sub := range subs {
			s.srv.Topics.Subscribe(cl.ID, sub)
		}
		s.repaired(cl, len(subs))
	}
}

func (s *sessions) close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}
