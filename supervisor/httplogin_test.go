package supervisor

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
)

const viewerToken = "viewer-token-0123456789abcdef-0123456789"

// loginHost is the Host of the login tests' listener (192.0.2.10:8443,
// beyond loopback, TLS).
const loginHost = "192.0.2.10:8443"

// loggedIn is the test supervisor's HTTP interface behind a guard and a
// login, as the daemon builds it for a TLS listener beyond loopback.
func loggedIn(t *testing.T) (*Supervisor, http.Handler, *loginGate) {
	t.Helper()
	s, _ := newTestSupervisor(t)
	guardReady(t, s)
	h, err := s.GuardHTTP(s.HTTPHandler(), HTTPGuard{Listen: "0.0.0.0:8443", Bound: "0.0.0.0:8443", AllowedHosts: []string{"192.0.2.10"},
		Login: &HTTPLogin{Required: true, ViewerToken: viewerToken, Secure: true}})
	if err != nil {
		t.Fatal(err)
	}
	return s, h, h.(*httpGuard).next.(*loginGate)
}

// loginReq sends one request as it arrives over TLS on 192.0.2.10:8443
// from 198.51.100.7: header pairs kv, a cookie header made of cookies.
func loginReq(h http.Handler, method, path string, cookies []*http.Cookie, kv ...string) *httptest.ResponseRecorder {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, &net.TCPAddr{IP: net.ParseIP("192.0.2.10"), Port: 8443})
	req := httptest.NewRequestWithContext(ctx, method, path, nil)
	req.Host = loginHost
	req.RemoteAddr = "198.51.100.7:40000"
	req.TLS = &tls.ConnectionState{Version: tls.VersionTLS13, HandshakeComplete: true}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Add(kv[i], kv[i+1])
	}
	for _, c := range cookies {
		req.AddCookie(c)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// login logs in with token and returns the session cookie, checking every
// attribute of the Set-Cookie header.
func login(t *testing.T, h http.Handler, token string) *http.Cookie {
	t.Helper()
	rec := loginReq(h, "POST", "/login", nil, "Authorization", "Bearer "+token)
	if rec.Code != http.StatusOK {
		t.Fatalf("login: %d %s", rec.Code, rec.Body)
	}
	cs := checkSetCookies(t, "login", rec)
	if len(cs) != 1 || cs[0].Name != SecureSessionCookie || cs[0].MaxAge <= 0 || len(cs[0].Value) != 43 {
		t.Fatalf("login set %v", rec.Header().Values("Set-Cookie"))
	}
	return &http.Cookie{Name: cs[0].Name, Value: cs[0].Value}
}

// checkSetCookies checks every Set-Cookie of a reply: HttpOnly, Secure,
// SameSite=Strict, Path=/, no Domain, and no token in it.
func checkSetCookies(t *testing.T, what string, rec *httptest.ResponseRecorder) []*http.Cookie {
	t.Helper()
	for _, raw := range rec.Header().Values("Set-Cookie") {
		for _, want := range []string{"HttpOnly", "Secure", "SameSite=Strict", "Path=/"} {
			if !strings.Contains(raw, "; "+want) {
				t.Errorf("%s: Set-Cookie %q lacks %s", what, raw, want)
			}
		}
		if strings.Contains(raw, "Domain=") || strings.Contains(raw, guardToken) || strings.Contains(raw, viewerToken) {
			t.Errorf("%s: Set-Cookie %q", what, raw)
		}
	}
	return (&http.Response{Header: rec.Header()}).Cookies()
}

// Beyond loopback with a login, every path but the login page's own and
// the probes answers a request with no session or token 401
// LOGIN_REQUIRED (the dashboard 303 to /login) and gives nothing away;
// /readyz says only whether it is ready.
func TestLoginRequired(t *testing.T) {
	s, h, _ := loggedIn(t)
	for _, p := range []string{"/api/v1/status", "/api/v1/events", "/api/v1/dashboard", "/metrics", "/api/v1/guarantees", "/dashboard.js", "/api/v1/session", "/nothing"} {
		refusedWith(t, "GET "+p, loginReq(h, "GET", p, nil), http.StatusUnauthorized, api.CodeLoginRequired)
	}
	for _, p := range []string{"/api/v1/halt", "/api/v1/reset"} {
		refusedWith(t, "POST "+p, loginReq(h, "POST", p, nil), http.StatusUnauthorized, api.CodeLoginRequired)
	}
	if halted, _ := s.engine.Halted(); halted {
		t.Fatal("halted without a login")
	}
	if rec := loginReq(h, "GET", "/", nil); rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/login" || strings.Contains(rec.Body.String(), "actuators") {
		t.Errorf("GET / without a login: %d %q %s", rec.Code, rec.Header().Get("Location"), rec.Body)
	}
	for _, p := range []string{"/login", "/login.js", "/dashboard.css", "/healthz", "/readyz"} {
		rec := loginReq(h, "GET", p, nil)
		if rec.Code != http.StatusOK {
			t.Errorf("GET %s without a login: %d %s", p, rec.Code, rec.Body)
		}
		if p == "/login" && (!strings.Contains(rec.Body.String(), `<script src="/login.js" defer></script>`) || rec.Header().Get("Content-Security-Policy") != dashboardCSP) {
			t.Errorf("the login page: %s %q", rec.Body, rec.Header().Get("Content-Security-Policy"))
		}
	}
	s.Halt("test", "the reason is the operator's")
	waitHalted(t, s)
	if rec := loginReq(h, "GET", "/readyz", nil); rec.Code != http.StatusServiceUnavailable || rec.Body.String() != "not ready\n" {
		t.Errorf("readyz before a login: %d %q, want 503 without the reasons", rec.Code, rec.Body)
	}
	c := login(t, h, viewerToken)
	if rec := loginReq(h, "GET", "/readyz", []*http.Cookie{c}); !strings.Contains(rec.Body.String(), "the reason is the operator's") {
		t.Errorf("readyz after a login: %d %q, want the reasons", rec.Code, rec.Body)
	}
}

func waitHalted(t *testing.T, s *Supervisor) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if halted, _ := s.engine.Halted(); halted && !s.Status().Ready {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("not halted")
		}
	}
}

// The operator's session reads, halts and resets; its cookie is a random
// id, never the token, with every attribute; after logout or expiry the
// same cookie is refused, and a stream opened with it ends.
func TestLoginOperatorSession(t *testing.T) {
	s, h, gate := loggedIn(t)
	c := login(t, h, guardToken)
	if rec := loginReq(h, "GET", "/api/v1/status", []*http.Cookie{c}); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"actuators"`) {
		t.Fatalf("status with the session: %d %s", rec.Code, rec.Body)
	}
	var who loginJSON
	if rec := loginReq(h, "GET", "/api/v1/session", []*http.Cookie{c}); json.Unmarshal(rec.Body.Bytes(), &who) != nil || !who.Login || who.Role != "operator" || who.Via != "session" || who.ExpiresAt == nil {
		t.Errorf("session: %s", rec.Body)
	}
	if rec := loginReq(h, "POST", "/api/v1/halt", []*http.Cookie{c}, "Origin", "https://"+loginHost); rec.Code != http.StatusOK {
		t.Fatalf("halt with the session: %d %s", rec.Code, rec.Body)
	}
	waitHalted(t, s)
	if _, why := s.engine.Halted(); !strings.HasPrefix(why, "http 198.51.100.7 operator") {
		t.Errorf("the halt's source %q does not name the role", why)
	}
	if rec := loginReq(h, "POST", "/api/v1/reset", []*http.Cookie{c}, "Origin", "https://"+loginHost); rec.Code != http.StatusOK {
		t.Fatalf("reset with the operator's session, over TLS beyond loopback: %d %s", rec.Code, rec.Body)
	}
	guardReady(t, s)

	// A stream opened with the session ends at the logout.
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context { return ctx }
	srv.StartTLS()
	defer srv.Close()
	hc := srv.Client()
	req, _ := http.NewRequest("GET", srv.URL+"/api/v1/events", nil)
	req.Host = loginHost
	req.AddCookie(c)
	resp, err := hc.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("events with the session: %v %v", resp, err)
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		buf := make([]byte, 4096)
		for {
			if _, err := resp.Body.Read(buf); err != nil {
				return
			}
		}
	}()

	rec := loginReq(h, "POST", "/logout", []*http.Cookie{c})
	cs := checkSetCookies(t, "logout", rec)
	if rec.Code != http.StatusOK || len(cs) != 1 || cs[0].MaxAge >= 0 || cs[0].Value != "" {
		t.Errorf("logout: %d %v", rec.Code, rec.Header().Values("Set-Cookie"))
	}
	select {
	case <-ended:
	case <-time.After(3 * time.Second):
		t.Error("the event stream outlived the logout by 3 s")
	}
	resp.Body.Close()
	for _, p := range []string{"/api/v1/status", "/api/v1/events"} {
		refusedWith(t, "GET "+p+" after the logout", loginReq(h, "GET", p, []*http.Cookie{c}), http.StatusUnauthorized, api.CodeLoginRequired)
	}
	refusedWith(t, "halt after the logout", loginReq(h, "POST", "/api/v1/halt", []*http.Cookie{c}), http.StatusUnauthorized, api.CodeLoginRequired)
	if halted, _ := s.engine.Halted(); halted {
		t.Error("a logged-out session halted")
	}

	// Expiry: a session past its TTL is refused.
	c = login(t, h, guardToken)
	gate.store.mu.Lock()
	gate.store.now = func() time.Time { return time.Now().Add(DefaultSessionTTL + time.Second) }
	gate.store.mu.Unlock()
	refusedWith(t, "status with an expired session", loginReq(h, "GET", "/api/v1/status", []*http.Cookie{c}), http.StatusUnauthorized, api.CodeLoginRequired)
	gate.store.mu.Lock()
	gate.store.now = time.Now
	gate.store.mu.Unlock()
	// A made-up id, and two cookies (one planted), are no session.
	refusedWith(t, "a made-up session", loginReq(h, "GET", "/api/v1/status", []*http.Cookie{{Name: SecureSessionCookie, Value: strings.Repeat("A", 43)}}), http.StatusUnauthorized, api.CodeLoginRequired)
	c = login(t, h, guardToken)
	refusedWith(t, "two session cookies", loginReq(h, "GET", "/api/v1/status", []*http.Cookie{c, {Name: SecureSessionCookie, Value: "planted"}}), http.StatusUnauthorized, api.CodeLoginRequired)
	// Bearer tokens work as well, and decide alone.
	if rec := loginReq(h, "GET", "/metrics", nil, "Authorization", "Bearer "+viewerToken); rec.Code != http.StatusOK {
		t.Errorf("metrics with the viewer's bearer: %d", rec.Code)
	}
	refusedWith(t, "a wrong bearer with a live session", loginReq(h, "GET", "/api/v1/status", []*http.Cookie{c}, "Authorization", "Bearer "+viewerToken+"x"),
		http.StatusUnauthorized, api.CodeUnauthorized)
}

// The viewer reads and halts, and may never reset: 403 FORBIDDEN, still
// halted, whether by its session or its bearer token.
func TestLoginViewerNeverResets(t *testing.T) {
	s, h, _ := loggedIn(t)
	c := login(t, h, viewerToken)
	for _, p := range []string{"/", "/dashboard.js", "/api/v1/status", "/api/v1/dashboard", "/metrics"} {
		if rec := loginReq(h, "GET", p, []*http.Cookie{c}); rec.Code != http.StatusOK {
			t.Errorf("viewer GET %s: %d", p, rec.Code)
		}
	}
	if rec := loginReq(h, "POST", "/api/v1/halt", []*http.Cookie{c}); rec.Code != http.StatusOK {
		t.Fatalf("the viewer's halt: %d %s", rec.Code, rec.Body)
	}
	waitHalted(t, s)
	refusedWith(t, "the viewer's reset (session)", loginReq(h, "POST", "/api/v1/reset", []*http.Cookie{c}), http.StatusForbidden, api.CodeForbidden)
	refusedWith(t, "the viewer's reset (bearer)", loginReq(h, "POST", "/api/v1/reset", nil, "Authorization", "Bearer "+viewerToken), http.StatusForbidden, api.CodeForbidden)
	time.Sleep(50 * time.Millisecond)
	if halted, _ := s.engine.Halted(); !halted {
		t.Fatal("the viewer reset the halt")
	}
	// The viewer's refusals are not guesses: the operator resets at once.
	if rec := loginReq(h, "POST", "/api/v1/reset", nil, "Authorization", "Bearer "+guardToken); rec.Code != http.StatusOK {
		t.Errorf("the operator's reset after the viewer's: %d %s", rec.Code, rec.Body)
	}
}

// Failed logins and wrong bearer tokens share the failed resets' limit:
// 401 five times from a host, then 429 with Retry-After for every login and
// token, the right one included. A halt is never limited: a wrong token on
// it is 401 and counted, the right one and a session halt.
func TestLoginBruteForce(t *testing.T) {
	s, h, _ := loggedIn(t)
	c := login(t, h, viewerToken) // before the guessing
	for i := range ResetFailsPerHost {
		refusedWith(t, fmt.Sprintf("wrong token %d", i), loginReq(h, "POST", "/login", nil, "Authorization", fmt.Sprintf("Bearer guess-%02d-0123456789abcdef0123456789", i)),
			http.StatusUnauthorized, api.CodeUnauthorized)
	}
	for _, tok := range []string{"guess-99-0123456789abcdef0123456789", guardToken} {
		rec := loginReq(h, "POST", "/login", nil, "Authorization", "Bearer "+tok)
		refusedWith(t, "login while limited", rec, http.StatusTooManyRequests, api.CodeTooManyAttempts)
		if rec.Header().Get("Retry-After") == "" || len(rec.Header().Values("Set-Cookie")) != 0 {
			t.Errorf("login while limited: Retry-After %q, Set-Cookie %v", rec.Header().Get("Retry-After"), rec.Header().Values("Set-Cookie"))
		}
	}
	refusedWith(t, "a read with the right bearer while limited", loginReq(h, "GET", "/api/v1/status", nil, "Authorization", "Bearer "+guardToken), http.StatusTooManyRequests, api.CodeTooManyAttempts)
	refusedWith(t, "a halt with a wrong bearer while limited", loginReq(h, "POST", "/api/v1/halt", nil, "Authorization", "Bearer wrong"), http.StatusUnauthorized, api.CodeUnauthorized)
	if halted, _ := s.engine.Halted(); halted {
		t.Fatal("a wrong token halted")
	}
	if rec := loginReq(h, "POST", "/api/v1/halt", nil, "Authorization", "Bearer "+guardToken); rec.Code != http.StatusOK {
		t.Fatalf("a halt with the right bearer while limited: %d %s", rec.Code, rec.Body)
	}
	waitHalted(t, s)
	if rec := loginReq(h, "POST", "/api/v1/halt", []*http.Cookie{c}); rec.Code != http.StatusOK {
		t.Errorf("a halt with a session while limited: %d %s", rec.Code, rec.Body)
	}
	// Another host is not limited by this one's guesses.
	ctx := context.WithValue(context.Background(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.ParseIP("192.0.2.10"), Port: 8443})
	req := httptest.NewRequestWithContext(ctx, "POST", "/login", nil)
	req.Host, req.RemoteAddr, req.TLS = loginHost, "198.51.100.8:1", &tls.ConnectionState{}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+guardToken)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Errorf("a login from another host: %d %s", rec.Code, rec.Body)
	}
}

// A token is never taken from a query string: a read with one is
// LOGIN_REQUIRED, a login with one 400 without a look at it.
func TestLoginQueryToken(t *testing.T) {
	_, h, _ := loggedIn(t)
	for _, q := range []string{"token=", "access_token=", "bearer=", "Authorization=Bearer%20"} {
		refusedWith(t, "status?"+q, loginReq(h, "GET", "/api/v1/status?"+q+guardToken, nil), http.StatusUnauthorized, api.CodeLoginRequired)
		refusedWith(t, "events?"+q, loginReq(h, "GET", "/api/v1/events?"+q+guardToken, nil), http.StatusUnauthorized, api.CodeLoginRequired)
		rec := loginReq(h, "POST", "/login?"+q+guardToken, nil)
		refusedWith(t, "login?"+q, rec, http.StatusBadRequest, api.CodeBadRequest)
		if len(rec.Header().Values("Set-Cookie")) != 0 {
			t.Errorf("login?%s set a cookie", q)
		}
	}
	// With the right bearer too: the query does not make a login.
	refusedWith(t, "login?token with a bearer", loginReq(h, "POST", "/login?token=x", nil, "Authorization", "Bearer "+guardToken), http.StatusBadRequest, api.CodeBadRequest)
	// Nor does a post a cross-site form could send (here: a second,
	// text/plain content type).
	rec := loginReq(h, "POST", "/login", nil, "Authorization", "Bearer "+guardToken, "Content-Type", "text/plain")
	refusedWith(t, "a login as text/plain", rec, http.StatusUnsupportedMediaType, api.CodeBadRequest)
	if len(rec.Header().Values("Set-Cookie")) != 0 {
		t.Error("a text/plain login set a cookie")
	}
}

// On loopback with no login (the default), nothing changes: status,
// halt and the dashboard need nothing; /api/v1/session says there is no
// login; /login does not exist.
func TestNoLoginOnLoopback(t *testing.T) {
	s, _ := newTestSupervisor(t)
	guardReady(t, s)
	h, err := s.GuardHTTP(s.HTTPHandler(), HTTPGuard{Listen: "127.0.0.1:8080", Bound: "127.0.0.1:8080", Login: &HTTPLogin{}})
	if err != nil {
		t.Fatal(err)
	}
	if rec := guardReq(h, "GET", "/api/v1/status", "127.0.0.1:8080"); rec.Code != http.StatusOK {
		t.Errorf("status: %d", rec.Code)
	}
	if rec := guardReq(h, "GET", "/api/v1/session", "127.0.0.1:8080"); rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != `{"ok":true,"login":false}` {
		t.Errorf("session: %d %s", rec.Code, rec.Body)
	}
	if rec := guardReq(h, "GET", "/login", "127.0.0.1:8080"); rec.Code != http.StatusNotFound {
		t.Errorf("/login without a login: %d", rec.Code)
	}
	if rec := guardReq(h, "POST", "/api/v1/halt", "127.0.0.1:8080"); rec.Code != http.StatusOK {
		t.Errorf("halt: %d", rec.Code)
	}
}

// Plain HTTP beyond loopback still never takes a reset token (the rule of
// before); over TLS it does.
func TestResetBeyondLoopbackNeedsTLS(t *testing.T) {
	s, _ := newTestSupervisor(t)
	guardReady(t, s)
	h := s.HTTPHandler()
	reset := func(withTLS bool) *httptest.ResponseRecorder {
		ctx := context.WithValue(context.Background(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.ParseIP("192.0.2.10"), Port: 8080})
		req := httptest.NewRequestWithContext(ctx, "POST", "/api/v1/reset", nil)
		req.RemoteAddr = "198.51.100.7:1"
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+guardToken)
		if withTLS {
			req.TLS = &tls.ConnectionState{}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	s.Halt("test", "")
	waitHalted(t, s)
	refusedWith(t, "reset over plain HTTP beyond loopback", reset(false), http.StatusForbidden, api.CodeForbidden)
	if rec := reset(true); rec.Code != http.StatusOK {
		t.Errorf("reset over TLS beyond loopback: %d %s", rec.Code, rec.Body)
	}
}

// Sessions are bounded per role: a viewer logging in again and again
// ends only viewers' oldest sessions, never the operator's.
func TestSessionsBoundedPerRole(t *testing.T) {
	st := newSessions(time.Hour)
	opID, op, _ := st.create(RoleOperator)
	var first *session
	for i := range MaxSessionsPerRole + 5 {
		_, v, err := st.create(RoleViewer)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = v
		}
	}
	if st.lookup(opID) != op || !op.live(time.Now()) {
		t.Error("viewers' logins ended the operator's session")
	}
	if first.live(time.Now()) {
		t.Error("the oldest viewer session outlived the bound")
	}
	if n := st.count(); n != MaxSessionsPerRole+1 {
		t.Errorf("%d sessions, want %d", n, MaxSessionsPerRole+1)
	}
}

// A halt with a session latches at once while wrong tokens flood the
// listener: the login's checks are lookups in memory.
func TestLoggedInHaltUnderFlood(t *testing.T) {
	s, h, _ := loggedIn(t)
	c := login(t, h, viewerToken)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				loginReq(h, "POST", "/login", nil, "Authorization", fmt.Sprintf("Bearer flood-%d-0123456789abcdef0123456789", i))
				loginReq(h, "GET", "/api/v1/status", []*http.Cookie{{Name: SecureSessionCookie, Value: "made-up"}})
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	began := time.Now()
	rec := loginReq(h, "POST", "/api/v1/halt", []*http.Cookie{c})
	latched, _ := s.engine.Halted()
	took := time.Since(began)
	close(stop)
	wg.Wait()
	if rec.Code != http.StatusOK || !latched {
		t.Fatalf("the halt during the flood: %d %s, latched %v", rec.Code, rec.Body, latched)
	}
	t.Logf("the halt latched in %v", took)
	if took > time.Second {
		t.Errorf("the halt took %v during the flood", took)
	}
}

// Strict-Transport-Security only when asked for (http.tls.hsts), and only
// over TLS; never by default, where the certificate may be self-signed.
func TestHSTS(t *testing.T) {
	s, _ := newTestSupervisor(t)
	guardReady(t, s)
	for _, tc := range []struct {
		hsts, tls bool
		want      string
	}{{false, true, ""}, {true, true, "max-age=31536000"}, {true, false, ""}} {
		h, err := s.GuardHTTP(s.HTTPHandler(), HTTPGuard{Listen: "127.0.0.1:8443", Bound: "127.0.0.1:8443", Login: &HTTPLogin{Secure: tc.tls, HSTS: tc.hsts}})
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest("GET", "/healthz", nil)
		req.Host = "127.0.0.1:8443"
		if tc.tls {
			req.TLS = &tls.ConnectionState{}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if got := rec.Header().Get("Strict-Transport-Security"); got != tc.want {
			t.Errorf("hsts %v, tls %v: Strict-Transport-Security %q, want %q", tc.hsts, tc.tls, got, tc.want)
		}
	}
}
