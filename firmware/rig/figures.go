package rig

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/saga-supervisor/saga-supervisor/drivers/serial"
)

// The figures of a firmware on the rig (docs/HIL.md, "Figures"), measured
// through the host's own driver (drivers/serial) on the rig's pty:
//
//   - SET to SET_ACK: Channel.Set's duration on the host's clock, from the
//     call to the acknowledgement: the pty both ways, the rig's wake-ups,
//     the wire (a SET is 11 bytes, its ack 12: 2.0 ms at 115200 baud) and
//     the firmware.
//   - SET to pin: from the host's clock just before Channel.Set (MonoNow)
//     to the cycle the pin changed, on the same clock (the rig maps each
//     cycle to it: Event.MonoNS). The path: the pty and the rig reading it,
//     the 11 bytes on the wire, the firmware; for a servo, the rest of its
//     20 ms frame too, until the first pulse of the new width has ended.
//     The MCU's timeline is the ideal one (simulated time follows the
//     clock; a rig late by a few ms computes the cycle late, not at a
//     different time), so the rig's own lag is not in it.
//   - Watchdog trip at the pins: from the end of the last valid frame the
//     MCU received (the rig's tap) to the cycle each pin reached its safe
//     value, with the host silent.

// Dist summarises durations.
type Dist struct {
	N             int
	P50, P99, Max time.Duration
	// Failed counts SETs that failed (no acknowledgement after the
	// driver's retries), left out of the durations.
	Failed int
}

func dist(ds []time.Duration) Dist {
	if len(ds) == 0 {
		return Dist{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[int(math.Ceil(q*float64(len(s))))-1] }
	return Dist{N: len(s), P50: at(0.50), P99: at(0.99), Max: s[len(s)-1]}
}

func (d Dist) String() string {
	r := func(x time.Duration) string { return fmt.Sprintf("%.3f ms", float64(x)/1e6) }
	f := ""
	if d.Failed > 0 {
		f = fmt.Sprintf(", %d failed", d.Failed)
	}
	return fmt.Sprintf("p50 %s  p99 %s  max %s  (n=%d%s)", r(d.P50), r(d.P99), r(d.Max), d.N, f)
}

// Probe is a channel the figures are measured on, and how its pin shows a
// value.
type Probe struct {
	Channel int
	Pin     string
	// Values alternated between.
	Values [2]float64
	// Shows reports whether an event of the pin shows value v.
	Shows func(e Event, v float64) bool
	// Settle is the least time between two SETs: long enough for the pin
	// to show the first before the second (a servo: two 20 ms frames).
	// A random 0..20 ms is added, so that SETs fall anywhere in a frame.
	Settle time.Duration
}

// Latency measures SET to SET_ACK and SET to pin n times on a probe, with
// a pause of the probe's Settle and a random 0..20 ms between SETs.
func Latency(ctx context.Context, r *Client, l *serial.Link, p Probe, n int, opts ...serial.ChannelOption) (ack, pin Dist, err error) {
	ch, err := l.Channel(p.Channel, opts...)
	if err != nil {
		return ack, pin, err
	}
	start, err := r.Pins(ctx)
	if err != nil {
		return ack, pin, err
	}
	type sent struct {
		at int64
		v  float64
	}
	var sets []sent
	var acks []time.Duration
	failed := 0
	rng := rand.New(rand.NewPCG(uint64(n), 24))
	for i := 0; i < n; i++ {
		v := p.Values[i%2]
		t0, m0 := time.Now(), MonoNow()
		if err := ch.Set(ctx, v); err != nil {
			// In doubt: the pin may or may not show it. Counted, left out;
			// the link then starts a new session.
			failed++
			if failed > n/10 {
				return ack, pin, fmt.Errorf("set %d (ch %d = %g): %w (%d failed)", i, p.Channel, v, err, failed)
			}
			if err := l.WaitReady(ctx); err != nil {
				return ack, pin, err
			}
			sets = append(sets, sent{m0, math.NaN()})
			continue
		}
		acks = append(acks, time.Since(t0))
		sets = append(sets, sent{m0, v})
		time.Sleep(p.Settle + time.Duration(rng.IntN(21))*time.Millisecond)
	}
	time.Sleep(60 * time.Millisecond) // a servo's new pulse: one more frame
	h, err := r.History(ctx, start.Cycle)
	if err != nil {
		return ack, pin, err
	}
	if h.Lost {
		return ack, pin, fmt.Errorf("history since cycle %d lost: too many events", start.Cycle)
	}
	var pins []time.Duration
	for i, s := range sets {
		if math.IsNaN(s.v) {
			continue
		}
		next := int64(math.MaxInt64)
		if i+1 < len(sets) {
			next = sets[i+1].at
		}
		found := false
		for _, e := range h.Events {
			if e.Pin != p.Pin || e.MonoNS < s.at || e.MonoNS >= next || !p.Shows(e, s.v) {
				continue
			}
			at := e.MonoNS
			if e.Kind == "pulse" {
				at += int64(float64(e.High) / float64(start.Hz) * 1e9) // the pulse has ended: the servo has it
			}
			pins = append(pins, time.Duration(at-s.at))
			found = true
			break
		}
		if !found && i > 0 && sets[i-1].v != s.v && !math.IsNaN(sets[i-1].v) {
			return ack, pin, fmt.Errorf("set %d (ch %d = %g): pin %s never showed it", i, p.Channel, s.v, p.Pin)
		}
	}
	ack, pin = dist(acks), dist(pins)
	ack.Failed = failed
	return ack, pin, nil
}

// Trip is how long one pin took to reach its safe value after the host
// fell silent.
type Trip struct {
	Pin   string
	After time.Duration // from the end of the last valid frame the MCU received
}

// WatchdogTrip closes the host's link (the host falls silent, its port
// stays open) and waits until every pin in safe shows its safe value, then
// reports when each got there, from the end of the last valid frame the
// MCU received. safe maps a pin to the test of its safe value.
func WatchdogTrip(ctx context.Context, r *Client, l *serial.Link, safe map[string]func(Event) bool, wait time.Duration) ([]Trip, error) {
	start, err := r.Pins(ctx)
	if err != nil {
		return nil, err
	}
	l.Close()
	deadline := time.Now().Add(wait)
	for {
		time.Sleep(50 * time.Millisecond)
		p, err := r.Pins(ctx)
		if err != nil {
			return nil, err
		}
		h, err := r.History(ctx, start.Cycle)
		if err != nil {
			return nil, err
		}
		last := p.Link.LastFrameToMCUCycle
		var trips []Trip
		for name, ok := range safe {
			for _, e := range h.Events {
				if e.Pin == name && e.Cycle >= last && ok(e) {
					trips = append(trips, Trip{name, time.Duration(float64(e.Cycle-last) / float64(p.Hz) * 1e9)})
					break
				}
			}
		}
		if len(trips) == len(safe) {
			slices.SortFunc(trips, func(a, b Trip) int { return strings.Compare(a.Pin, b.Pin) })
			return trips, nil
		}
		if time.Now().After(deadline) {
			return trips, fmt.Errorf("after %v only %d of %d pins reached their safe values: %+v", wait, len(trips), len(safe), trips)
		}
	}
}

// PulseOf is a Shows for a servo pin: the event is a pulse of the width
// (within tol) that map to v.
func PulseOf(hz float64, width func(v float64) time.Duration, tol time.Duration) func(Event, float64) bool {
	return func(e Event, v float64) bool {
		if e.Kind != "pulse" {
			return false
		}
		got := time.Duration(float64(e.High) / hz * 1e9)
		d := got - width(v)
		return d <= tol && d >= -tol
	}
}

// LevelOf is a Shows for a digital pin: the event is the level v maps to
// (activeLow: 1 is the pin low), driven.
func LevelOf(activeLow bool) func(Event, float64) bool {
	return func(e Event, v float64) bool {
		want := 0
		if (v != 0) != activeLow {
			want = 1
		}
		return e.Kind == "level" && e.Driven && e.Level == want
	}
}
