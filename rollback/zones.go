package rollback

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

// Zones: scoped halts. Config.Zones groups actuators into named zones, each
// actuator in at most one. A zone halt latches the zone (an atomic, like
// the full halt's: from that instant the gate refuses every step on the
// zone's actuators with ZONE_HALTED), and the engine's zone goroutine then
// applies it: ZONE_HALT is journaled, every open saga that touches the zone
// is unwound whole — its steps on the zone's actuators are unresolved (a
// halted zone's actuator is never moved by a compensation), its steps
// elsewhere are compensated — effects in flight on the zone's actuators are
// waited for, and the zone's actuators go to their safe policies (SAFE
// records first, as for the full halt). Actuators outside the zone keep
// serving. A zone reset (ZoneReset, an operator action) clears it.
//
// The full halt is untouched by zones: one latch over everything, its path
// unchanged. A full halt parks every zone; a full reset does not clear a
// zone halt, and a zone reset does not clear the full halt.
//
// The zone lane has its own small lock (zoneLane.mu, never held across
// I/O) and its passes are serialised by zoneLane.pass, never by haltMu: a
// compensation that fails during a zone's unwind may halt the engine in
// full, which takes haltMu.

// zone is one configured (or journaled) zone.
type zone struct {
	name string
	acts []string // its actuators, in configuration order; nil for a zone known only from the journal
	// gen counts halts of the zone asked for; cleared is the latest
	// generation a zone reset cleared. Latched is gen > cleared.
	gen     atomic.Uint64
	cleared atomic.Uint64
	// Guarded by zoneLane.mu:
	why     string   // the first halt since the last reset
	reasons []string // latched halts not yet journaled
	more    uint64   // halts beyond maxPendingHalts, journaled as a count
	running bool     // a goroutine is applying the zone's halts
	done    uint64   // the highest generation applied
	applied chan struct{}
	// parked (guarded by the engine's mu): this process sent the zone's
	// actuators to their safe policies since the zone latched.
	parked bool
}

func (z *zone) latched() bool { return z.gen.Load() > z.cleared.Load() }

type zoneLane struct {
	mu     sync.Mutex // never held across I/O; guards zones and each zone's lane fields
	zones  map[string]*zone
	closed bool       // Close was called: no zone goroutine starts
	pass   sync.Mutex // serialises zone passes and zone resets
}

// ZoneState is what Zones reports of one zone.
type ZoneState struct {
	Name      string
	Actuators []string // nil: the zone is known only from the journal
	Halted    bool
	Reason    string // why it is halted (the first halt since its reset)
}

// initZones builds the configured zones. An actuator named by no zone is in
// none; one named twice, or a name no actuator has, is a configuration
// error.
func (e *Engine) initZones() error {
	e.zl.zones = make(map[string]*zone, len(e.cfg.Zones))
	for _, name := range slices.Sorted(maps.Keys(e.cfg.Zones)) {
		if name == "" {
			return errors.New("rollback: a zone without a name")
		}
		z := &zone{name: name, acts: []string{}}
		for _, a := range e.cfg.Zones[name] {
			st := e.acts[a]
			if st == nil {
				return fmt.Errorf("rollback: zone %s: no actuator %q", name, a)
			}
			if st.zone != nil {
				return fmt.Errorf("rollback: actuator %s is in zones %s and %s: an actuator may be in one zone", a, st.zone.name, name)
			}
			st.zone = z
			z.acts = append(z.acts, a)
		}
		e.zl.zones[name] = z
	}
	return nil
}

// zoneNamed returns the zone, or an UNKNOWN_ZONE refusal.
func (e *Engine) zoneNamed(name string) (*zone, *Error) {
	e.zl.mu.Lock()
	z := e.zl.zones[name]
	e.zl.mu.Unlock()
	if z == nil {
		return nil, refusal(CodeUnknownZone, "no zone %q", name)
	}
	return z, nil
}

// ZoneLatch latches a halt of the named zone and returns at once with its
// generation: the gate refuses every step on the zone's actuators from now
// on, and the engine's zone goroutine journals the halt and applies it
// (see the comment at the top of zones.go). It never blocks on I/O or on
// the engine's lock. An unknown zone is refused UNKNOWN_ZONE and latches
// nothing. OnHalt, if set, receives the reports of the sagas it unwound.
func (e *Engine) ZoneLatch(name, reason string) (uint64, error) {
	z, rerr := e.zoneNamed(name)
	if rerr != nil {
		return 0, rerr
	}
	gen, start := e.zoneLatch(z, reason, true)
	if start {
		go func() {
			defer e.bg.Done() // Add was made by zoneLatch, under zl.mu
			e.applyZone(z, true)
		}()
	}
	return gen, nil
}

// ZoneHalt latches a halt of the named zone and returns once it has been
// applied, with the reports of the sagas it unwound (nil when the zone's
// goroutine was already applying its halts and took this one too: its
// reports go to OnHalt). It is ZoneLatch for single-threaded callers
// (recovery, the model checker, tests).
func (e *Engine) ZoneHalt(name, reason string) ([]*Report, error) {
	z, rerr := e.zoneNamed(name)
	if rerr != nil {
		return nil, rerr
	}
	gen, start := e.zoneLatch(z, reason, false)
	if start {
		return e.applyZone(z, false)
	}
	if !e.waitZoneApplied(z, gen) {
		return nil, ErrClosed
	}
	return nil, nil
}

func (e *Engine) zoneLatch(z *zone, reason string, async bool) (gen uint64, start bool) {
	l := &e.zl
	l.mu.Lock()
	defer l.mu.Unlock()
	gen = z.gen.Add(1)
	// As the full halt's: the first halt since the reset, or a fuller
	// account of it from the same source (HTTP latches before it reads
	// the body's reason, then halts again with it).
	if gen == z.cleared.Load()+1 || z.why == "" || strings.HasPrefix(reason, z.why+": ") {
		z.why = reason
	}
	if len(z.reasons) < maxPendingHalts {
		z.reasons = append(z.reasons, reason)
	} else {
		z.more++
	}
	if z.running || l.closed {
		return gen, false
	}
	z.running = true
	if async {
		e.bg.Add(1)
	}
	return gen, true
}

func (e *Engine) waitZoneApplied(z *zone, gen uint64) bool {
	l := &e.zl
	for {
		l.mu.Lock()
		if z.done >= gen {
			l.mu.Unlock()
			return true
		}
		if l.closed && !z.running {
			l.mu.Unlock()
			return false
		}
		if z.applied == nil {
			z.applied = make(chan struct{})
		}
		ch := z.applied
		l.mu.Unlock()
		<-ch
	}
}

// applyZone applies the zone's latched halts until none is pending; the
// caller has set z.running.
func (e *Engine) applyZone(z *zone, async bool) ([]*Report, error) {
	l := &e.zl
	var reps []*Report
	var errs []error
	for {
		l.mu.Lock()
		target := z.gen.Load()
		if z.done >= target && len(z.reasons) == 0 && z.more == 0 {
			z.running = false
			l.mu.Unlock()
			return reps, errors.Join(errs...)
		}
		rs, more := z.reasons, z.more
		z.reasons, z.more = nil, 0
		l.mu.Unlock()

		pr, perr := e.zonePass(z, rs, more)

		l.mu.Lock()
		z.done = max(z.done, target)
		if z.applied != nil {
			close(z.applied)
			z.applied = nil
		}
		l.mu.Unlock()
		if async {
			if e.cfg.OnHalt != nil && (len(pr) > 0 || perr != nil) {
				e.cfg.OnHalt(pr, perr)
			}
		} else {
			reps = append(reps, pr...)
			if perr != nil {
				errs = append(errs, perr)
			}
		}
	}
}

// zonePass journals the zone's halts, unwinds the open sagas that touch
// the zone, waits for effects in flight on its actuators and parks them.
func (e *Engine) zonePass(z *zone, reasons []string, more uint64) ([]*Report, error) {
	e.zl.pass.Lock()
	defer e.zl.pass.Unlock()
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	for _, why := range reasons {
		e.log.Error("zone halt", "zone", z.name, "reason", why)
		if e.fatal == nil {
			e.enqueue(&Record{Type: RecZoneHalt, Code: z.name, Message: why})
		}
	}
	if more > 0 && e.fatal == nil {
		e.enqueue(&Record{Type: RecZoneHalt, Code: z.name, Message: fmt.Sprintf("%d further halts of the zone while it was halted (not listed one by one)", more)})
	}
	var reps []*Report
	if z.latched() {
		why := "zone " + z.name + " halted: " + e.zoneReason(z)
		for _, s := range e.sagasNewestFirst() {
			if s.unwinding || !e.touches(s, z) {
				continue // an unwind under way skips the zone's actuators itself
			}
			if s.busy {
				if s.pendingAbort == "" {
					s.pendingAbort = why // unwound by its step once the effect returns
				}
				continue
			}
			reps = append(reps, e.unwindLocked(s, why, false))
		}
	}
	again := z.parked && z.latched() && len(reasons) > 0
	e.mu.Unlock()
	if e.Err() == nil {
		e.sync()
	}
	if again || !z.latched() {
		return reps, nil
	}
	return reps, e.parkZone(z)
}

// touches reports whether the saga has a step on one of the zone's
// actuators. Callers hold mu.
func (e *Engine) touches(s *saga, z *zone) bool {
	for _, sp := range s.steps {
		if sp.act != nil && sp.act.zone == z {
			return true
		}
	}
	return false
}

// parkZone waits until no effect is in flight on the zone's actuators (none
// can start: the zone is latched) and sends each to its safe policy, SAFE
// records durable first, as goSafeAll does for every actuator.
func (e *Engine) parkZone(z *zone) error {
	e.mu.Lock()
	for e.zoneMoving(z) {
		e.moved.Wait()
	}
	journaled := e.fatal == nil
	if journaled {
		for _, name := range z.acts {
			a := e.cfg.Actuators.Get(name)
			if a.Safe.Mode != actuators.SafeHold {
				e.enqueue(&Record{Type: RecSafe, Actuator: name, Target: a.Safe.Value, Code: string(a.Safe.Mode)})
			}
		}
	}
	e.mu.Unlock()
	if journaled {
		e.sync()
	}
	var errs []error
	for _, name := range z.acts {
		a := e.cfg.Actuators.Get(name)
		if err := a.GoSafe(context.Background()); err != nil {
			errs = append(errs, err)
			continue
		}
		if a.Safe.Mode == actuators.SafeValue {
			e.mu.Lock()
			e.setCommanded(e.acts[name], a.Safe.Value)
			e.mu.Unlock()
		}
	}
	e.mu.Lock()
	z.parked = z.latched() && len(errs) == 0
	e.mu.Unlock()
	return errors.Join(errs...)
}

// zoneMoving reports whether an effect is in flight on one of the zone's
// actuators. Callers hold mu.
func (e *Engine) zoneMoving(z *zone) bool {
	for _, name := range z.acts {
		if e.acts[name].moving > 0 {
			return true
		}
	}
	return false
}

// zoneHalted reports whether the actuator is in a latched zone. It reads
// two atomics.
func (st *actState) zoneHalted() bool { return st != nil && st.zone != nil && st.zone.latched() }

// zoneReason is why the zone is halted.
func (e *Engine) zoneReason(z *zone) string {
	e.zl.mu.Lock()
	defer e.zl.mu.Unlock()
	return z.why
}

// ZoneGen is the generation of the named zone's latest halt; ZoneReset
// clears the zone's halts up to it.
func (e *Engine) ZoneGen(name string) (uint64, error) {
	z, rerr := e.zoneNamed(name)
	if rerr != nil {
		return 0, rerr
	}
	return z.gen.Load(), nil
}

// ZoneReset clears the named zone's halts up to generation gen (ZoneGen,
// read by the operator's side before it decided). An operator action,
// journaled durably before it takes effect. A halt of the zone latched
// after gen stays latched: ZoneReset then returns ZONE_HALTED. It waits
// until the halts it clears have been applied. It clears neither the full
// halt nor another zone's. A zone that is not halted is left as it is.
func (e *Engine) ZoneReset(by, name string, gen uint64) error {
	z, rerr := e.zoneNamed(name)
	if rerr != nil {
		return rerr
	}
	if gen > z.gen.Load() {
		gen = z.gen.Load()
	}
	e.waitZoneApplied(z, gen)
	e.zl.pass.Lock()
	defer e.zl.pass.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errClosed()
	}
	if e.fatal != nil {
		return &Error{Code: CodeJournalFailed, Message: "the journal failed; restart the supervisor", err: e.fatal}
	}
	if gen <= z.cleared.Load() {
		if z.latched() {
			return refusal(CodeZoneHalted, "zone %s halted again since the reset was asked for: %s", z.name, e.zoneReason(z))
		}
		return nil
	}
	if err := e.journal(&Record{Type: RecZoneReset, Code: z.name, Agent: by}); err != nil {
		return &Error{Code: CodeJournalFailed, Message: err.Error(), err: err}
	}
	e.zl.mu.Lock()
	z.cleared.Store(gen)
	still := z.latched()
	if !still {
		z.why = ""
	}
	e.zl.mu.Unlock()
	if still {
		return refusal(CodeZoneHalted, "a halt of zone %s arrived while the reset was made; still halted: %s", z.name, e.zoneReason(z))
	}
	z.parked = false
	return nil
}

// Zones reports every zone, configured or known only from the journal, in
// name order.
func (e *Engine) Zones() []ZoneState {
	e.zl.mu.Lock()
	defer e.zl.mu.Unlock()
	out := make([]ZoneState, 0, len(e.zl.zones))
	for _, name := range slices.Sorted(maps.Keys(e.zl.zones)) {
		z := e.zl.zones[name]
		zs := ZoneState{Name: name, Actuators: slices.Clone(z.acts), Halted: z.latched()}
		if zs.Halted {
			zs.Reason = z.why
		}
		out = append(out, zs)
	}
	return out
}

// ZoneOf names the zone of an actuator ("" for none).
func (e *Engine) ZoneOf(actuator string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if st := e.acts[actuator]; st != nil && st.zone != nil {
		return st.zone.name
	}
	return ""
}

// WaitZoneHalts returns once every zone halt latched so far has been
// applied (or, after Close, at once).
func (e *Engine) WaitZoneHalts() {
	e.zl.mu.Lock()
	zs := make([]*zone, 0, len(e.zl.zones))
	for _, z := range e.zl.zones {
		zs = append(zs, z)
	}
	e.zl.mu.Unlock()
	for _, z := range zs {
		e.waitZoneApplied(z, z.gen.Load())
	}
}

// rebuildZone is the zone a ZONE_HALT or ZONE_RESET names, made when the
// configuration names no such zone (the rebuild reads no configuration;
// Recover decides what such a zone means). Callers hold mu.
func (e *Engine) rebuildZone(name string) (*zone, error) {
	if name == "" {
		return nil, errors.New("a zone record without a zone")
	}
	e.zl.mu.Lock()
	defer e.zl.mu.Unlock()
	z := e.zl.zones[name]
	if z == nil {
		z = &zone{name: name}
		e.zl.zones[name] = z
	}
	return z, nil
}

// applyZoneRecord is the rebuild of ZONE_HALT and ZONE_RESET. Callers hold
// mu.
func (e *Engine) applyZoneRecord(r *Record) error {
	z, err := e.rebuildZone(r.Code)
	if err != nil {
		return err
	}
	e.zl.mu.Lock()
	defer e.zl.mu.Unlock()
	switch r.Type {
	case RecZoneHalt:
		gen := z.gen.Add(1)
		z.done = gen // applied by Recover
		if z.why == "" || strings.HasPrefix(r.Message, z.why+": ") {
			z.why = r.Message
		}
	case RecZoneReset:
		z.cleared.Store(z.gen.Load())
		z.why = ""
	}
	return nil
}

// recoverZones makes the journal's zone halts true of the world again (the
// previous process may have died before parking the zone) and turns the
// halt of a zone the configuration no longer names into a full halt: its
// actuators are not known, so nothing may move until an operator looks.
// Called by Recover, without mu.
func (e *Engine) recoverZones() error {
	e.zl.mu.Lock()
	var park, gone []*zone
	for _, z := range e.zl.zones {
		switch {
		case !z.latched():
		case z.acts == nil:
			gone = append(gone, z)
		default:
			park = append(park, z)
		}
	}
	e.zl.mu.Unlock()
	slices.SortFunc(gone, func(a, b *zone) int { return strings.Compare(a.name, b.name) })
	for _, z := range gone {
		if _, err := e.Halt(fmt.Sprintf("zone %s is halted in the journal but no longer configured: its actuators are unknown", z.name)); err != nil {
			return err
		}
	}
	if e.latched() {
		return nil // the full halt parked everything
	}
	slices.SortFunc(park, func(a, b *zone) int { return strings.Compare(a.name, b.name) })
	var errs []error
	for _, z := range park {
		errs = append(errs, e.parkZone(z))
	}
	return errors.Join(errs...)
}
