package supervisor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/internal/promtext"
	"github.com/saga-supervisor/saga-supervisor/rollback"
)

// HTTP limits.
const (
	// MaxHTTPBody bounds a request body (halt's reason, reset's operator).
	MaxHTTPBody = 4 << 10
	// maxReasonBytes and maxOperatorBytes match the MQTT API's text limits.
	maxReasonBytes   = 256
	maxOperatorBytes = 64
)

// NewHTTPServer returns a server for HTTPHandler with timeouts that keep a
// slow or idle client from holding a connection (and a goroutine) forever.
// The write timeout leaves room for a status that reads back every actuator.
func NewHTTPServer(addr string, h http.Handler) *http.Server {
	srv := &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
	// Shutdown waits for handlers to return: the dashboard's streams
	// never would on their own.
	if sc, ok := h.(streamCloser); ok {
		srv.RegisterOnShutdown(sc.closeStreams)
	}
	return srv
}

// HTTPHandler serves the daemon's HTTP interface:
//
//	GET  /               the live dashboard (web/, embedded; dashboard.go),
//	                     with /dashboard.js and /dashboard.css
//	GET  /api/v1/events  the dashboard's snapshots, as Server-Sent Events
//	GET  /api/v1/dashboard  one snapshot, as JSON
//	GET  /healthz        200 "ok" while the process serves (liveness)
//	GET  /readyz         200 "ready", or 503 with the reasons, one per line
//	GET  /metrics        Prometheus metrics (Registry)
//	GET  /api/v1/status  the Status, as JSON
//	POST /api/v1/halt    latch the halt; anyone may: body {"reason": "..."}, optional
//	POST /api/v1/reset   clear it: Authorization: Bearer <operator token>;
//	                     body {"operator": "..."}, optional
//	POST /api/v1/drain, /api/v1/undrain, /api/v1/quarantine, /api/v1/release
//	                     the operator's drain and quarantine (httpoperator.go),
//	                     authorized as reset is
//
// The POSTs need Content-Type: application/json or X-Saga-Request: 1,
// neither of which a cross-site HTML form can send (checkAPIRequest): any
// other request is refused 415 and does nothing. Failed resets are rate
// limited (resetLimiter): 429 with Retry-After.
//
// Errors are JSON {"ok":false,"code":"...","message":"..."} with the stable
// codes of the MQTT API. Any method but the route's is 405, a body over
// MaxHTTPBody is 413.
//
// The handler checks neither Host nor Origin: a listener serves it behind
// GuardHTTP, as the daemon does.
func (s *Supervisor) HTTPHandler() http.Handler {
	h := &httpAPI{s: s, limit: s.resetLimit, closed: make(chan struct{})}
	mux := http.NewServeMux()
	// Each route is registered with its method and without: the second,
	// less specific pattern catches every other method, so a 405 is JSON
	// like every other error (the mux's own 405 is plain text).
	route := func(method, path string, fn http.Handler) {
		mux.Handle(method+" "+path, fn)
		mux.HandleFunc(path, methodNotAllowed(method))
	}
	route(http.MethodGet, "/{$}", h.page("index.html"))
	route(http.MethodGet, "/dashboard.js", h.page("dashboard.js"))
	route(http.MethodGet, "/dashboard.css", h.page("dashboard.css"))
	route(http.MethodGet, "/api/v1/events", http.HandlerFunc(h.events))
	route(http.MethodGet, "/api/v1/dashboard", http.HandlerFunc(h.dashboardJSON))
	route(http.MethodGet, "/healthz", http.HandlerFunc(h.healthz))
	route(http.MethodGet, "/readyz", http.HandlerFunc(h.readyz))
	route(http.MethodGet, "/metrics", s.metrics.reg.Handler(promtext.HandlerOpts{
		Log: s.log,
		// A Pi has little to spare: scrapes queue rather than pile up.
		MaxInFlight: 2,
		Timeout:     10 * time.Second,
	}))
	route(http.MethodGet, "/api/v1/status", http.HandlerFunc(h.status))
	route(http.MethodGet, "/api/v1/guarantees", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, rollback.Promises())
	}))
	route(http.MethodPost, "/api/v1/halt", http.HandlerFunc(h.halt))
	route(http.MethodPost, "/api/v1/reset", http.HandlerFunc(h.reset))
	route(http.MethodPost, "/api/v1/drain", http.HandlerFunc(h.drain))
	route(http.MethodPost, "/api/v1/undrain", http.HandlerFunc(h.undrain))
	route(http.MethodPost, "/api/v1/quarantine", http.HandlerFunc(h.quarantine))
	route(http.MethodPost, "/api/v1/release", http.HandlerFunc(h.release))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, api.CodeBadRequest, "no endpoint "+r.URL.Path, nil)
	})
	return &apiHandler{mux: mux, api: h}
}

// apiHandler is HTTPHandler's handler: the routes, and a way for the
// server's Shutdown to end the dashboard streams it serves.
type apiHandler struct {
	mux  *http.ServeMux
	api  *httpAPI
	once sync.Once
}

func (a *apiHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Status changes from one request to the next: nothing is cached.
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	a.mux.ServeHTTP(w, r)
}

// closeStreams ends the dashboard streams this handler serves.
func (a *apiHandler) closeStreams() { a.once.Do(func() { close(a.api.closed) }) }

type httpAPI struct {
	s     *Supervisor
	limit *resetLimiter
	// closed ends this handler's dashboard streams (server shutdown).
	closed chan struct{}
}

// APIRequestHeader, set to "1", marks a POST as made by a program, like
// Content-Type: application/json does.
const APIRequestHeader = "X-Saga-Request"

// checkAPIRequest refuses a POST that a web page on another site could
// make a visitor's browser send: an HTML form can only send
// application/x-www-form-urlencoded, multipart/form-data or text/plain, and
// a script can send neither Content-Type: application/json nor a custom
// header to another origin without a CORS preflight, which this server
// never grants. It reads headers only, so halt can check it before it
// latches without waiting on the body.
func checkAPIRequest(r *http.Request) *api.Error {
	if v := r.Header.Values(APIRequestHeader); len(v) == 1 && v[0] == "1" {
		return nil
	}
	ct := r.Header.Values("Content-Type")
	if len(ct) == 1 {
		if mt, _, err := mime.ParseMediaType(ct[0]); err == nil && mt == "application/json" {
			return nil
		}
	}
	got := "none"
	if len(ct) > 0 {
		got = fmt.Sprintf("%.80q", strings.Join(ct, ", "))
	}
	return &api.Error{Code: api.CodeBadRequest, Message: fmt.Sprintf(
		"the request needs Content-Type: application/json or %s: 1 (content type %s): nothing was done", APIRequestHeader, got)}
}

func (h *httpAPI) healthz(w http.ResponseWriter, _ *http.Request) {
	writeText(w, http.StatusOK, "ok\n")
}

// readyz answers from the cached readiness (refreshed every PollEvery and
// after each halt and reset), so a probe never waits on a driver.
func (h *httpAPI) readyz(w http.ResponseWriter, r *http.Request) {
	ready, reasons := h.s.readiness()
	if ready {
		writeText(w, http.StatusOK, "ready\n")
		return
	}
	if p := principalOf(r); len(reasons) == 0 || p != nil && p.role == "" {
		// Before a login (http.login), the probe's answer only: the
		// reasons name actuators, supplies and a halt's reason.
		reasons = []string{"not ready"} // fail closed even if no reason was given
	}
	writeText(w, http.StatusServiceUnavailable, strings.Join(reasons, "\n")+"\n")
}

func (h *httpAPI) status(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, h.s.Status())
}

// haltJSON answers halt and reset: the halt latch and readiness after it.
type haltJSON struct {
	OK         bool     `json:"ok"`
	Halted     bool     `json:"halted"`
	HaltReason string   `json:"halt_reason,omitempty"`
	Ready      bool     `json:"ready"`
	Reasons    []string `json:"reasons"`
	// Warning says what in the request was ignored (halt still halts).
	Warning string `json:"warning,omitempty"`
	// HaltedZones names the zones whose halt is latched.
	HaltedZones []string `json:"halted_zones,omitempty"`
}

func (h *httpAPI) latch(warning string) haltJSON {
	halted, why := h.s.engine.Halted()
	ready, reasons := h.s.readiness()
	if reasons == nil {
		reasons = []string{}
	}
	var zones []string
	for _, z := range h.s.engine.Zones() {
		if z.Halted {
			zones = append(zones, z.Name)
		}
	}
	return haltJSON{OK: true, Halted: halted, HaltReason: why, Ready: ready, Reasons: reasons, Warning: warning, HaltedZones: zones}
}

// halt latches the halt. Anyone may halt, and a request is never refused
// for its body: a reason that is too long, malformed or not JSON is
// dropped (the reply says so in warning) and the halt happens anyway. The
// body is read first, bounded by MaxHTTPBody and the server's read
// timeout, so that the reason reaches the journal's HALT record.
func (h *httpAPI) halt(w http.ResponseWriter, r *http.Request) {
	// A cross-site form post must not halt the robot: refused on its
	// headers alone, before anything else (nothing is read or written).
	if err := checkAPIRequest(r); err != nil {
		h.s.metrics.command(string(api.OpHalt), false, err.Code)
		writeError(w, http.StatusUnsupportedMediaType, err.Code, err.Message, nil)
		return
	}
	// Latched before the body is read: a halt never waits on the network.
	// A reason in the body follows as a second HALT record. A zone halt
	// names its zone in the URL (?zone=arm) for the same reason: a zone in
	// the body would come too late, after the full halt latched.
	src := "http " + clientHost(r)
	if p := principalOf(r); p != nil && p.role != "" {
		src += " " + string(p.role) // who, on a listener with a login
	}
	if zone, ok := haltZone(r); ok {
		h.haltZone(w, r, src, zone)
		return
	}
	h.s.Halt(src, "")
	var body struct {
		Reason string `json:"reason"`
	}
	warning := ""
	if _, err := readBody(w, r, &body); err != nil {
		warning = "reason ignored: " + err.Message
		body.Reason = ""
	} else if why := api.CheckText(body.Reason, maxReasonBytes); why != "" {
		warning = "reason ignored: it " + why
		body.Reason = ""
	}
	if body.Reason != "" {
		h.s.Halt(src, body.Reason)
	}
	h.s.metrics.command(string(api.OpHalt), true, "")
	writeJSON(w, http.StatusOK, h.latch(warning))
}

// haltZone reports the zone a halt names (?zone=), if it names one.
func haltZone(r *http.Request) (string, bool) {
	q := r.URL.Query()
	if !q.Has("zone") {
		return "", false
	}
	return q.Get("zone"), true
}

// haltZone latches the zone's halt (or, for a zone that does not exist,
// the full halt: UNKNOWN_ZONE, 404), then reads the body's reason.
func (h *httpAPI) haltZone(w http.ResponseWriter, r *http.Request, src, zone string) {
	if herr := h.s.HaltZone(zone, src, ""); herr != nil {
		h.s.metrics.command(string(api.OpHalt), false, herr.Code)
		writeError(w, http.StatusNotFound, herr.Code, herr.Message, nil)
		return
	}
	var body struct {
		Reason string `json:"reason"`
	}
	warning := ""
	if _, err := readBody(w, r, &body); err != nil {
		warning = "reason ignored: " + err.Message
		body.Reason = ""
	} else if why := api.CheckText(body.Reason, maxReasonBytes); why != "" {
		warning = "reason ignored: it " + why
		body.Reason = ""
	}
	if body.Reason != "" {
		h.s.HaltZone(zone, src, body.Reason)
	}
	h.s.metrics.command(string(api.OpHalt), true, "")
	writeJSON(w, http.StatusOK, h.latch(warning))
}

// checkZoneField checks a reset body's zone ("" = the full halt's reset).
func checkZoneField(zone string) *api.Error {
	if zone == "" {
		return nil
	}
	if err := api.ValidName(zone); err != nil {
		return &api.Error{Code: api.CodeBadRequest, Field: "zone", Message: "field \"zone\": " + err.Error()}
	}
	return nil
}

// reset clears the halt with the operator token, which comes only in the
// Authorization header: a URL ends up in logs, proxies and browser history.
// Failed attempts are rate limited per client host and in total
// (resetLimiter).
func (h *httpAPI) reset(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Operator string `json:"operator"`
		Zone     string `json:"zone"` // a zone's reset; "" = the full halt's
	}
	if err := checkAPIRequest(r); err != nil {
		h.refuseReset(w, http.StatusUnsupportedMediaType, err)
		return
	}
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && !isLoopback(la) && r.TLS == nil {
		// Plain HTTP on an address other machines reach: the token would
		// cross the network in clear, for anyone on the path to read.
		// Over TLS it does not.
		h.refuseReset(w, http.StatusForbidden, &api.Error{Code: api.CodeForbidden,
			Message: "reset refused: over plain HTTP the token is taken only on a loopback address (this machine: saga-supervisor ctl reset)"})
		return
	}
	if p := principalOf(r); p != nil {
		h.resetLoggedIn(w, r, p)
		return
	}
	host := clientHost(r)
	at, ok, retry := h.limit.begin(host)
	if !ok {
		secs := int64((retry + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
		h.refuseReset(w, http.StatusTooManyRequests, &api.Error{Code: api.CodeTooManyAttempts, Message: fmt.Sprintf(
			"reset refused: too many failed resets (at most %d a minute from one host, %d from all): retry in %d s",
			ResetFailsPerHost, ResetFailsTotal, max(secs, 1))})
		return
	}
	// Counted as a failure until it is known to be none.
	failed := false
	defer func() {
		if !failed {
			h.limit.refund(host, at)
		}
	}()
	if r.URL.RawQuery != "" {
		h.refuseReset(w, http.StatusBadRequest, &api.Error{Code: api.CodeBadRequest,
			Message: "reset takes no query parameters: send the token as Authorization: Bearer <token>"})
		return
	}
	if status, err := readBody(w, r, &body); err != nil {
		h.refuseReset(w, status, err)
		return
	}
	if why := api.CheckText(body.Operator, maxOperatorBytes); why != "" {
		h.refuseReset(w, http.StatusBadRequest, &api.Error{Code: api.CodeBadRequest, Field: "operator", Message: "field \"operator\" " + why})
		return
	}
	if err := checkZoneField(body.Zone); err != nil {
		h.refuseReset(w, http.StatusBadRequest, err)
		return
	}
	by := "http " + host
	if body.Operator != "" {
		by += " operator " + body.Operator
	}
	token, _ := bearerToken(r) // "" when malformed: it matches no token
	var err error
	if body.Zone != "" {
		err = h.s.ResetZone(token, by, body.Zone)
	} else {
		err = h.s.Reset(token, by)
	}
	switch {
	case err == nil:
		h.s.metrics.command(string(api.OpReset), true, "")
		writeJSON(w, http.StatusOK, h.latch(""))
	case errors.Is(err, ErrNoOperatorToken):
		// Not a failed attempt (the deferred refund takes it back): with
		// no token configured there is nothing to guess.
		h.refuseReset(w, http.StatusForbidden, err)
	case errors.Is(err, ErrUnauthorized):
		failed = true
		w.Header().Set("WWW-Authenticate", `Bearer realm="saga-supervisor"`)
		h.refuseReset(w, http.StatusUnauthorized, &api.Error{Code: api.CodeUnauthorized, Message: err.Error()})
	case rollback.CodeOf(err) == rollback.CodeUnknownZone:
		h.refuseReset(w, http.StatusNotFound, err)
	default:
		status := http.StatusConflict // not ready, or a failed journal: the state forbids it
		if rep := api.ErrorReply("", err); rep.Code == api.CodeInternal {
			status = http.StatusInternalServerError
		}
		h.refuseReset(w, status, err)
	}
}

// resetLoggedIn is a reset on a listener with a login, which has already
// checked the token (a bearer) or the session and found the role: the
// operator resets, the viewer is refused FORBIDDEN. The failed attempts'
// limit was applied to the token by the login; a session is no guess.
func (h *httpAPI) resetLoggedIn(w http.ResponseWriter, r *http.Request, p *principal) {
	if p.role != RoleOperator {
		h.s.metrics.authRefused.WithLabelValues(authViewerReset).Inc()
		h.refuseReset(w, http.StatusForbidden, &api.Error{Code: api.CodeForbidden, Message: fmt.Sprintf(
			"reset refused: the %s role may read and halt, never reset: log in with the operator token (nothing was done)", p.role)})
		return
	}
	if r.URL.RawQuery != "" {
		h.refuseReset(w, http.StatusBadRequest, &api.Error{Code: api.CodeBadRequest,
			Message: "reset takes no query parameters: send the token as Authorization: Bearer <token>"})
		return
	}
	var body struct {
		Operator string `json:"operator"`
		Zone     string `json:"zone"`
	}
	if status, err := readBody(w, r, &body); err != nil {
		h.refuseReset(w, status, err)
		return
	}
	if why := api.CheckText(body.Operator, maxOperatorBytes); why != "" {
		h.refuseReset(w, http.StatusBadRequest, &api.Error{Code: api.CodeBadRequest, Field: "operator", Message: "field \"operator\" " + why})
		return
	}
	if err := checkZoneField(body.Zone); err != nil {
		h.refuseReset(w, http.StatusBadRequest, err)
		return
	}
	by := "http " + clientHost(r) + " " + string(p.role) + " " + p.via()
	if body.Operator != "" {
		by += " operator " + body.Operator
	}
	reset := h.s.resetAuthorized
	if body.Zone != "" {
		reset = func(by string) error { return h.s.resetZoneAuthorized(by, body.Zone) }
	}
	if err := reset(by); err != nil {
		status := http.StatusConflict // not ready, or a failed journal: the state forbids it
		switch rep := api.ErrorReply("", err); {
		case errors.Is(err, ErrNoOperatorToken):
			status = http.StatusForbidden
		case rep.Code == string(rollback.CodeUnknownZone):
			status = http.StatusNotFound
		case rep.Code == api.CodeInternal:
			status = http.StatusInternalServerError
		}
		h.refuseReset(w, status, err)
		return
	}
	h.s.metrics.command(string(api.OpReset), true, "")
	writeJSON(w, http.StatusOK, h.latch(""))
}

// refuseReset journals and counts a refused reset, as Handle does for one
// over MQTT, and answers it; a 409 lists the readiness reasons.
func (h *httpAPI) refuseReset(w http.ResponseWriter, status int, err error) {
	rep := api.ErrorReply("", err)
	h.s.engine.RecordRefusal(0, rollback.Owner{Agent: "http"}, rollback.Command{}, rollback.Code(rep.Code), "reset: "+rep.Message)
	h.s.metrics.command(string(api.OpReset), false, rep.Code)
	var reasons []string
	if status == http.StatusConflict {
		_, reasons = h.s.readiness()
	}
	writeError(w, status, rep.Code, rep.Message, reasons)
}

// readBody decodes an optional JSON object of at most MaxHTTPBody bytes
// into v, strictly: no unknown fields, nothing after the object. An empty
// body leaves v as it is. It returns the HTTP status of a refusal.
func readBody(w http.ResponseWriter, r *http.Request, v any) (int, *api.Error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxHTTPBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return http.StatusRequestEntityTooLarge, &api.Error{Code: api.CodePayloadTooLarge,
				Message: fmt.Sprintf("the body is over %d bytes", MaxHTTPBody)}
		}
		return http.StatusBadRequest, &api.Error{Code: api.CodeBadRequest, Message: "reading the body: " + err.Error()}
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return 0, nil
	}
	if b[0] != '{' {
		return http.StatusBadRequest, &api.Error{Code: api.CodeBadRequest, Message: "the body is not a JSON object"}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return http.StatusBadRequest, &api.Error{Code: api.CodeBadRequest, Message: "the body is not valid: " + err.Error()}
	}
	if _, err := dec.Token(); err != io.EOF {
		return http.StatusBadRequest, &api.Error{Code: api.CodeBadRequest, Message: "the body has data after the JSON object"}
	}
	return 0, nil
}

// bearerToken returns the token of the one Authorization header, which
// must be exactly "Bearer " and the token: another scheme or spelling of
// it, a second space, trailing blanks or parameters, or a second header
// are refused (ok false), not guessed at.
func bearerToken(r *http.Request) (token string, ok bool) {
	v := r.Header.Values("Authorization")
	if len(v) != 1 {
		return "", false
	}
	token, ok = strings.CutPrefix(v[0], "Bearer ")
	if !ok || token == "" || strings.IndexFunc(token, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return "", false
	}
	return token, true
}

// clientHost is the peer's address without its port, for the journal.
// isLoopback reports whether a connection's local address is a loopback
// one, which only this machine can reach.
func isLoopback(a net.Addr) bool {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.IsLoopback()
	}
	return a.Network() == "unix"
}

func clientHost(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

func methodNotAllowed(allowed string) http.HandlerFunc {
	allow := allowed
	if allowed == http.MethodGet {
		allow += ", " + http.MethodHead
	}
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, api.CodeBadRequest,
			fmt.Sprintf("%s %s: method not allowed, use %s", r.Method, r.URL.Path, allowed), nil)
	}
}

// errorJSON is an error reply: the MQTT API's refusal fields, and the
// readiness reasons when the refusal is about them.
type errorJSON struct {
	OK      bool     `json:"ok"`
	Code    string   `json:"code"`
	Message string   `json:"message"`
	Reasons []string `json:"reasons,omitempty"`
}

func writeError(w http.ResponseWriter, status int, code, msg string, reasons []string) {
	writeJSON(w, status, errorJSON{Code: code, Message: msg, Reasons: reasons})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"ok":false,"code":"INTERNAL","message":"internal error: encoding the reply failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

func writeText(w http.ResponseWriter, status int, s string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	io.WriteString(w, s)
}
