package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
)

// bench rss measures the daemon's resident memory: idle, at the peak of
// a flood through its embedded broker, and as it comes back after the
// flood. It runs the daemon as a process of its own, `run` on the embedded
// default (sim arm, in-process broker) in a fresh working directory, as
// systemd would, with both listeners on free loopback ports and the broker
// taking anonymous clients so that the flood needs no logins. It reads
// /proc/PID/status: VmRSS, split into the daemon's private memory (RssAnon)
// and the pages of its binary it has touched (RssFile), and VmHWM, the
// peak. Each --daemon binary is measured the same way, one after the other
// in the same run, so that two builds compare side by side; memory, unlike
// time, does not drift much with the machine's load.

// Defaults of bench rss.
const (
	rssDefaultSettle = 5 * time.Second  // after ready, before idle is read
	rssDefaultFlood  = 10 * time.Second // the flood's length
	rssDefaultAfter  = 60 * time.Second // watched after the flood
	rssFloodClients  = 8                // clients publishing as fast as acknowledged
	rssFloodWindow   = 64               // unacknowledged publishes per flooding client
	rssBigEvery      = 4                // one publish in this many is oversize
	rssBigBytes      = 32 << 10         // an oversize request: refused, but carried by the broker first
	rssIdleClients   = 64               // connections held open through the flood
)

// rssOptions are the flags of bench rss.
type rssOptions struct {
	daemons              []string // binaries to measure
	settle, flood, after time.Duration
}

// RSSResult is what bench rss reports (its JSON). Sizes are in KiB, as
// /proc reports them.
type RSSResult struct {
	Dir           string   `json:"dir"`
	SettleNs      int64    `json:"settle_ns"`
	FloodNs       int64    `json:"flood_ns"`
	AfterNs       int64    `json:"after_ns"`
	FloodClients  int      `json:"flood_clients"`
	FloodWindow   int      `json:"flood_window"`
	FloodBigBytes int      `json:"flood_big_bytes"`
	FloodBigEvery int      `json:"flood_big_every"`
	IdleClients   int      `json:"idle_clients"`
	FloodAgents   []string `json:"flood_agents"`
	Daemons       []RSSRun `json:"daemons"`
	TookNs        int64    `json:"took_ns"`
}

// RSSRun is one daemon's figures.
type RSSRun struct {
	Binary      string `json:"binary"`
	BinaryBytes int64  `json:"binary_bytes"`
	Idle        RSS    `json:"idle"`
	// PeakKiB is VmHWM at the end of the flood: the most the daemon held
	// resident at any moment of its life.
	PeakKiB  int64 `json:"peak_kib"`
	FloodEnd RSS   `json:"flood_end"`
	// After samples the daemon once a second after the flood, the last at
	// the end of the watch.
	After []RSSSample `json:"after"`
	// What the flood did: publishes sent and acknowledged by the broker,
	// and replies that came back.
	Sent    uint64 `json:"sent"`
	Acked   uint64 `json:"acked"`
	Replies uint64 `json:"replies"`
	// Trims is the daemon's saga_memory_trims_total at the end (-1: a
	// daemon without it).
	Trims int64 `json:"trims"`
}

// RSS is one reading of /proc/PID/status.
type RSS struct {
	KiB     int64 `json:"rss_kib"`      // VmRSS
	AnonKiB int64 `json:"rss_anon_kib"` // RssAnon: the daemon's private memory
	FileKiB int64 `json:"rss_file_kib"` // RssFile: pages of its binary (and other files) mapped
}

// RSSSample is a reading some time after the flood ended.
type RSSSample struct {
	AfterNs int64 `json:"after_ns"`
	RSS
}

// At is the sample taken at or just after d past the flood, or the last.
func (r RSSRun) At(d time.Duration) RSSSample {
	for _, s := range r.After {
		if s.AfterNs >= int64(d) {
			return s
		}
	}
	if len(r.After) == 0 {
		return RSSSample{}
	}
	return r.After[len(r.After)-1]
}

// measureRSS measures every daemon of opt in turn, each in its own
// working directory under res.Dir.
func measureRSS(ctx context.Context, res *RSSResult, opt rssOptions, prog func(string)) error {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		return fmt.Errorf("bench rss: reads the daemon's /proc/PID/status (Linux): %w", err)
	}
	yaml, topics, agents, err := rssConfig()
	if err != nil {
		return err
	}
	res.FloodAgents = agents
	for i, bin := range opt.daemons {
		work := filepath.Join(res.Dir, fmt.Sprintf("daemon-%d", i+1))
		if err := os.Mkdir(work, 0o700); err != nil {
			return fmt.Errorf("bench rss: %w", err)
		}
		if err := os.WriteFile(filepath.Join(work, "config.yaml"), yaml, 0o600); err != nil {
			return fmt.Errorf("bench rss: %w", err)
		}
		run, err := measureRSSOne(ctx, bin, work, topics, agents, opt, func(s string) { prog(fmt.Sprintf("%s (%d of %d): %s", filepath.Base(bin), i+1, len(opt.daemons), s)) })
		if err != nil {
			return fmt.Errorf("bench rss: %s: %w", bin, err)
		}
		res.Daemons = append(res.Daemons, run)
	}
	return nil
}

// rssConfig is the embedded default with both listeners on free loopback
// ports and anonymous clients on the broker, and the agents the flood
// speaks as: those of agents.allow that may ask for the status (with no
// list, a name of its own) and their topics.
func rssConfig() (_ []byte, _ mqtt.Topics, agents []string, _ error) {
	text := string(config.DefaultYAML)
	for _, r := range [][2]string{
		{"listen: 127.0.0.1:1883", "listen: 127.0.0.1:0"},
		{"listen: 127.0.0.1:8080", "listen: 127.0.0.1:0"},
		{"anonymous: false", "anonymous: true"},
	} {
		if strings.Count(text, r[0]) != 1 {
			return nil, mqtt.Topics{}, nil, fmt.Errorf("bench rss: the embedded default configuration no longer holds %q once", r[0])
		}
		text = strings.Replace(text, r[0], r[1], 1)
	}
	cfg, err := config.Parse([]byte(text), "bench-rss.yaml")
	if err != nil {
		return nil, mqtt.Topics{}, nil, fmt.Errorf("bench rss: the adapted default configuration: %w", err)
	}
	for name, p := range cfg.Agents.Allow {
		if p.Ops == nil || slices.Contains(p.Ops, "status") {
			agents = append(agents, name)
		}
	}
	if len(cfg.Agents.Allow) == 0 {
		agents = []string{"rss-flood"}
	}
	if len(agents) == 0 {
		return nil, mqtt.Topics{}, nil, errors.New("bench rss: no agent of the default configuration may ask for the status")
	}
	slices.Sort(agents)
	return []byte(text), mqtt.Topics{Prefix: cfg.MQTT.Prefix, Device: cfg.Device}, agents, nil
}

// measureRSSOne starts the daemon bin in work, reads it idle, floods it,
// and watches it come back.
func measureRSSOne(ctx context.Context, bin, work string, topics mqtt.Topics, agents []string, opt rssOptions, prog func(string)) (run RSSRun, err error) {
	run.Binary, run.Trims = bin, -1
	if st, err := os.Stat(bin); err == nil {
		run.BinaryBytes = st.Size()
	}
	prog("starting")
	d, err := startRSSDaemon(bin, work)
	if err != nil {
		return run, err
	}
	defer func() {
		if serr := d.stop(); serr != nil && err == nil {
			err = serr
		}
	}()

	prog("idle")
	if err := sleepCtx(ctx, opt.settle); err != nil {
		return run, err
	}
	if run.Idle, err = readRSS(d.pid()); err != nil {
		return run, err
	}

	prog("flood")
	f, err := startRSSFlood(d.mqtt, topics, agents)
	if err != nil {
		return run, err
	}
	ferr := sleepCtx(ctx, opt.flood)
	run.Sent, run.Acked, run.Replies = f.stop()
	if ferr != nil {
		return run, ferr
	}
	if run.FloodEnd, err = readRSS(d.pid()); err != nil {
		return run, err
	}
	if run.PeakKiB, err = readStatusKiB(d.pid(), "VmHWM"); err != nil {
		return run, err
	}

	ended := time.Now()
	for next := time.Second; next <= opt.after; next += time.Second {
		prog(fmt.Sprintf("after the flood, %v of %v", next, opt.after))
		if err := sleepCtx(ctx, time.Until(ended.Add(next))); err != nil {
			return run, err
		}
		r, err := readRSS(d.pid())
		if err != nil {
			return run, err
		}
		run.After = append(run.After, RSSSample{AfterNs: int64(time.Since(ended)), RSS: r})
	}
	run.Trims = d.trims()
	return run, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// rssDaemon is a daemon process bench rss measures.
type rssDaemon struct {
	cmd    *exec.Cmd
	mqtt   string // tcp://127.0.0.1:PORT
	http   string // 127.0.0.1:PORT
	stderr *lockedBuffer
	exited chan struct{}
}

// lockedBuffer keeps the start of the daemon's log, to show when it fails.
type lockedBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := 16<<10 - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}

// startRSSDaemon runs `bin run --config config.yaml` in work, reads the
// addresses it prints and waits until /readyz answers 200.
func startRSSDaemon(bin, work string) (*rssDaemon, error) {
	d := &rssDaemon{stderr: &lockedBuffer{}, exited: make(chan struct{})}
	d.cmd = exec.Command(bin, "run", "--config", "config.yaml", "--log-level", "warn")
	d.cmd.Dir = work
	d.cmd.Stderr = d.stderr
	out, err := d.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { d.cmd.Wait(); close(d.exited) }()
	fail := func(err error) (*rssDaemon, error) {
		d.stop()
		return nil, fmt.Errorf("%w; its log:\n%s", err, d.stderr.String())
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	deadline := time.After(60 * time.Second)
	for d.mqtt == "" || d.http == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				return fail(errors.New("the daemon ended before printing its addresses"))
			}
			f := strings.Fields(line)
			switch {
			case len(f) >= 2 && f[0] == "MQTT":
				d.mqtt = f[1]
			case len(f) >= 2 && f[0] == "HTTP":
				d.http = strings.TrimPrefix(f[1], "http://")
			}
		case <-deadline:
			return fail(errors.New("no MQTT and HTTP addresses printed within 60 s"))
		}
	}
	go func() {
		for range lines { // the rest of its output, unread otherwise
		}
	}()
	for {
		if resp, err := http.Get("http://" + d.http + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return d, nil
			}
		}
		select {
		case <-d.exited:
			return fail(errors.New("the daemon ended before it was ready"))
		case <-deadline:
			return fail(errors.New("not ready within 60 s"))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (d *rssDaemon) pid() int { return d.cmd.Process.Pid }

// stop ends the daemon with SIGTERM (its orderly stop), or kills it after
// 20 s.
func (d *rssDaemon) stop() error {
	select {
	case <-d.exited:
		return nil
	default:
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
		return nil
	case <-time.After(20 * time.Second):
		d.cmd.Process.Kill()
		<-d.exited
		return errors.New("the daemon did not stop within 20 s of SIGTERM: killed")
	}
}

// trims reads saga_memory_trims_total from the daemon's /metrics (-1: not
// there).
func (d *rssDaemon) trims() int64 {
	resp, err := http.Get("http://" + d.http + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "saga_memory_trims_total "); ok {
			if n, err := strconv.ParseFloat(v, 64); err == nil {
				return int64(n)
			}
		}
	}
	return -1
}

// readRSS reads VmRSS, RssAnon and RssFile of process pid.
func readRSS(pid int) (RSS, error) {
	var r RSS
	var err error
	for _, f := range []struct {
		key string
		v   *int64
	}{{"VmRSS", &r.KiB}, {"RssAnon", &r.AnonKiB}, {"RssFile", &r.FileKiB}} {
		if *f.v, err = readStatusKiB(pid, f.key); err != nil {
			return r, err
		}
	}
	return r, nil
}

// readStatusKiB reads one "Key:   N kB" line of /proc/PID/status.
func readStatusKiB(pid int, key string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", key, pid)
}

// printRSS prints the figures as a table, one row per daemon.
func printRSS(w io.Writer, res *RSSResult) {
	fmt.Fprintf(w, "resident memory of `run` on the embedded default (sim arm, in-process broker, anonymous on loopback), one daemon after the other\n")
	fmt.Fprintf(w, "flood: %d clients for %v, each publishing QoS 1 to its command topic as fast as acknowledged (%d unacknowledged at most):\n",
		res.FloodClients, time.Duration(res.FloodNs), res.FloodWindow)
	fmt.Fprintf(w, "status requests as %s, and one in %d a %d KiB payload the supervisor refuses; %d more connections held open, and a\n",
		strings.Join(res.FloodAgents, ", "), res.FloodBigEvery, res.FloodBigBytes>>10, res.IdleClients)
	fmt.Fprintf(w, "subscriber to every reply that never reads. idle is read %v after ready; MiB, VmRSS (private + binary's pages)\n\n", time.Duration(res.SettleNs))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	marks := []time.Duration{10 * time.Second, 30 * time.Second, 60 * time.Second}
	head := "binary\tsize\tidle\tpeak\tflood end\t"
	for _, m := range marks {
		if m <= time.Duration(res.AfterNs) {
			head += fmt.Sprintf("+%v\t", m)
		}
	}
	head += fmt.Sprintf("+%v − idle\tsent\ttrims\t", time.Duration(res.AfterNs))
	fmt.Fprintln(tw, head)
	mib := func(kib int64) string { return fmt.Sprintf("%.1f", float64(kib)/1024) }
	split := func(r RSS) string { return fmt.Sprintf("%s (%s+%s)", mib(r.KiB), mib(r.AnonKiB), mib(r.FileKiB)) }
	for _, d := range res.Daemons {
		row := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t", d.Binary, mib(d.BinaryBytes>>10), split(d.Idle), mib(d.PeakKiB), split(d.FloodEnd))
		for _, m := range marks {
			if m <= time.Duration(res.AfterNs) {
				row += split(d.At(m).RSS) + "\t"
			}
		}
		last := d.At(time.Duration(res.AfterNs))
		trims := "-"
		if d.Trims >= 0 {
			trims = strconv.FormatInt(d.Trims, 10)
		}
		row += fmt.Sprintf("%+.1f\t%d\t%s\t", float64(last.KiB-d.Idle.KiB)/1024, d.Sent, trims)
		fmt.Fprintln(tw, row)
	}
	tw.Flush()
}
