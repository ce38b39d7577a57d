package supervisor

import (
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/saga-supervisor/saga-supervisor/api"
)

// StartingReason is the not-ready reason while Open recovers the journal.
const StartingReason = "starting: recovering the journal"

// SetStarting sets the not-ready reason the start-up handler gives while
// Open runs ("" : StartingReason): the daemon names the serial boards it
// waits for before recovery, so that an operator looking at /readyz sees
// what the start waits on.
func (s *Supervisor) SetStarting(reason string) {
	if reason == "" {
		reason = StartingReason
	}
	s.starting.Store(&reason)
}

// startingReason is the reason SetStarting last set.
func (s *Supervisor) startingReason() string {
	if p := s.starting.Load(); p != nil {
		return *p
	}
	return StartingReason
}

// StartupHTTPHandler serves what a supervisor from Prepare can answer while
// Open recovers the journal (recovery reads back every actuator first, up
// to seconds with a board missing):
//
//	GET  /healthz        200 "ok"
//	GET  /readyz         503 "starting: recovering the journal", or what
//	                     SetStarting said the start waits on (and the
//	                     halt, if one is latched)
//	GET  /api/v1/status  503 with the Status: not ready for that reason, and
//	                     the halt known so far (a halt the journal ends
//	                     with shows only once recovered: hence 503, not a
//	                     status to take as whole)
//	POST /api/v1/halt    latch the halt (HaltLine.Trigger): kept until
//	                     recovery's engine exists, latched on it from then
//	                     on; Recover checks that latch before every drive,
//	                     and the halt is journaled as any other HALT
//
// Anything else is 503 NOT_READY with nothing done. Serve it behind
// GuardHTTP as HTTPHandler is, through a HandOff that switches to
// HTTPHandler once Open has returned.
func (s *Supervisor) StartupHTTPHandler() http.Handler {
	h := &startupAPI{s: s}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { writeText(w, http.StatusOK, "ok\n") })
	mux.HandleFunc("GET /readyz", h.readyz)
	mux.HandleFunc("GET /api/v1/status", h.status)
	mux.HandleFunc("POST /api/v1/halt", h.halt)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusServiceUnavailable, api.CodeNotReady, s.startingReason()+
			": until it is done only /readyz, /api/v1/status and POST /api/v1/halt answer; nothing was done", nil)
	})
	return &startupHandler{mux: mux}
}

type startupHandler struct{ mux *http.ServeMux }

func (h *startupHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	h.mux.ServeHTTP(w, r)
}

type startupAPI struct{ s *Supervisor }

// reasons are the start-up's not-ready reasons: what the start waits on
// (SetStarting), and a halt.
func (h *startupAPI) reasons() (halted bool, why string, reasons []string) {
	halted, why = h.s.opt.HaltLine.Latched()
	reasons = []string{h.s.startingReason()}
	if halted {
		reasons = append(reasons, "halted: "+why)
	}
	return halted, why, reasons
}

func (h *startupAPI) readyz(w http.ResponseWriter, r *http.Request) {
	_, _, reasons := h.reasons()
	if p := principalOf(r); p != nil && p.role == "" {
		// Before a login, no halt reason (as HTTPHandler's readyz).
		reasons = reasons[:1]
	}
	writeText(w, http.StatusServiceUnavailable, strings.Join(reasons, "\n")+"\n")
}

func (h *startupAPI) status(w http.ResponseWriter, _ *http.Request) {
	halted, why, reasons := h.reasons()
	writeJSON(w, http.StatusServiceUnavailable, api.Status{State: api.StateOnline, Reasons: reasons, Halted: halted, HaltReason: why})
}

// halt latches before it reads the body, as HTTPHandler's does; a zone's
// halt is the full halt here (no zone can be halted on its own before the
// engine serves).
func (h *startupAPI) halt(w http.ResponseWriter, r *http.Request) {
	if err := checkAPIRequest(r); err != nil {
		h.s.metrics.command(string(api.OpHalt), false, err.Code)
		writeError(w, http.StatusUnsupportedMediaType, err.Code, err.Message, nil)
		return
	}
	src := "http " + clientHost(r)
	if p := principalOf(r); p != nil && p.role != "" {
		src += " " + string(p.role)
	}
	line := h.s.opt.HaltLine
	line.Trigger(src, "")
	h.s.metrics.halts.Inc()
	var warning []string
	if _, ok := haltZone(r); ok {
		warning = append(warning, "a zone cannot be halted on its own while the journal is recovered: everything is halted")
	}
	var body struct {
		Reason string `json:"reason"`
	}
	if _, err := readBody(w, r, &body); err != nil {
		warning = append(warning, "reason ignored: "+err.Message)
		body.Reason = ""
	} else if why := api.CheckText(body.Reason, maxReasonBytes); why != "" {
		warning = append(warning, "reason ignored: it "+why)
		body.Reason = ""
	}
	if body.Reason != "" {
		line.Trigger(src, body.Reason)
	}
	h.s.metrics.command(string(api.OpHalt), true, "")
	halted, why, reasons := h.reasons()
	writeJSON(w, http.StatusOK, haltJSON{OK: true, Halted: halted, HaltReason: why, Reasons: reasons, Warning: strings.Join(warning, "; ")})
}

// HandOff serves one handler, then another from the moment Switch is
// called: the daemon serves StartupHTTPHandler behind its guard while
// the journal is recovered, then HTTPHandler behind the same guard (its
// logins and sessions carry over).
type HandOff struct{ cur atomic.Pointer[http.Handler] }

// NewHandOff serves first until Switch.
func NewHandOff(first http.Handler) *HandOff {
	h := &HandOff{}
	h.cur.Store(&first)
	return h
}

// Switch serves next from now on.
func (h *HandOff) Switch(next http.Handler) { h.cur.Store(&next) }

func (h *HandOff) ServeHTTP(w http.ResponseWriter, r *http.Request) { (*h.cur.Load()).ServeHTTP(w, r) }

// closeStreams ends the streams of the handler served now.
func (h *HandOff) closeStreams() {
	if c, ok := (*h.cur.Load()).(streamCloser); ok {
		c.closeStreams()
	}
}
