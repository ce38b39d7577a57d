package fleet

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/saga-supervisor/saga-supervisor/supervisor"
)

type sink struct {
	mu  sync.Mutex
	got []Summary
}

func (s *sink) publish(t *testing.T) func([]byte) {
	return func(b []byte) {
		sum, err := Decode(b)
		if err != nil {
			t.Errorf("published a summary the decoder refuses: %v", err)
		}
		s.mu.Lock()
		s.got = append(s.got, sum)
		s.mu.Unlock()
	}
}

func (s *sink) all() []Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Summary(nil), s.got...)
}

func status(ready, halted bool, why string) supervisor.Status {
	return supervisor.Status{Ready: ready, Halted: halted, HaltWhy: why, OpenSagas: []uint64{},
		Journal:  supervisor.JournalStatus{Durable: 7, DurableHash: "00112233445566778899aabbccddeeff"},
		Supplies: []supervisor.SupplyJSON{{Name: "battery", Volts: 12, Known: true}, {Name: "unread"}}}
}

func TestPublisherOnChangeAndPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s sink
		p := NewPublisher(PublisherOptions{Device: "arm1", Version: "v1", Period: 5 * time.Second, Publish: s.publish(t)})
		defer p.Close()
		synctest.Wait()
		if n := len(s.all()); n != 0 {
			t.Fatalf("%d summaries before any status", n)
		}
		p.Update(status(true, false, ""))
		synctest.Wait()
		got := s.all()
		if len(got) != 1 || !got[0].Ready || got[0].Seq != 7 || got[0].Hash != "0011223344556677" || got[0].Supplies["battery"] != 12 || len(got[0].Supplies) != 1 {
			t.Fatalf("first summary %+v", got)
		}
		// The same headline again and again (every poll): nothing new
		// until the period.
		for range 10 {
			time.Sleep(100 * time.Millisecond)
			p.Update(status(true, false, ""))
		}
		synctest.Wait()
		if n := len(s.all()); n != 1 {
			t.Fatalf("%d summaries for an unchanged status within the period, want 1", n)
		}
		// A halt goes out at once, or after the gap since the last.
		p.Update(status(false, true, "e-stop topic"))
		time.Sleep(minGap)
		synctest.Wait()
		got = s.all()
		if last := got[len(got)-1]; len(got) != 2 || !last.Halted || last.HaltReason != "e-stop topic" {
			t.Fatalf("after a halt: %+v", got)
		}
		// Every period, even unchanged.
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if n := len(s.all()); n != 3 {
			t.Fatalf("%d summaries after a period, want 3", n)
		}
		p.Close()
		time.Sleep(time.Minute)
		if n := len(s.all()); n != 3 {
			t.Fatalf("published after Close: %d", n)
		}
	})
}
