package supervisor

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/api"
)

// The live dashboard: a page (web/, embedded: no CDN, no build step) kept
// up to date over Server-Sent Events. One goroutine (dashHub.run) builds a
// snapshot from what the supervisor already computed — the status the
// poller refreshes, the engine's open sagas, the journal's tail read back
// off the step path — and leaves it in a one-slot "latest" box. Each
// stream takes the latest snapshot when it can: a slow or stuck browser
// only ever misses snapshots, and nothing the supervisor does waits on it.
const (
	// MaxDashboardStreams caps the live streams served at once (503 BUSY
	// past it): each holds a connection and a goroutine.
	MaxDashboardStreams = 8
	// dashEvery is how often the snapshot is rebuilt while a stream is
	// open; it is sent when it changed, and at least every dashRepeat so
	// the page can tell a live feed from a dead one.
	dashEvery  = 250 * time.Millisecond
	dashRepeat = time.Second
	// tailEvery is how often the journal's tail is read back.
	tailEvery = 500 * time.Millisecond
	// heartbeatEvery sends an SSE comment on a quiet stream, so a dead
	// connection is found by a failed write.
	heartbeatEvery = 10 * time.Second
	// streamWriteTimeout bounds one write to a stream (the server's
	// WriteTimeout would end every stream after 30 s: each write sets its
	// own deadline instead).
	streamWriteTimeout = 5 * time.Second
)

//go:embed web
var webFS embed.FS

// webAssets are the page's files and their content types.
var webAssets = map[string]string{
	"index.html":    "text/html; charset=utf-8",
	"dashboard.js":  "text/javascript; charset=utf-8",
	"dashboard.css": "text/css; charset=utf-8",
	"login.html":    "text/html; charset=utf-8",
	"login.js":      "text/javascript; charset=utf-8",
}

// dashboardCSP lets the page load only its own files and talk only to its
// own origin; no inline script, and no framing (an e-stop and reset page
// must not be clickjacked).
const dashboardCSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'; object-src 'none'"

// Dashboard is one snapshot of the live dashboard (GET /api/v1/dashboard,
// and each "status" event of /api/v1/events).
type Dashboard struct {
	At time.Time `json:"at"`
	// StatusAt is when the status was computed (the poller refreshes it
	// every poll interval); the halt latch is read when the snapshot is
	// built.
	StatusAt  time.Time         `json:"status_at"`
	Status    Status            `json:"status"`
	Actuators []DashActuator    `json:"actuators"`
	Supplies  []DashSupply      `json:"supplies"`
	Sagas     []DashSaga        `json:"sagas"`
	Journal   []TailRecord      `json:"journal"`
	Refused   []TailRecord      `json:"refused"`
	Refusals  map[string]uint64 `json:"refusal_counts"`
	TailError string            `json:"journal_tail_error,omitempty"`
	// ResetTokenFile is where the operator token is kept (the path, never
	// the token), for the reset box; omitted when it is not in a file.
	ResetTokenFile string `json:"reset_token_file,omitempty"`
}

// DashActuator is an actuator's configuration and reading for the page.
type DashActuator struct {
	Name      string  `json:"name"`
	Kind      string  `json:"kind"`
	Min       float64 `json:"min"`
	Max       float64 `json:"max"`
	SafeMode  string  `json:"safe_mode"`
	SafeValue float64 `json:"safe_value"`
	// Reading is how the read-back stands: ok, not_driven (never
	// commanded, or detached), link_lost, error, or none (the driver
	// cannot read back).
	Reading string `json:"reading"`
}

// DashSupply is a supply's thresholds for the page.
type DashSupply struct {
	Name       string  `json:"name"`
	MinVolts   float64 `json:"min_volts"`
	MaxVolts   float64 `json:"max_volts"`
	Hysteresis float64 `json:"hysteresis_volts"`
}

// DashSaga is an open saga for the page. An aborted saga still open is
// being unwound.
type DashSaga struct {
	ID          uint64     `json:"id"`
	Agent       string     `json:"agent"`
	AbortReason string     `json:"abort_reason,omitempty"`
	Steps       []DashStep `json:"steps"`
}

// DashStep is a step of an open saga: an empty outcome is in flight.
type DashStep struct {
	N        uint32  `json:"n"`
	Actuator string  `json:"actuator"`
	Value    float64 `json:"value"`
	Outcome  string  `json:"outcome"`
	Bucket   string  `json:"bucket,omitempty"`
}

// dashHub builds the snapshots and hands the latest to the streams.
type dashHub struct {
	s    *Supervisor
	tail *journalTail

	streams atomic.Int32 // open streams

	mu      sync.Mutex
	latest  []byte        // the last snapshot's JSON
	seq     uint64        // bumped with each new snapshot
	changed chan struct{} // closed (and replaced) when latest changes
	content []byte        // the last snapshot without its time, to spot changes
	sentAt  time.Time

	closed    chan struct{} // closed when every stream must end
	closeOnce sync.Once
	done      chan struct{}
}

func newDashHub(s *Supervisor, tail *journalTail) *dashHub {
	return &dashHub{s: s, tail: tail, changed: make(chan struct{}), closed: make(chan struct{}), done: make(chan struct{})}
}

// run reads the journal's tail back and, while a stream is open, builds
// snapshots, until stop is closed. It is the only goroutine reading the
// journal for the dashboard; it waits on no stream.
func (h *dashHub) run(stop <-chan struct{}) {
	defer close(h.done)
	t := time.NewTicker(dashEvery)
	defer t.Stop()
	var tailAt time.Time
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if time.Since(tailAt) >= tailEvery && h.tail.behind() {
			h.tail.catchUp()
			tailAt = time.Now()
		}
		if h.streams.Load() > 0 {
			h.publish(h.build())
		}
	}
}

// publish stores d as the latest snapshot if it changed or the last one
// is dashRepeat old, and wakes the streams. It never blocks on them.
func (h *dashHub) publish(d Dashboard) {
	// Compared without its times: the status is recomputed every poll
	// even when nothing in it changed.
	at, statusAt := d.At, d.StatusAt
	d.At, d.StatusAt = time.Time{}, time.Time{}
	content, err := json.Marshal(d)
	if err != nil {
		h.s.log.Error("dashboard: encoding a snapshot", "err", err)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if bytes.Equal(content, h.content) && at.Sub(h.sentAt) < dashRepeat {
		return
	}
	d.At, d.StatusAt = at, statusAt
	b, err := json.Marshal(d)
	if err != nil {
		return
	}
	h.latest, h.content, h.sentAt = b, content, at
	h.seq++
	close(h.changed)
	h.changed = make(chan struct{})
}

// current returns the latest snapshot, its number and the channel closed
// when a newer one is stored.
func (h *dashHub) current() ([]byte, uint64, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.latest, h.seq, h.changed
}

// join counts a new stream, refusing one past MaxDashboardStreams.
func (h *dashHub) join() bool {
	for {
		n := h.streams.Load()
		if n >= MaxDashboardStreams {
			return false
		}
		if h.streams.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (h *dashHub) leave() { h.streams.Add(-1) }

// close ends every stream (the supervisor is stopping).
func (h *dashHub) close() { h.closeOnce.Do(func() { close(h.closed) }) }

// build gathers a snapshot from what is already computed: no driver is
// read, no file is touched.
func (h *dashHub) build() Dashboard {
	s := h.s
	now := time.Now()
	st, at := s.cachedStatus()
	// The halt latch as of now, not as of the last poll.
	if halted, why := s.engine.Halted(); halted {
		r := "halted: " + why
		st.Halted, st.HaltWhy, st.Ready = true, why, false
		if len(st.Reasons) == 0 || st.Reasons[0] != r {
			st.Reasons = append([]string{r}, st.Reasons...)
		}
	}
	d := Dashboard{At: now, StatusAt: at, Status: st, Sagas: []DashSaga{}, Refusals: h.refusalCounts(), ResetTokenFile: s.opt.ResetTokenFile}
	d.Journal, d.Refused, d.TailError = h.tail.snapshot()
	byName := map[string]ActuatorStatus{}
	for _, a := range st.Actuators {
		byName[a.Name] = a
	}
	for _, name := range s.reg.Names() {
		a := s.reg.Get(name)
		da := DashActuator{Name: name, Kind: string(a.Kind), Min: a.Limits.Min, Max: a.Limits.Max,
			SafeMode: string(a.Safe.Mode), SafeValue: a.Safe.Value, Reading: "none"}
		if as, ok := byName[name]; ok {
			da.Reading = readingOf(as, a)
		}
		d.Actuators = append(d.Actuators, da)
	}
	for _, sp := range s.supplies.Specs() {
		d.Supplies = append(d.Supplies, DashSupply{Name: sp.Name, MinVolts: sp.MinVolts, MaxVolts: sp.MaxVolts, Hysteresis: sp.HysteresisVolts})
	}
	for _, o := range s.engine.Sagas() {
		ds := DashSaga{ID: o.ID, Agent: o.Owner.Agent, AbortReason: o.AbortReason, Steps: make([]DashStep, 0, len(o.Steps))}
		for _, sp := range o.Steps {
			ds.Steps = append(ds.Steps, DashStep{N: sp.N, Actuator: sp.Actuator, Value: sp.Target, Outcome: string(sp.Outcome), Bucket: string(sp.Bucket)})
		}
		d.Sagas = append(d.Sagas, ds)
	}
	return d
}

// readingOf names how an actuator's read-back stands. The status carries
// a failed read-back as text; the drivers wrap the actuators package's
// errors, whose text the wrapping keeps.
func readingOf(as ActuatorStatus, a *actuators.Actuator) string {
	if _, ok := a.Driver.(actuators.ReadBacker); !ok {
		return "none"
	}
	switch {
	case as.Error == "" && as.ReadBack != nil:
		return "ok"
	case as.NotDriven:
		return "not_driven"
	case strings.Contains(as.Error, actuators.ErrLinkLost.Error()):
		return "link_lost"
	case as.Error != "":
		return "error"
	}
	return "none"
}

// refusalCounts reads saga_refusals_total by code, straight from its
// counters (gathering the registry would read every actuator back).
func (h *dashHub) refusalCounts() map[string]uint64 {
	out := map[string]uint64{}
	h.s.metrics.refusals.Each(func(lvs []string, v float64) {
		if len(lvs) == 1 && v > 0 { // saga_refusals_total{code}
			out[lvs[0]] += uint64(v)
		}
	})
	return out
}

// page serves the embedded page and its files, with a strict CSP and no
// framing.
func (a *httpAPI) page(name string) http.HandlerFunc { return servePage(name) }

// servePage serves one embedded file of web/ (the dashboard's, the login
// page's), with a strict CSP and no framing.
func servePage(name string) http.HandlerFunc {
	b, err := fs.ReadFile(webFS, "web/"+name)
	if err != nil {
		panic("supervisor: the dashboard's " + name + " is not embedded: " + err.Error())
	}
	ctype := webAssets[name]
	return func(w http.ResponseWriter, _ *http.Request) {
		hdr := w.Header()
		hdr.Set("Content-Type", ctype)
		hdr.Set("Content-Security-Policy", dashboardCSP)
		hdr.Set("X-Frame-Options", "DENY")
		hdr.Set("Referrer-Policy", "no-referrer")
		w.WriteHeader(http.StatusOK)
		w.Write(b)
	}
}

// dashboardJSON answers GET /api/v1/dashboard: one snapshot, built now.
func (a *httpAPI) dashboardJSON(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, a.s.dash.build())
}

// events streams snapshots as Server-Sent Events: "event: status" with a
// Dashboard as data, whenever a new one is built (at most every dashEvery,
// at least every dashRepeat), and a comment line when the stream is quiet.
// Each write has its own deadline; a stream whose write fails or times
// out ends. The stream ends when the client goes, the server shuts down
// or the supervisor stops.
func (a *httpAPI) events(w http.ResponseWriter, r *http.Request) {
	hub := a.s.dash
	if !hub.join() {
		writeError(w, http.StatusServiceUnavailable, api.CodeBusy, fmt.Sprintf(
			"too many live dashboard streams: at most %d at once; close a dashboard tab or use GET /api/v1/dashboard", MaxDashboardStreams), nil)
		return
	}
	defer hub.leave()
	// Built now, so a new page does not wait for the next tick.
	hub.publish(hub.build())
	rc := http.NewResponseController(w)
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(parts ...[]byte) bool {
		if err := rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return false
		}
		for _, p := range parts {
			if _, err := w.Write(p); err != nil {
				return false
			}
		}
		return rc.Flush() == nil
	}
	// retry: how long EventSource waits before it reconnects.
	if !send([]byte("retry: 1000\n\n")) {
		return
	}
	heartbeat := time.NewTicker(heartbeatEvery)
	defer heartbeat.Stop()
	var sent uint64
	// A stream opened with a session ends with it (logout, expiry): it is
	// checked at every wake, at least once a second.
	var sess *session
	if p := principalOf(r); p != nil {
		sess = p.sess
	}
	for {
		if sess != nil && !sess.live(time.Now()) {
			return
		}
		b, seq, changed := hub.current()
		if seq != sent && b != nil {
			if !send([]byte("event: status\ndata: "), b, []byte("\n\n")) {
				return
			}
			sent = seq
			heartbeat.Reset(heartbeatEvery)
		}
		select {
		case <-changed:
		case <-heartbeat.C:
			if !send([]byte(": heartbeat\n\n")) {
				return
			}
		case <-r.Context().Done():
			return
		case <-hub.closed:
			return
		case <-a.closed:
			return
		}
	}
}
