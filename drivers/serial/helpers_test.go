package serial_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/drivers/serial"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim/mcu"
)

// hangGuard bounds every wait in these tests. It only stops a broken test
// from hanging; nothing is asserted about speed.
const hangGuard = 10 * time.Second

// rig is a Link talking to a simulated MCU over net.Pipe, with a cable
// that can be pulled out and plugged in again.
type rig struct {
	t   testing.TB
	m   *mcu.MCU
	l   *serial.Link
	ctx context.Context

	mu      sync.Mutex
	plugged bool
	host    net.Conn // the host's end of the current pipe
	dev     net.Conn // the MCU's end
	wg      sync.WaitGroup
}

// fourChannels: channel 0 a servo (safe 90), 1 a PWM duty (safe 0), 2 a
// relay that detaches when safe, 3 a servo with a limited range.
func fourChannels() mcu.Options {
	return mcu.Options{
		Channels: []mcu.ChannelSpec{
			{Safe: 90},
			{Safe: 0},
			{Safe: 0, SafeDetach: true},
			{Min: 10, Max: 170, Safe: 90},
		},
		Supplies:        []float64{12.0, 5.0},
		MaxDuration:     500 * time.Millisecond,
		TelemetryPeriod: 20 * time.Millisecond,
	}
}

// fastConfig keeps the tests quick yet tolerant of a loaded CI machine
// (every package's tests run at once): a request is given up after
// 6 × 40 ms, the link after 400 ms of silence.
func fastConfig() serial.Config {
	return serial.Config{
		LinkTimeout:       400 * time.Millisecond,
		AckTimeout:        40 * time.Millisecond,
		Retries:           5,
		ReconnectInterval: 20 * time.Millisecond,
	}
}

func newRig(t testing.TB, opts mcu.Options, cfg serial.Config) *rig {
	t.Helper()
	m, err := mcu.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &rig{t: t, m: m, ctx: ctx, plugged: true}
	cfg.Opener = r.open
	l, err := serial.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.l = l
	t.Cleanup(func() {
		l.Close()
		cancel()
		r.unplug()
		r.wg.Wait()
		m.Close()
	})
	return r
}

func (r *rig) open(context.Context) (io.ReadWriteCloser, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.plugged || r.ctx.Err() != nil {
		return nil, errors.New("cable unplugged")
	}
	host, dev := net.Pipe()
	r.host, r.dev = host, dev
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.m.Serve(r.ctx, dev)
	}()
	return host, nil
}

// unplug pulls the cable: both ends of the pipe close and no new one opens.
func (r *rig) unplug() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.plugged = false
	if r.host != nil {
		r.host.Close()
		r.dev.Close()
	}
}

func (r *rig) plug() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.plugged = true
}

// toMCU writes bytes onto the line towards the MCU, beside the host's own
// frames (net.Pipe keeps each Write whole).
func (r *rig) toMCU(b []byte) {
	r.mu.Lock()
	c := r.host
	r.mu.Unlock()
	if _, err := c.Write(b); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) ready() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := r.l.WaitReady(ctx); err != nil {
		r.t.Fatalf("link not ready: %v", err)
	}
}

func (r *rig) channel(n int, opts ...serial.ChannelOption) *serial.Channel {
	r.t.Helper()
	c, err := r.l.Channel(n, opts...)
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}

func (r *rig) set(c *serial.Channel, v float64) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.Set(ctx, v)
}

// eventually polls cond until it holds, or fails the test after hangGuard.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// inDoubt is the engine's reading of a Set error: in doubt unless it
// wraps actuators.ErrNotApplied.
func inDoubt(err error) bool {
	return err != nil && !errors.Is(err, actuators.ErrNotApplied)
}

func output(m *mcu.MCU, ch int) float64 {
	v, _ := m.Output(ch)
	return v
}
