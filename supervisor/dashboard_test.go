package supervisor_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"github.com/saga-supervisor/saga-supervisor/supervisor"
)

// The page and its files are embedded and served with their content types,
// a CSP that allows only the page's own files (no inline script) and no
// framing; the page loads its script and style from those files only.
func TestDashboardAssets(t *testing.T) {
	sup, _ := startSupervisor(t, t.TempDir())
	srv := newServer(t, sup.HTTPHandler())
	for _, c := range []struct{ path, ctype, contains string }{
		{"/", "text/html; charset=utf-8", `<script src="/dashboard.js" defer></script>`},
		{"/dashboard.js", "text/javascript; charset=utf-8", "new EventSource(\"/api/v1/events\")"},
		{"/dashboard.css", "text/css; charset=utf-8", "#estop"},
	} {
		r := do(t, srv, "GET", c.path, nil, "")
		if r.status != 200 || r.header.Get("Content-Type") != c.ctype || !strings.Contains(r.body, c.contains) {
			t.Errorf("GET %s: %d %q, body lacks %q", c.path, r.status, r.header.Get("Content-Type"), c.contains)
		}
		csp := r.header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'self'", "script-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("GET %s: CSP %q lacks %q", c.path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("GET %s: CSP %q allows inline code", c.path, csp)
		}
		if r.header.Get("X-Frame-Options") != "DENY" || r.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: headers %v", c.path, r.header)
		}
	}
	page := do(t, srv, "GET", "/", nil, "").body
	// Every script has a src (no inline code), and nothing comes from
	// elsewhere: no URL with a scheme or a protocol-relative one.
	for _, s := range regexp.MustCompile(`<script[^>]*>`).FindAllString(page, -1) {
		if !strings.Contains(s, `src="/`) {
			t.Errorf("inline script: %s", s)
		}
	}
	if m := regexp.MustCompile(`(src|href)="(https?:)?//`).FindString(page); m != "" {
		t.Errorf("the page loads from elsewhere: %s", m)
	}
	if r := do(t, srv, "POST", "/dashboard.js", nil, "{}"); r.status != 405 {
		t.Errorf("POST /dashboard.js: %d", r.status)
	}
}

// newServer serves h until the test ends, after the streams the test
// opened are closed (the server's Close waits for every handler).
func newServer(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// sseEvent is one event read from a stream.
type sseEvent struct {
	name, data string
}

// readEvents reads a stream's events into a channel until it ends (or
// the test does).
func readEvents(t *testing.T, body io.Reader) <-chan sseEvent {
	ch := make(chan sseEvent, 64)
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.name != "" || ev.data != "" {
					select {
					case ch <- ev:
					case <-done:
						return
					}
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data += strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return ch
}

func openStream(t *testing.T, url string) (*http.Response, <-chan sseEvent) {
	t.Helper()
	res, err := http.Get(url + "/api/v1/events")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("events: %d %q %s", res.StatusCode, res.Header.Get("Content-Type"), b)
	}
	return res, readEvents(t, res.Body)
}

// waitSnapshot reads snapshots until one satisfies cond.
func waitSnapshot(t *testing.T, events <-chan sseEvent, what string, cond func(supervisor.Dashboard) bool) supervisor.Dashboard {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the stream ended waiting for %s", what)
			}
			if ev.name != "status" {
				continue
			}
			var d supervisor.Dashboard
			if err := json.Unmarshal([]byte(ev.data), &d); err != nil {
				t.Fatalf("event data %q: %v", ev.data, err)
			}
			if cond(d) {
				return d
			}
		case <-deadline:
			t.Fatalf("no snapshot with %s in 10 s", what)
		}
	}
}

// The stream pushes snapshots: the actuators with their limits, then the
// open saga with its step, the journal's tail with the step's records, a
// refusal with its code and count, and the halt.
func TestDashboardEventsFollowTheSupervisor(t *testing.T) {
	sup, _ := startSupervisor(t, t.TempDir())
	srv := newServer(t, sup.HTTPHandler())
	_, events := openStream(t, srv.URL)
	first := waitSnapshot(t, events, "the actuators", func(d supervisor.Dashboard) bool { return len(d.Actuators) == 4 })
	for _, a := range first.Actuators {
		if a.Name == "elbow" && (a.Min != 0 || a.Max != 135 || a.SafeMode != "value" || a.SafeValue != 45 || a.Reading != "ok") {
			t.Errorf("elbow: %+v", a)
		}
	}
	if len(first.Supplies) != 1 || first.Supplies[0].MinVolts != 6.4 || first.Supplies[0].MaxVolts != 8.6 {
		t.Errorf("supplies: %+v", first.Supplies)
	}

	a := &sender{t: t, sup: sup, agent: "planner"}
	a.hello()
	saga := a.must(api.Request{Op: api.OpBegin}).Saga
	a.must(api.Request{Op: api.OpStep, Saga: saga, Actuator: "base", Value: 33})
	if r := a.send(api.Request{Op: api.OpStep, Saga: saga, Actuator: "elbow", Value: 170}); r.Code != "LIMIT_MAX" {
		t.Fatalf("over-limit step: %+v", r)
	}
	d := waitSnapshot(t, events, "the saga, its records and the refusal", func(d supervisor.Dashboard) bool {
		return len(d.Sagas) == 1 && len(d.Refused) == 1 && d.Refusals["LIMIT_MAX"] == 1 && len(d.Status.Leases) == 1
	})
	if s := d.Sagas[0]; s.ID != saga || s.Agent != "planner" || len(s.Steps) != 1 ||
		s.Steps[0].Actuator != "base" || s.Steps[0].Value != 33 || s.Steps[0].Outcome != "applied" {
		t.Errorf("saga: %+v", s)
	}
	if r := d.Refused[0]; r.Code != "LIMIT_MAX" || r.Actuator != "elbow" || r.Agent != "planner" || len(r.Hash) != 12 {
		t.Errorf("refusal: %+v", r)
	}
	var types []string
	for _, r := range d.Journal {
		types = append(types, r.Type)
	}
	if got := strings.Join(types, " "); !strings.Contains(got, "BEGIN INTENT APPLIED REFUSED") {
		t.Errorf("journal tail: %s", got)
	}

	do(t, srv, "POST", "/api/v1/halt", nil, `{"reason":"dashboard test"}`)
	waitSnapshot(t, events, "the halt", func(d supervisor.Dashboard) bool {
		return d.Status.Halted && strings.Contains(d.Status.HaltWhy, "dashboard test") && !d.Status.Ready
	})
}

// At most MaxDashboardStreams streams at once: the next is refused 503
// BUSY with a message, and a stream that ends makes room.
func TestDashboardStreamCap(t *testing.T) {
	sup, _ := startSupervisor(t, t.TempDir())
	srv := newServer(t, sup.HTTPHandler())
	var open []*http.Response
	for range supervisor.MaxDashboardStreams {
		res, _ := openStream(t, srv.URL)
		open = append(open, res)
	}
	r := do(t, srv, "GET", "/api/v1/events", nil, "")
	if m := r.json(t); r.status != 503 || m["code"] != api.CodeBusy || !strings.Contains(m["message"].(string), "at most 8") {
		t.Fatalf("stream %d: %d %s", supervisor.MaxDashboardStreams+1, r.status, r.body)
	}
	open[0].Body.Close()
	daemontest.WaitFor(t, "a stream to make room", 10*time.Second, func() bool {
		res, err := http.Get(srv.URL + "/api/v1/events")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		return res.StatusCode == 200
	})
}

// stalledWriter is a ResponseWriter whose client never reads: its first
// write after the headers blocks until released.
type stalledWriter struct {
	hdr      http.Header
	blocked  chan struct{} // closed when a write blocks
	release  chan struct{}
	once     sync.Once
	prologue bool
}

func (w *stalledWriter) Header() http.Header { return w.hdr }
func (w *stalledWriter) WriteHeader(int)     {}
func (w *stalledWriter) Flush()              {}
func (w *stalledWriter) Write(p []byte) (int, error) {
	if !w.prologue { // "retry:" goes through
		w.prologue = true
		return len(p), nil
	}
	w.once.Do(func() { close(w.blocked) })
	<-w.release
	return 0, errors.New("stalled client gone")
}

// A stream whose client never reads holds up nothing: while it is blocked
// in a write, the supervisor keeps stepping, a halt latches, and another
// stream gets fresh snapshots showing both.
func TestDashboardStalledClientBlocksNothing(t *testing.T) {
	sup, _ := startSupervisor(t, t.TempDir())
	h := sup.HTTPHandler()
	srv := newServer(t, h)

	stalled := &stalledWriter{hdr: http.Header{}, blocked: make(chan struct{}), release: make(chan struct{})}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		h.ServeHTTP(stalled, httptest.NewRequest("GET", "/api/v1/events", nil))
	}()
	select {
	case <-stalled.blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("the stalled stream never wrote a snapshot")
	}
	defer func() {
		close(stalled.release)
		<-ended
	}()

	_, events := openStream(t, srv.URL)
	a := &sender{t: t, sup: sup, agent: "planner"}
	a.hello()
	saga := a.must(api.Request{Op: api.OpBegin}).Saga
	for i := range 20 {
		a.must(api.Request{Op: api.OpStep, Saga: saga, Actuator: "base", Value: float64(i)})
	}
	sup.Halt("test", "while a client is stalled")
	if halted, _ := sup.Engine().Halted(); !halted {
		t.Fatal("the halt did not latch")
	}
	waitSnapshot(t, events, "the 20 steps and the halt", func(d supervisor.Dashboard) bool {
		var base float64
		for _, s := range d.Status.Actuators {
			if s.Name == "base" {
				base = s.Commanded
			}
		}
		// The halt's records reached the journal's tail: the saga it
		// ended, its steps left unresolved.
		halted := false
		for _, r := range d.Journal {
			halted = halted || r.Type == "END" && r.Saga == saga
		}
		return d.Status.Halted && base == 19 && halted
	})
	select {
	case <-ended:
		t.Fatal("the stalled stream ended while blocked in its write")
	default:
	}
}

// Streams end when the supervisor stops.
func TestDashboardStreamsEndOnClose(t *testing.T) {
	sup, _ := startSupervisor(t, t.TempDir())
	srv := newServer(t, sup.HTTPHandler())
	_, events := openStream(t, srv.URL)
	waitSnapshot(t, events, "a first snapshot", func(supervisor.Dashboard) bool { return true })
	go sup.Close()
	for {
		select {
		case _, ok := <-events:
			if !ok {
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the stream outlived the supervisor by 10 s")
		}
	}
}

// The server's Shutdown ends the streams at once: it does not wait out
// its context for handlers that would never return.
func TestDashboardStreamsEndOnShutdown(t *testing.T) {
	sup, _ := startSupervisor(t, t.TempDir())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := supervisor.NewHTTPServer(ln.Addr().String(), sup.HTTPHandler())
	go srv.Serve(ln)
	_, events := openStream(t, "http://"+ln.Addr().String())
	waitSnapshot(t, events, "a first snapshot", func(supervisor.Dashboard) bool { return true })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v (a stream held it)", err)
	}
	for range events {
	}
}
