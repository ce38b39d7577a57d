package supervisor

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
)

// The listener's login (HTTPGuard.Login; http.login): on a listener other
// machines reach, every request but the login page's own, /healthz and
// /readyz must show who sends it — the session cookie a login set, or an
// Authorization: Bearer token — and what it may do follows from the token
// it logged in with:
//
//   - the operator token (http.reset_token_file): everything, reset
//     included;
//   - the viewer token (http.viewer_token_file): the status, the events,
//     the dashboard and the metrics, and halt — halting is the safe
//     direction and is never forbidden to anyone who may speak — but never
//     reset (403 FORBIDDEN).
//
// A session is a random 256-bit id (never the token) mapped, in memory, to
// its role and expiry; the cookie is HttpOnly, SameSite=Strict, Path=/ and,
// on TLS, Secure with the __Host- prefix. Logging out, the expiry, a
// restart of the daemon or the eviction of the oldest session of the role
// end it. Failed logins, and wrong bearer tokens on any path, count
// against the failed resets' limit (resetLimiter) — one limit for every
// guess at a token — and, past it, are refused 429, except a halt: a halt
// is never limited, so a wrong token on a halt is refused 401 and counted.
//
// Everything here reads headers and an in-memory map: a halt that passes
// waits on nothing more than before.

// Role is what a login may do over HTTP.
type Role string

const (
	// RoleOperator may do everything, reset included: the operator token.
	RoleOperator Role = "operator"
	// RoleViewer may read and halt, never reset: the viewer token.
	RoleViewer Role = "viewer"
)

// Names of the session cookie. On TLS the __Host- prefix makes a browser
// take it only from this origin over HTTPS, Secure, for Path=/ and no
// Domain, so no other site or plain-HTTP page can plant one.
const (
	SessionCookie       = "saga-session"
	SecureSessionCookie = "__Host-saga-session"
)

// Bounds of the login.
const (
	// DefaultSessionTTL is how long a session lasts when HTTPLogin says
	// nothing.
	DefaultSessionTTL = 12 * time.Hour
	// MaxSessionsPerRole bounds the sessions kept: a new login past it
	// ends the role's oldest, so viewers logging in again and again can
	// never end an operator's session, nor fill memory.
	MaxSessionsPerRole = 32
)

// HTTPLogin configures the listener's login (HTTPGuard.Login).
type HTTPLogin struct {
	// Required: every request but the open ones (GET /login, /login.js,
	// /dashboard.css, /healthz, /readyz, POST /login, /logout) needs a
	// session or a bearer token. False: none does (loopback, as before);
	// GET /api/v1/session then says so.
	Required bool
	// ViewerToken is the viewer role's token; "" none. The operator's is
	// the supervisor's (Options.ResetToken).
	ViewerToken string
	// SessionTTL is how long a session lasts (0: DefaultSessionTTL).
	SessionTTL time.Duration
	// Secure: the listener serves TLS. The cookie is then Secure and named
	// SecureSessionCookie.
	Secure bool
	// HSTS sends Strict-Transport-Security: max-age=31536000 on every
	// reply over TLS (http.tls.hsts).
	HSTS bool
}

// session is one login: its role and when it ends.
type session struct {
	role    Role
	expires time.Time
	ended   atomic.Bool // logged out, or evicted
}

// live reports whether the session may still be used at now.
func (s *session) live(now time.Time) bool { return !s.ended.Load() && now.Before(s.expires) }

// sessions are the live logins, by the SHA-256 of their id: a lookup
// compares digests, never the id an attacker guesses at, and a memory
// dump does not hold the ids.
type sessions struct {
	mu   sync.RWMutex
	byID map[[32]byte]*session
	ttl  time.Duration
	now  func() time.Time
}

func newSessions(ttl time.Duration) *sessions {
	if ttl <= 0 {
		ttl = DefaultSessionTTL
	}
	return &sessions{byID: map[[32]byte]*session{}, ttl: ttl, now: time.Now}
}

// create starts a session of role and returns its id: 32 bytes from the
// system's random source, URL-safe base64. Expired sessions are dropped
// first; past MaxSessionsPerRole the role's oldest is ended.
func (st *sessions) create(role Role) (string, *session, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", nil, err
	}
	id := base64.RawURLEncoding.EncodeToString(b[:])
	st.mu.Lock()
	defer st.mu.Unlock()
	now := st.now()
	var oldest [32]byte
	n := 0
	for k, s := range st.byID {
		if !s.live(now) {
			delete(st.byID, k)
			continue
		}
		if s.role == role {
			if n == 0 || s.expires.Before(st.byID[oldest].expires) {
				oldest = k
			}
			n++
		}
	}
	if n >= MaxSessionsPerRole {
		st.byID[oldest].ended.Store(true)
		delete(st.byID, oldest)
	}
	s := &session{role: role, expires: now.Add(st.ttl)}
	st.byID[sha256.Sum256([]byte(id))] = s
	return id, s, nil
}

// lookup returns the live session of id, or nil.
func (st *sessions) lookup(id string) *session {
	k := sha256.Sum256([]byte(id))
	st.mu.RLock()
	s := st.byID[k]
	st.mu.RUnlock()
	if s == nil || !s.live(st.now()) {
		return nil
	}
	return s
}

// end ends the session of id (logout), if there is one.
func (st *sessions) end(id string) {
	k := sha256.Sum256([]byte(id))
	st.mu.Lock()
	defer st.mu.Unlock()
	if s := st.byID[k]; s != nil {
		s.ended.Store(true)
		delete(st.byID, k)
	}
}

// count returns the live sessions, for saga_http_sessions.
func (st *sessions) count() int {
	st.mu.RLock()
	defer st.mu.RUnlock()
	now, n := st.now(), 0
	for _, s := range st.byID {
		if s.live(now) {
			n++
		}
	}
	return n
}

// principal is who a request on a login listener comes from: its role
// ("" before a login, on an open path) and, for a session cookie, the
// session, which a long-lived stream keeps checking.
type principal struct {
	role Role
	sess *session // nil for a bearer token
}

// via says how the principal showed itself, for the journal.
func (p *principal) via() string {
	if p.sess != nil {
		return "session"
	}
	return "bearer"
}

type principalKey struct{}

// principalOf returns who the login says sent r: nil on a listener
// without a login (loopback, as before), a principal with no role on an
// open path before a login.
func principalOf(r *http.Request) *principal {
	p, _ := r.Context().Value(principalKey{}).(*principal)
	return p
}

// Reasons of saga_http_auth_refused_total.
const (
	authLoginRequired = "login_required"    // no session or token (401 LOGIN_REQUIRED)
	authUnauthorized  = "unauthorized"      // a wrong token (401 UNAUTHORIZED)
	authTooMany       = "too_many_attempts" // past the failed attempts' limit (429)
	authViewerReset   = "viewer_reset"      // the viewer role tried to reset (403 FORBIDDEN)
)

var authReasons = []string{authLoginRequired, authUnauthorized, authTooMany, authViewerReset}

// loginGate stands behind the guard's Host and Origin checks and in
// front of the API: it serves the login's own endpoints and refuses what
// has no login.
type loginGate struct {
	g      *httpGuard
	s      *Supervisor
	next   http.Handler
	opt    HTTPLogin
	store  *sessions
	cookie string
	page   http.HandlerFunc // GET /login
	script http.HandlerFunc // GET /login.js
}

func newLoginGate(g *httpGuard, next http.Handler, opt HTTPLogin) *loginGate {
	l := &loginGate{g: g, s: g.s, next: next, opt: opt, store: newSessions(opt.SessionTTL), cookie: SessionCookie,
		page: servePage("login.html"), script: servePage("login.js")}
	if opt.Secure {
		l.cookie = SecureSessionCookie
	}
	g.s.metrics.sessions(l.store)
	return l
}

// open reports the requests a login listener serves without a login: the
// login page and what it loads, the login and logout themselves, and the
// probes. /healthz says only that the process answers; /readyz only
// whether it is ready — its reasons (names, a halt's reason) only to a
// login.
func open(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		switch r.URL.Path {
		case "/login", "/login.js", "/dashboard.css", "/healthz", "/readyz":
			return true
		}
	case http.MethodPost:
		return r.URL.Path == "/login" || r.URL.Path == "/logout"
	}
	return false
}

func (l *loginGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !l.opt.Required {
		if r.URL.Path == "/api/v1/session" {
			l.sessionInfo(w, r, nil)
			return
		}
		l.next.ServeHTTP(w, r)
		return
	}
	p := &principal{}
	if !open(r) {
		var ok bool
		if p, ok = l.authenticate(w, r); !ok {
			return
		}
	} else if ids := l.sessionIDs(r); len(ids) == 1 {
		// An open path needs nothing, and a cookie that ended is no
		// reason to refuse the login page; a live one shows /readyz's
		// reasons. Only POST /login looks at a bearer token there.
		if s := l.store.lookup(ids[0]); s != nil {
			p = &principal{role: s.role, sess: s}
		}
	}
	r = r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
	switch r.URL.Path {
	case "/login":
		if r.Method == http.MethodPost {
			l.login(w, r)
		} else if r.Method == http.MethodGet || r.Method == http.MethodHead {
			l.page(w, r)
		} else {
			methodNotAllowed(http.MethodPost)(w, r)
		}
		return
	case "/login.js":
		l.script(w, r)
		return
	case "/logout":
		if r.Method != http.MethodPost {
			methodNotAllowed(http.MethodPost)(w, r)
			return
		}
		l.logout(w, r)
		return
	case "/api/v1/session":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(http.MethodGet)(w, r)
			return
		}
		l.sessionInfo(w, r, p)
		return
	}
	l.next.ServeHTTP(w, r)
}

// sessionIDs are the values of the session cookies r carries.
func (l *loginGate) sessionIDs(r *http.Request) []string {
	var ids []string
	for _, c := range r.Cookies() {
		if c.Name == l.cookie {
			ids = append(ids, c.Value)
		}
	}
	return ids
}

// authenticate finds who sent r, or refuses it. An Authorization header,
// when there is one, decides alone (exactly "Bearer <token>": the operator
// or the viewer token); else one session cookie of a live session. A query
// string is never looked at: a token there is no credential.
func (l *loginGate) authenticate(w http.ResponseWriter, r *http.Request) (*principal, bool) {
	if len(r.Header.Values("Authorization")) > 0 {
		return l.bearer(w, r)
	}
	if ids := l.sessionIDs(r); len(ids) == 1 {
		if s := l.store.lookup(ids[0]); s != nil {
			return &principal{role: s.role, sess: s}, true
		}
	}
	if (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.URL.Path == "/" {
		// A browser opening the dashboard: to the login page.
		l.s.metrics.authRefused.WithLabelValues(authLoginRequired).Inc()
		w.Header().Set("Location", "/login")
		w.WriteHeader(http.StatusSeeOther)
		return nil, false
	}
	l.refuse(w, r, http.StatusUnauthorized, api.CodeLoginRequired, authLoginRequired,
		"this listener needs a login: no session cookie (or one that ended: logged out, expired, or the supervisor restarted) and no Authorization: Bearer token; "+
			"log in at /login with the operator or the viewer token, or send one as Authorization: Bearer <token> (never in the URL)")
	return nil, false
}

// bearer checks an Authorization header against the two tokens, under the
// failed attempts' limit — which a halt never waits for or is refused by.
func (l *loginGate) bearer(w http.ResponseWriter, r *http.Request) (*principal, bool) {
	host := clientHost(r)
	halt := guardedOp(r) == api.OpHalt
	var at time.Time
	if !halt {
		var ok bool
		var retry time.Duration
		if at, ok, retry = l.s.resetLimit.begin(host); !ok {
			l.tooMany(w, r, retry)
			return nil, false
		}
	}
	token, _ := bearerToken(r) // "" when malformed: it matches no token
	role := l.match(token)
	if role == "" {
		if halt {
			l.s.resetLimit.note(host)
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="saga-supervisor"`)
		l.refuse(w, r, http.StatusUnauthorized, api.CodeUnauthorized, authUnauthorized,
			"the token is wrong: Authorization must be exactly \"Bearer <token>\", the operator or the viewer token; nothing was done")
		return nil, false
	}
	if !halt {
		l.s.resetLimit.refund(host, at)
	}
	return &principal{role: role}, true
}

// match returns the role of token, or "": both comparisons are made, in
// constant time (TokenMatches), whichever matches.
func (l *loginGate) match(token string) Role {
	op := TokenMatches(token, l.s.opt.ResetToken)
	vw := TokenMatches(token, l.opt.ViewerToken)
	switch {
	case op:
		return RoleOperator
	case vw:
		return RoleViewer
	}
	return ""
}

// tooMany refuses a request while failed attempts are over the limit.
func (l *loginGate) tooMany(w http.ResponseWriter, r *http.Request, retry time.Duration) {
	secs := max(int64((retry+time.Second-1)/time.Second), 1)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	l.refuse(w, r, http.StatusTooManyRequests, api.CodeTooManyAttempts, authTooMany, fmt.Sprintf(
		"too many failed logins or tokens (at most %d a minute from one host, %d from all): every token is refused for %d s, the right one included",
		ResetFailsPerHost, ResetFailsTotal, secs))
}

// refuse answers a request the login refused and counts it; a refused
// halt or reset is also a refused command, journaled with its source
// within the refusal budget, as the guard's refusals are.
func (l *loginGate) refuse(w http.ResponseWriter, r *http.Request, status int, code, reason, msg string) {
	l.s.metrics.authRefused.WithLabelValues(reason).Inc()
	if op := guardedOp(r); op != "" {
		l.s.metrics.command(string(op), false, code)
		l.s.journalHTTPRefusal(op, code, fmt.Sprintf("%s: refused from %s (Host %.100q): %s", op, r.RemoteAddr, r.Host, msg))
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	writeError(w, status, code, msg, nil)
}

// loginJSON answers a login, and GET /api/v1/session.
type loginJSON struct {
	OK bool `json:"ok"`
	// Login: this listener needs one (http.login).
	Login bool `json:"login"`
	// Role is "operator" or "viewer"; Via "session" or "bearer".
	Role      string     `json:"role,omitempty"`
	Via       string     `json:"via,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// login is POST /login: the token in Authorization: Bearer (never in the
// URL or the body), a JSON or X-Saga-Request post like every other. A
// right one gets a session cookie; a wrong one is a failed attempt.
func (l *loginGate) login(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if err := checkAPIRequest(r); err != nil {
		// What a cross-site form could send: no look at the token.
		writeError(w, http.StatusUnsupportedMediaType, err.Code, err.Message, nil)
		return
	}
	if r.URL.RawQuery != "" {
		// Not even read: a token in a URL ends up in logs and history.
		writeError(w, http.StatusBadRequest, api.CodeBadRequest,
			"the login takes no query parameters: send the token as Authorization: Bearer <token>", nil)
		return
	}
	host := clientHost(r)
	at, ok, retry := l.s.resetLimit.begin(host)
	if !ok {
		l.tooMany(w, r, retry)
		return
	}
	token, _ := bearerToken(r)
	role := l.match(token)
	if role == "" {
		l.s.log.Warn("http login refused: wrong token", "from", r.RemoteAddr)
		w.Header().Set("WWW-Authenticate", `Bearer realm="saga-supervisor"`)
		l.refuse(w, r, http.StatusUnauthorized, api.CodeUnauthorized, authUnauthorized,
			"login refused: the token is neither the operator's nor the viewer's (Authorization must be exactly \"Bearer <token>\")")
		return
	}
	l.s.resetLimit.refund(host, at)
	id, s, err := l.store.create(role)
	if err != nil {
		writeError(w, http.StatusInternalServerError, api.CodeInternal, "login: no session id: "+err.Error(), nil)
		return
	}
	http.SetCookie(w, l.sessionCookie(id, int(l.store.ttl/time.Second)))
	l.s.metrics.logins.WithLabelValues(string(role)).Inc()
	l.s.log.Info("http login", "role", role, "from", r.RemoteAddr, "expires", s.expires.Format(time.RFC3339))
	exp := s.expires.UTC()
	writeJSON(w, http.StatusOK, loginJSON{OK: true, Login: true, Role: string(role), Via: "session", ExpiresAt: &exp})
}

// logout is POST /logout: it ends the request's session, if any, and
// tells the browser to drop the cookie.
func (l *loginGate) logout(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if err := checkAPIRequest(r); err != nil {
		writeError(w, http.StatusUnsupportedMediaType, err.Code, err.Message, nil)
		return
	}
	for _, id := range l.sessionIDs(r) {
		l.store.end(id)
	}
	http.SetCookie(w, l.sessionCookie("", -1))
	writeJSON(w, http.StatusOK, loginJSON{OK: true, Login: true})
}

// sessionCookie is the cookie of session id, for maxAge seconds (-1:
// delete it). Every one it sets, a deletion included, is HttpOnly (no
// script reads it), SameSite=Strict (no other site's page sends it),
// Path=/ and, on TLS, Secure.
func (l *loginGate) sessionCookie(id string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: l.cookie, Value: id, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: l.opt.Secure, SameSite: http.SameSiteStrictMode}
}

// sessionInfo is GET /api/v1/session: whether this listener needs a login
// and, if so, who the request comes from.
func (l *loginGate) sessionInfo(w http.ResponseWriter, _ *http.Request, p *principal) {
	out := loginJSON{OK: true, Login: l.opt.Required}
	if p != nil && p.role != "" {
		out.Role, out.Via = string(p.role), p.via()
		if p.sess != nil {
			exp := p.sess.expires.UTC()
			out.ExpiresAt = &exp
		}
	}
	writeJSON(w, http.StatusOK, out)
}
