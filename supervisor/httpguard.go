package supervisor

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// The HTTP listener's guard keeps a web page on another site from using a
// browser that can reach the listener — on the robot, or on a laptop
// holding an SSH tunnel to it — against the supervisor:
//
//   - DNS rebinding: the page points its own name at 127.0.0.1 and becomes
//     same-origin with the supervisor. Its requests then carry its own name
//     in Host, which the guard refuses on every path: the page reads no
//     status, event or metric, and halts and resets nothing.
//   - Cross-site requests: a page of another origin posts to the
//     supervisor's own address. Its browser sends its Origin, which the
//     guard refuses on every request that may change state.
//
// Both checks read headers only, before the API sees the request.

// Reasons of saga_http_refused_total.
const (
	guardHost   = "host"   // the Host header names none of the supervisor's addresses
	guardOrigin = "origin" // a state-changing request with a foreign Origin
)

var guardReasons = []string{guardHost, guardOrigin}

// httpAgent is the agent of the journal's records of HTTP refusals.
const httpAgent = "http"

// HTTPGuard says which names the HTTP listener answers to (GuardHTTP).
type HTTPGuard struct {
	// Listen is the configured listen address, host:port (http.listen).
	Listen string
	// Bound is the address the listener got: its port is the listener's
	// (Listen's, or the one the system chose for port 0).
	Bound string
	// AllowedHosts are further names (http.allowed_hosts, in the forms of
	// config.NormalizeHost): a name alone is allowed on any port,
	// name:port on that port only.
	AllowedHosts []string
	// Login, if set, stands behind the Host and Origin checks: the login
	// page and its session, and who may do what (httplogin.go). Nil: no
	// login, as before.
	Login *HTTPLogin
}

// hostPort is a host and port as config.NormalizeHost spells them; port
// "" is a Host without one.
type hostPort struct{ host, port string }

type httpGuard struct {
	s    *Supervisor
	next http.Handler
	port string            // the listener's
	own  map[hostPort]bool // exact host and port
	any  map[string]bool   // hosts allowed on every port
	hsts bool              // Strict-Transport-Security on TLS replies
}

// GuardHTTP returns next behind the listener's guard:
//
//   - Host: a request whose Host header is not one of the listener's own
//     addresses (g.Listen, g.Bound), localhost, 127.0.0.1 or [::1] — with
//     the listener's port or none — or one of g.AllowedHosts is refused
//     421 HOST_NOT_ALLOWED, on every path. So is a request without a Host
//     (HTTP/1.0): nothing says which site it was meant for. Names compare
//     as config.NormalizeHost spells them: in any case, with or without
//     the trailing dot.
//   - Origin: a request of any method but GET and HEAD (POST, OPTIONS —
//     a CORS preflight —, anything else) is refused 403 ORIGIN_NOT_ALLOWED
//     if it carries an Origin header (one; two are refused) that is not
//     http:// or https:// followed by a host and port the Host rule
//     allows — null included. Programs (ctl, curl) send none and pass.
//
// Each refusal is counted in saga_http_refused_total by reason; a refused
// halt or reset is also a refused command in saga_commands_total and
// saga_refusals_total, and is journaled as a REFUSED record of agent
// "http" whose message names its source (remote address, Host, Origin),
// one record each within the journal's refusal budget and in aggregate
// beyond it, as gate refusals are.
//
// The checks compare headers and nothing else: a halt that passes them
// latches as soon as before, and a refused one waits on nothing either
// (its record is enqueued for the journal, not synced). No reply of the
// guard or the API grants CORS. The guard forwards the server's shutdown
// to next's streams (NewHTTPServer).
func (s *Supervisor) GuardHTTP(next http.Handler, g HTTPGuard) (http.Handler, error) {
	_, port, err := net.SplitHostPort(g.Bound)
	if err != nil || port == "" || port == "0" {
		return nil, fmt.Errorf("http guard: the listener's address %q has no port", g.Bound)
	}
	gd := &httpGuard{s: s, next: next, port: port, own: map[hostPort]bool{}, any: map[string]bool{}}
	for _, h := range []string{"localhost", "127.0.0.1", "[::1]"} {
		gd.own[hostPort{h, port}] = true
		gd.own[hostPort{h, ""}] = true
	}
	for _, a := range []string{g.Listen, g.Bound} {
		h, _, err := net.SplitHostPort(a)
		if err != nil || h == "" {
			continue // no host of its own (":8080"): every interface
		}
		if strings.Contains(h, ":") {
			h = "[" + h + "]"
		}
		// An address no Host can spell (an IPv6 zone) is no name to allow.
		if host, _, err := config.NormalizeHost(h); err == nil {
			gd.own[hostPort{host, port}] = true
			if port == "80" { // a browser leaves the default port out
				gd.own[hostPort{host, ""}] = true
			}
		}
	}
	for _, e := range g.AllowedHosts {
		host, p, err := config.NormalizeHost(e)
		if err != nil {
			return nil, fmt.Errorf("http.allowed_hosts: %w", err)
		}
		if p == "" {
			gd.any[host] = true
		} else {
			gd.own[hostPort{host, p}] = true
		}
	}
	if g.Login != nil {
		gd.next = newLoginGate(gd, next, *g.Login)
		gd.hsts = g.Login.HSTS
	}
	return gd, nil
}

// allowed reports whether host[:port], as a Host header or an Origin's
// host writes it, is one the supervisor answers to.
func (g *httpGuard) allowed(hostport string) bool {
	host, port, err := config.NormalizeHost(hostport)
	return err == nil && (g.own[hostPort{host, port}] || g.any[host])
}

func (g *httpGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.hsts && r.TLS != nil {
		// A certificate browsers trust (http.tls.hsts): never plain
		// HTTP to this name again, for a year.
		w.Header().Set("Strict-Transport-Security", "max-age=31536000")
	}
	// r.Host is the Host header, or the host of an absolute request URI,
	// which takes precedence over it.
	if !g.allowed(r.Host) {
		msg := fmt.Sprintf("Host %.100q is not an address of this supervisor: ", r.Host)
		if r.Host == "" {
			msg = "the request has no Host header: "
		}
		g.refuse(w, r, guardHost, http.StatusMisdirectedRequest, api.CodeHostNotAllowed, msg+fmt.Sprintf(
			"it answers to its listen address, localhost, 127.0.0.1 and [::1] on port %s, and the names in http.allowed_hosts; "+
				"anything else could be a web page that pointed its own name at this address: nothing was done", g.port))
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if why := g.foreignOrigin(r); why != "" {
			g.refuse(w, r, guardOrigin, http.StatusForbidden, api.CodeOriginNotAllowed, why+
				": a page of another site may not change anything here, and nothing was done "+
				"(programs send no Origin; a browser must load the page from an address of this supervisor)")
			return
		}
	}
	g.next.ServeHTTP(w, r)
}

// foreignOrigin says what is wrong with the request's Origin, or "" when it
// has none or one of the supervisor's own.
func (g *httpGuard) foreignOrigin(r *http.Request) string {
	v := r.Header.Values("Origin")
	switch {
	case len(v) == 0:
		return ""
	case len(v) > 1:
		return "the request has more than one Origin header"
	case v[0] == "null":
		return "Origin null (a sandboxed page, a local file, or a redirect from another site) is not this supervisor's"
	}
	scheme, hostport, ok := strings.Cut(v[0], "://")
	if ok && (scheme == "http" || scheme == "https") && g.allowed(hostport) {
		return ""
	}
	return fmt.Sprintf("Origin %.100q is not an address of this supervisor", v[0])
}

// refuse answers a refused request and counts it; a refused halt or reset
// is counted as a refused command and journaled, with its source.
func (g *httpGuard) refuse(w http.ResponseWriter, r *http.Request, reason string, status int, code, msg string) {
	g.s.metrics.httpRefused.WithLabelValues(reason).Inc()
	if op := guardedOp(r); op != "" {
		g.s.metrics.command(string(op), false, code)
		origin := "none"
		if v := r.Header.Values("Origin"); len(v) > 0 {
			origin = fmt.Sprintf("%.100q", strings.Join(v, ", "))
		}
		g.s.journalHTTPRefusal(op, code, fmt.Sprintf("%s: refused from %s (Host %.100q, Origin %s): %s",
			op, r.RemoteAddr, r.Host, origin, msg))
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	writeError(w, status, code, msg, nil)
}

// guardedOp is the op of a request that would halt, reset, or drain or
// quarantine (the operator's other ops), or "".
func guardedOp(r *http.Request) api.Op {
	if r.Method != http.MethodPost {
		return ""
	}
	switch r.URL.Path {
	case "/api/v1/halt":
		return api.OpHalt
	case "/api/v1/reset":
		return api.OpReset
	case "/api/v1/drain":
		return api.OpDrain
	case "/api/v1/undrain":
		return api.OpUndrain
	case "/api/v1/quarantine":
		return api.OpQuarantine
	case "/api/v1/release":
		return api.OpRelease
	}
	return ""
}

// journalHTTPRefusal journals a refused HTTP halt or reset as a REFUSED
// record of agent "http", within the refusal budget gate refusals have
// (refusals.go): past it, the lanes' tally journals them in aggregate, so
// a page that keeps trying cannot fill the disk. Only enqueued: nothing
// here waits on the journal.
//
// While Open recovers (the start-up handler serves) the journal is
// recovery's: the refusal is logged, not journaled.
func (s *Supervisor) journalHTTPRefusal(op api.Op, code, msg string) {
	if !s.opened.Load() {
		s.log.Warn("http: refused while recovering the journal (logged, not journaled)", "op", op, "code", code, "msg", msg)
		return
	}
	if !s.refusals.allow(httpAgent) {
		s.lanes.CountJournalOnly(httpAgent, op, code)
		return
	}
	s.engine.RecordRefusal(0, rollback.Owner{Agent: httpAgent}, rollback.Command{}, rollback.Code(code), msg)
}

// closeStreams ends the streams of the handler behind the guard, when the
// server shuts down.
func (g *httpGuard) closeStreams() {
	if c, ok := g.next.(streamCloser); ok {
		c.closeStreams()
	}
}

// streamCloser is a handler whose long-lived streams the server's
// Shutdown must end (apiHandler, and a guard in front of it).
type streamCloser interface{ closeStreams() }

// closeStreams ends the streams of the handler behind the login.
func (l *loginGate) closeStreams() {
	if c, ok := l.next.(streamCloser); ok {
		c.closeStreams()
	}
}
