package fleet

import (
	"sync"
	"time"

	"github.com/saga-supervisor/saga-supervisor/supervisor"
)

// minGap spaces summaries published on a change, so that a readiness
// flapping at every poll publishes a few a second, not ten.
const minGap = 250 * time.Millisecond

// PublisherOptions configure a Publisher.
type PublisherOptions struct {
	Device  string
	Version string // the daemon's build version
	// Period: the summary is published this often even when unchanged,
	// so a reader can tell a live one from a stale one (default 5s).
	Period time.Duration
	// Publish hands a payload to the transport, retained on the summary
	// topic. It must not block (mqtt.Transport.Publish queues).
	Publish func(payload []byte)
	Now     func() time.Time // default time.Now
}

// Publisher keeps a device's summary retained. Update takes each status
// the supervisor's poller computes and returns at once; a goroutine of the
// Publisher's own publishes on a change of readiness, halt or open sagas,
// and every Period.
type Publisher struct {
	opt    PublisherOptions
	mu     sync.Mutex
	latest Summary
	have   bool
	due    chan struct{}
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

// NewPublisher starts a Publisher; it publishes nothing before the first
// Update.
func NewPublisher(opt PublisherOptions) *Publisher {
	if opt.Period <= 0 {
		opt.Period = 5 * time.Second
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	p := &Publisher{opt: opt, due: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go p.run()
	return p
}

// FromStatus is the summary of a supervisor status (without its time).
func FromStatus(device, version string, st supervisor.Status) Summary {
	s := Summary{V: Version, Device: device, Ready: st.Ready, Halted: st.Halted, HaltReason: st.HaltWhy,
		OpenSagas: len(st.OpenSagas), Seq: st.Journal.Durable, Version: version}
	if h := st.Journal.DurableHash; len(h) >= 16 {
		s.Hash = h[:16]
	}
	for _, sup := range st.Supplies {
		if sup.Known {
			if s.Supplies == nil {
				s.Supplies = map[string]float64{}
			}
			s.Supplies[sup.Name] = sup.Volts
		}
	}
	return s
}

// headline is what a fleet view must see at once when it changes.
func headline(s Summary) [4]any { return [4]any{s.Ready, s.Halted, s.HaltReason, s.OpenSagas} }

// Update is supervisor.Options.OnRefresh: it stores st and, if its
// headline changed, wakes the publishing goroutine. It never blocks.
func (p *Publisher) Update(st supervisor.Status) {
	s := FromStatus(p.opt.Device, p.opt.Version, st)
	p.mu.Lock()
	changed := !p.have || headline(p.latest) != headline(s)
	p.latest, p.have = s, true
	p.mu.Unlock()
	if changed {
		select {
		case p.due <- struct{}{}:
		default: // already due
		}
	}
}

func (p *Publisher) run() {
	defer close(p.done)
	t := time.NewTicker(p.opt.Period)
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		case <-p.due:
			if wait := minGap - p.opt.Now().Sub(last); !last.IsZero() && wait > 0 {
				select {
				case <-p.stop:
					return
				case <-time.After(wait):
				}
			}
		}
		p.mu.Lock()
		s, ok := p.latest, p.have
		p.mu.Unlock()
		if !ok {
			continue
		}
		last = p.opt.Now()
		s.At = last
		p.opt.Publish(Encode(s))
	}
}

// Close stops publishing (the last summary stays retained; the status
// topic says offline).
func (p *Publisher) Close() {
	p.once.Do(func() { close(p.stop) })
	<-p.done
}
