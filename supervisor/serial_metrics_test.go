//go:build !saga_lean

package supervisor

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/saga-supervisor/saga-supervisor/internal/promtext/promtexttest"

	"github.com/saga-supervisor/saga-supervisor/drivers/serial"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim/mcu"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/supervisor/wiring"
)

// A board's link is a readiness input and is exported on /metrics: up, and
// its frame, CRC, retransmission and lost-session counters, with lint-clean
// names.
func TestSerialLinkMetrics(t *testing.T) {
	board, err := mcu.New(mcu.Options{Channels: []mcu.ChannelSpec{{}}, Supplies: []float64{12}})
	if err != nil {
		t.Fatal(err)
	}
	defer board.Close()
	host, dev := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go board.Serve(ctx, dev)
	l, err := serial.OpenConn(ctx, host, serial.Config{Name: "pico"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	if err := l.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	cfg := config.Default()
	cfg.Journal.Dir = filepath.Join(dir, "journal")
	cfg.Sim.World = ""
	b, err := FromConfig(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.Options.Inputs = append(b.Options.Inputs, wiring.BoardInput("pico", l))
	s, err := New(b.Options)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close(); b.Close() }()

	want := `
# HELP saga_serial_link_up 1 while the serial session with a microcontroller board is up, else 0.
# TYPE saga_serial_link_up gauge
saga_serial_link_up{mcu="pico"} 1
`
	if err := testutil.GatherAndCompare(promtexttest.Gatherer(s.Registry()), strings.NewReader(want), "saga_serial_link_up"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(promtexttest.Gatherer(s.Registry()), "saga_serial_frames_received_total", "saga_serial_crc_errors_total",
		"saga_serial_retransmits_total", "saga_serial_sessions_lost_total"); err != nil || n != 4 {
		t.Errorf("serial counters: %d series, %v", n, err)
	}
	if problems, err := testutil.GatherAndLint(promtexttest.Gatherer(s.Registry())); err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	if st := s.Status(); !st.Ready {
		t.Errorf("not ready with the board up: %v", st.Reasons)
	}
	board.Unplug()
	waitFor(t, "the unplugged board to make the supervisor not ready", func() bool {
		for _, r := range s.Status().Reasons {
			if strings.HasPrefix(r, "input mcu pico:") {
				return true
			}
		}
		return false
	})
}
