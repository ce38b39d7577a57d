package supervisor

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// stuckSupply reads 12 V until stuck is set; then a reading never returns
// (an I2C read wedged in the kernel) until release is closed.
type stuckSupply struct {
	stuck   atomic.Bool
	release chan struct{}
}

func (s *stuckSupply) Volts() (float64, time.Time, error) {
	if s.stuck.Load() {
		<-s.release
	}
	return 12, time.Now(), nil
}

// stuckDriver wraps a driver; once stuck is set, Set ignores its context
// and never returns until release is closed (a driver with a bug).
type stuckDriver struct {
	actuators.Driver
	stuck   atomic.Bool
	release chan struct{}
}

func (d *stuckDriver) Set(ctx context.Context, v float64) error {
	if d.stuck.Load() {
		<-d.release
	}
	return d.Driver.Set(ctx, v)
}

// stuckFS is the OS's file system whose fdatasync, once stuck is set,
// does not return until release is closed (a disk that stopped answering).
type stuckFS struct {
	wal.OSFS
	stuck   *atomic.Bool
	release chan struct{}
}

type stuckFile struct {
	wal.File
	fs *stuckFS
}

func (f stuckFS) OpenFile(name string, flag int, perm fs.FileMode) (wal.File, error) {
	file, err := f.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return stuckFile{file, &f}, nil
}

func (f stuckFile) Sync() error {
	if f.fs.stuck.Load() {
		<-f.fs.release
	}
	return f.File.Sync()
}

// TestAliveFollowsProgress: Alive is what feeds systemd's watchdog. It
// holds while the supervisor is idle or serving, and fails — so the
// watchdog goes hungry and systemd restarts the daemon — when the poll
// loop is stuck (a wedged supply read) and when requests wait but none is
// served (a driver stuck past its timeout). A watchdog fed by a ticker of
// its own would never have a hung supervisor restarted.
func TestAliveFollowsProgress(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Journal.Dir = filepath.Join(dir, "journal")
	cfg.Sim.World = ""
	cfg.Agents.Allow = nil
	b, err := FromConfig(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sup := &stuckSupply{release: make(chan struct{})}
	if err := b.Options.Supplies.Add(limits.SupplySpec{Name: "logic", MinVolts: 10, MaxVolts: 14, StaleAfter: time.Minute, Action: limits.Warn}, sup); err != nil {
		t.Fatal(err)
	}
	disk := stuckFS{stuck: new(atomic.Bool), release: make(chan struct{})}
	b.Options.WAL.FS = disk
	base := b.Options.Actuators.Get("base")
	drv := &stuckDriver{Driver: base.Driver, release: make(chan struct{})}
	base.Driver = drv
	s, err := New(b.Options)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Alive(); err != nil {
		t.Fatalf("a fresh supervisor: %v", err)
	}

	// A driver stuck on a step: the request is in flight and nothing is
	// served. Alive holds until the front door's bound, then fails.
	s.alive.mu.Lock()
	s.alive.ingressAfter = 300 * time.Millisecond
	s.alive.mu.Unlock()
	submit := func(payload string) <-chan api.Reply {
		req, derr := api.DecodeRequest([]byte(payload), 8192)
		got := make(chan api.Reply, 1)
		s.Submit(req.Agent, req, derr, time.Now(), func(r api.Reply) { got <- r })
		return got
	}
	h := <-submit(`{"id":"h","agent":"planner","op":"hello","ttl_ms":60000}`)
	lease := fmt.Sprintf(`"lease":%q,"epoch":%d`, h.Lease, h.Epoch)
	saga := (<-submit(`{"id":"b","agent":"planner","op":"begin",` + lease + `}`)).Saga
	drv.stuck.Store(true)
	step := submit(fmt.Sprintf(`{"id":"s","agent":"planner","op":"step",%s,"saga":%d,"actuator":"base","value":10}`, lease, saga))
	if err := s.Alive(); err != nil {
		t.Fatalf("a step just sent: %v", err)
	}
	waitAlive(t, s, "none served")
	close(drv.release)
	<-step // answered: its deadline passed while stuck, so it failed, in doubt, and was unwound
	waitAlive(t, s, "")

	// The journal's disk stops answering: a record is written, never made
	// durable (the step waits for it).
	s.alive.mu.Lock()
	s.alive.journalAfter = 300 * time.Millisecond
	s.alive.mu.Unlock()
	disk.stuck.Store(true)
	step = submit(fmt.Sprintf(`{"id":"s2","agent":"planner","op":"step",%s,"saga":%d,"actuator":"gripper","value":10}`, lease, saga))
	waitAlive(t, s, "not durable")
	close(disk.release)
	<-step
	waitAlive(t, s, "")

	// The poll loop stuck on a supply read.
	sup.stuck.Store(true)
	waitAlive(t, s, "no refresh")
	close(sup.release)
	waitAlive(t, s, "")
}

// waitAlive waits until Alive fails with an error containing want, or
// holds (want ""). Reaching it is the test; the bound is only a backstop.
func waitAlive(t *testing.T, s *Supervisor, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.Alive()
		if want == "" && err == nil || want != "" && err != nil && strings.Contains(err.Error(), want) {
			t.Logf("Alive: %v", err)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Alive = %v, want %q", err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
