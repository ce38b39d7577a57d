package prove

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim"
	"github.com/saga-supervisor/saga-supervisor/recovery"
	"github.com/saga-supervisor/saga-supervisor/supervisor"
)

// errProcessDead is what a crashed process's connections answer.
var errProcessDead = errors.New("prove: this supervisor process has crashed")

// effectHook is what happens at the next effect of a process.
type effectHook struct {
	hang    bool   // the device hangs: cut the wait at the driver timeout
	crash   bool   // the process dies at this effect ...
	applied bool   // ... after the effect happened (crash only)
	after   func() // runs when the effect returns, before the engine sees it
}

// process is one supervisor process on a rig: the real engine on a real
// journal, taken over through recovery, driving the rig's devices through
// connections of its own. When it crashes, its connections and its journal
// files are severed at that instant.
type process struct {
	rig     *rig
	res     *recovery.Result
	fs      *severableFS
	timeout time.Duration // of a hung driver call

	mu      sync.Mutex
	dead    bool
	hook    *effectHook
	crashed chan struct{} // closed at the crash
	release chan struct{} // closed to let the crashed process's effect return
}

// start takes over the journal in dir with a new process.
func (r *rig) start(dir string, pr *prober) (*process, error) {
	p := &process{rig: r, fs: &severableFS{}, timeout: pr.timeout, crashed: make(chan struct{}), release: make(chan struct{})}
	var list []*actuators.Actuator
	for _, name := range r.cfg.ActuatorNames() {
		a := r.cfg.Actuators[name].Actuator(name, &processDriver{p: p, dev: r.devices[name].driver, faults: r.devices[name].faults})
		a.Timeout = callBound
		list = append(list, a)
	}
	reg, err := actuators.NewRegistry(list...)
	if err != nil {
		return nil, err
	}
	sup := supervisor.NewSupplies()
	for _, name := range r.cfg.SupplyNames() {
		if err := sup.Add(r.cfg.Supplies[name].Spec(name), r.supplies[name]); err != nil {
			return nil, err
		}
	}
	ecfg := r.cfg.RollbackConfig()
	ecfg.Actuators, ecfg.Supplies, ecfg.Now = reg, sup, r.clock.Now
	wo := r.cfg.Journal.WALOptions()
	wo.SegmentSize = min(wo.SegmentSize, segmentSize)
	wo.FS = p.fs
	p.res, err = recovery.Open(recovery.Options{Dir: dir, WAL: wo, Engine: ecfg})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// arm sets what happens at the process's next effect.
func (p *process) arm(h effectHook) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hook = &h
}

// takeHook returns the hook for an effect starting now, or an error if the
// process is dead.
func (p *process) takeHook() (effectHook, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return effectHook{}, errProcessDead
	}
	var h effectHook
	if p.hook != nil {
		h, p.hook = *p.hook, nil
	}
	return h, nil
}

// die is the crash: from now on nothing the process does reaches the
// journal or the world. What it had written stays (the page cache survives
// a killed process); what it had only enqueued is lost.
func (p *process) die() {
	p.mu.Lock()
	p.dead = true
	p.mu.Unlock()
	p.fs.cut.Store(true)
	close(p.crashed)
}

func (p *process) isDead() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dead
}

// processDriver is a process's connection to one device.
type processDriver struct {
	p      *process
	dev    actuators.Driver
	faults *sim.Faults // dev's
}

func (d *processDriver) Set(ctx context.Context, v float64) error {
	h, err := d.p.takeHook()
	if err != nil {
		// A dead process's connection sends nothing.
		return fmt.Errorf("%w: %w", err, actuators.ErrNotApplied)
	}
	if h.crash {
		if h.applied {
			d.dev.Set(ctx, v)
		}
		d.p.die()
		<-d.p.release
		return errProcessDead
	}
	if h.hang {
		// The device never answers; the call times out at the probe's
		// driver timeout rather than after the generous bound every other
		// call has.
		hc := d.hangContext(ctx)
		defer hc.stop()
		ctx = hc
	}
	err = d.dev.Set(ctx, v)
	if h.after != nil {
		h.after()
	}
	return err
}

// hangContext is the context of a call to a device that takes the command
// and never answers. It ends with context.DeadlineExceeded the driver
// timeout after the device has taken the command (its Sets count moved),
// not after the call began: on a slow machine (a Pi Zero, qemu) a deadline
// set here could pass before the device even looked at the command, and a
// device does not send a command whose deadline has passed — a refusal,
// not the hang the shape is (with --driver-timeout 1ns every hang shape
// was one; TestHangShapesHangWhateverTheTimeout). It ends at once, with
// its error, if the call's own context does.
func (d *processDriver) hangContext(parent context.Context) *hangContext {
	c := &hangContext{Context: parent, done: make(chan struct{}), stopped: make(chan struct{})}
	taken := d.faults.Sets()
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for d.faults.Sets() == taken {
			select {
			case <-parent.Done():
				c.end(parent.Err())
				return
			case <-c.stopped:
				return
			case <-tick.C:
			}
		}
		t := time.NewTimer(d.p.timeout)
		defer t.Stop()
		select {
		case <-parent.Done():
			c.end(parent.Err())
		case <-c.stopped:
		case <-t.C:
			c.end(context.DeadlineExceeded)
		}
	}()
	return c
}

type hangContext struct {
	context.Context // the call's: its values and deadline
	done, stopped   chan struct{}
	mu              sync.Mutex
	err             error
	stopOnce        sync.Once
}

func (c *hangContext) Done() <-chan struct{} { return c.done }

func (c *hangContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *hangContext) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
		close(c.done)
	}
}

// stop lets the goroutine go once the call has returned.
func (c *hangContext) stop() { c.stopOnce.Do(func() { close(c.stopped) }) }

func (d *processDriver) Halt() error {
	if d.p.isDead() {
		return errProcessDead
	}
	return d.dev.Halt()
}
