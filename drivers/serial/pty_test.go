package serial_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bugst "go.bug.st/serial"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/drivers/serial"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim/mcu"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
)

// socat is a pty pair joined by socat: a stand-in for a USB serial cable.
// Killing it is pulling the cable; starting it again is plugging it in.
type socat struct {
	t    testing.TB
	path string
	a, b string
	cmd  *exec.Cmd
	log  bytes.Buffer
}

func newSocat(t *testing.T) *socat {
	path := testtool.Need(t, "socat", "socat")
	dir := t.TempDir()
	s := &socat{t: t, path: path, a: filepath.Join(dir, "ttyA"), b: filepath.Join(dir, "ttyB")}
	s.start()
	t.Cleanup(s.kill)
	return s
}

func (s *socat) start() {
	s.t.Helper()
	// Links left by a killed socat point at ptys that are gone.
	os.Remove(s.a)
	os.Remove(s.b)
	s.log.Reset()
	s.cmd = exec.Command(s.path, "-d", "-d", "pty,raw,echo=0,link="+s.a, "pty,raw,echo=0,link="+s.b)
	s.cmd.Stderr = &s.log
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	eventually(s.t, "socat's ptys", func() bool {
		_, errA := os.Stat(s.a) // Stat follows the link: the pty exists
		_, errB := os.Stat(s.b)
		return errA == nil && errB == nil
	})
}

// kill pulls the cable: socat dies at once, and both ptys with it.
func (s *socat) kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// garbler is an MCU's port that also hands the MCU garbage on request, as
// if noise had hit the line from the host.
type garbler struct {
	bugst.Port
	mu   sync.Mutex
	junk []byte
}

func (g *garbler) Read(p []byte) (int, error) {
	g.mu.Lock()
	if len(g.junk) > 0 {
		n := copy(p, g.junk)
		g.junk = g.junk[n:]
		g.mu.Unlock()
		return n, nil
	}
	g.mu.Unlock()
	return g.Port.Read(p)
}

// serveMCU runs the simulated MCU on its end of the cable, reopening it
// whenever it fails, until the test ends. It returns a function that
// queues garbage into the MCU's input.
func serveMCU(t *testing.T, m *mcu.MCU, port string) func([]byte) {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var cur *garbler
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			p, err := bugst.Open(port, &bugst.Mode{BaudRate: 115200})
			if err == nil {
				g := &garbler{Port: p}
				mu.Lock()
				cur = g
				mu.Unlock()
				m.Serve(ctx, g)
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func(b []byte) {
		mu.Lock()
		defer mu.Unlock()
		cur.mu.Lock()
		cur.junk = append(cur.junk, b...)
		cur.mu.Unlock()
	}
}

// TestOverPTY runs the link through real ptys with go.bug.st/serial on
// both ends: what unit tests show over net.Pipe, over the kernel's tty
// layer, and pulling and plugging the cable by killing and restarting socat.
func TestOverPTY(t *testing.T) {
	cable := newSocat(t)
	m, err := mcu.New(fourChannels())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	garble := serveMCU(t, m, cable.b)

	cfg := fastConfig()
	cfg.Port = cable.a
	cfg.AckTimeout = 60 * time.Millisecond // a tty round trip on a loaded machine
	l, err := serial.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r := &rig{t: t, m: m, l: l}
	r.ready()
	servo, pwm := r.channel(0), r.channel(1)
	battery, _ := l.Supply(0)

	t.Log("set, acked with the applied value, read back")
	if err := r.set(servo, 123.25); err != nil {
		t.Fatal(err)
	}
	if v, err := servo.ReadBack(context.Background()); err != nil || v != 123.25 || output(m, 0) != 123.25 {
		t.Fatalf("read back %v, %v; MCU %v", v, err, output(m, 0))
	}

	t.Log("telemetry volts")
	m.SetVolts(0, 11.7)
	eventually(t, "11.7 V", func() bool { v, _, err := battery.Volts(); return err == nil && v == 11.7 })

	t.Log("NAK: nothing changes")
	m.NakChannel(1, serial.NakFault)
	if err := r.set(pwm, 0.5); serial.CodeOf(err) != serial.CodeNak || inDoubt(err) || output(m, 1) != 0 {
		t.Fatalf("NAKed set: %v, output %v", err, output(m, 1))
	}
	m.NakChannel(1, 0)

	t.Log("dropped and corrupted frames: retransmission, each set applied once")
	sets := m.Stats().Sets
	for i, fault := range []func(){func() { m.DropReplies(1) }, func() { m.CorruptReplies(1) }, func() { m.DropRequests(1) }} {
		fault()
		if err := r.set(pwm, 0.1*float64(i+1)); err != nil {
			t.Fatalf("fault %d: %v", i, err)
		}
	}
	if got := m.Stats().Sets - sets; got != 3 {
		t.Fatalf("%d sets applied for 3 asked", got)
	}
	if s := l.Stats(); s.Retransmits == 0 || s.BadCRC == 0 {
		t.Fatalf("no retransmission or no CRC failure seen: %+v", s)
	}

	t.Log("garbage both ways: nothing moves")
	sets = m.Stats().Sets
	rng := rand.New(rand.NewPCG(3, 4))
	junk := make([]byte, 2048)
	for i := range junk {
		junk[i] = byte(rng.Uint32())
		if i%29 == 0 {
			junk[i] = serial.Sync
		}
	}
	skipped := m.Stats().Skipped
	garble(junk)
	m.InjectGarbage(junk)
	eventually(t, "the garbage decoded", func() bool {
		return m.Stats().Skipped > skipped+1000 && l.Stats().Skipped > 1000
	})
	if m.Stats().Sets != sets || output(m, 0) != 123.25 || output(m, 1) != 0.3 {
		t.Fatalf("garbage moved something: sets %d→%d, outputs %v %v", sets, m.Stats().Sets, output(m, 0), output(m, 1))
	}
	r.ready()
	if err := r.set(pwm, 0.3); err != nil {
		t.Fatalf("set after garbage: %v", err)
	}

	t.Log("a late answer: in doubt, and the output did move")
	m.DelayReplies(600 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	err = servo.Set(ctx, 44)
	cancel()
	if !inDoubt(err) {
		t.Fatalf("late answer: %v", err)
	}
	eventually(t, "the in-doubt set applied", func() bool { return output(m, 0) == 44 })
	eventually(t, "the session lost", func() bool { return l.Stats().SessionsLost > 0 })
	m.DelayReplies(0)
	r.ready()

	t.Log("unplug: link lost, not ready; plug in: ready again")
	trips, seen := m.Stats().WatchdogTrips, l.Stats().MCUWatchdog
	cable.kill()
	eventually(t, "the link lost", func() bool { return errors.Is(l.Ready(), actuators.ErrLinkLost) })
	if err := r.set(servo, 45); !errors.Is(err, actuators.ErrLinkLost) {
		t.Fatalf("set while unplugged: %v", err)
	}
	if _, err := servo.ReadBack(context.Background()); !errors.Is(err, actuators.ErrLinkLost) {
		t.Fatalf("read back while unplugged: %v", err)
	}
	if _, _, err := battery.Volts(); err == nil {
		t.Fatal("volts while unplugged")
	}
	// A pulled cable the MCU notices: its watchdog puts outputs safe.
	eventually(t, "the MCU's watchdog while unplugged", func() bool { return m.Stats().WatchdogTrips > trips })
	cable.start()
	r.ready()
	// The host learns of the trip and reads back the safe value, not the
	// one it last commanded.
	eventually(t, "the safe value read back", func() bool { v, err := servo.ReadBack(context.Background()); return err == nil && v == 90 })
	if s := l.Stats(); s.Opens < 2 || s.MCUWatchdog <= seen {
		t.Fatalf("no reopen or no watchdog trip reported: %+v", s)
	}
	if err := r.set(servo, 46); err != nil {
		t.Fatalf("set after replug: %v", err)
	}

	t.Log("the host falls silent: the MCU's watchdog puts outputs safe")
	if err := r.set(servo, 47); err != nil {
		t.Fatal(err)
	}
	trips = m.Stats().WatchdogTrips
	l.Close()
	eventually(t, "the MCU's watchdog", func() bool { return m.Stats().WatchdogTrips > trips })
	for ch, want := range []float64{90, 0, 0, 90} {
		if got := output(m, ch); got != want {
			t.Fatalf("channel %d at %v after the watchdog, want %v", ch, got, want)
		}
	}
}

var _ io.Reader = (*garbler)(nil)
