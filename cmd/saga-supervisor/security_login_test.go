package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// TestSecurityLogin is the table's rows on the listener beyond loopback
// (docs/SECURITY.md, rows 49–58; issue 28): the real binary serving HTTPS
// on 0.0.0.0 with a self-signed certificate it generated, a login, the
// operator token and a viewer token, sessions of 5 s. Each row is an
// attack by a client with no credential, a stale one, the viewer's, a
// wrong one, or from a page of another site; each must be refused with
// nothing moved (the sim world file and the status agree and are
// unchanged), nothing leaked (no status, no stream, no cookie in a
// refusal), the daemon up and ready. Every Set-Cookie the daemon sends
// in the whole run — refusals included — must be HttpOnly, Secure,
// SameSite=Strict, Path=/, without Domain, and never hold a token.
//
// The attackers speak from 127.0.0.2 and 127.0.0.3 (their own hosts for
// the failed attempts' limit), the harness from 127.0.0.1; a reset that
// must cross the network comes to the machine's own LAN address when it
// has one. The brute force comes last: it locks its host out for a
// minute.
func TestSecurityLogin(t *testing.T) {
	s := newLoginSecure(t)
	for _, c := range loginCases() {
		t.Run(c.name, func(t *testing.T) { s.runCase(t, c) })
	}
	if t.Failed() {
		t.Logf("daemon log (last 8 KiB):\n%s", lastBytes(s.d.out.String(), 8<<10))
	}
}

// loginSessionTTL is http.session_ttl of the login rows' daemon: short,
// so that a session's expiry is one of the rows.
const loginSessionTTL = 5 * time.Second

// loginSecure is the TLS daemon and the clients the rows share.
type loginSecure struct {
	*hostile
	port        string
	lan         string // a non-loopback address of this machine, or ""
	viewer      string // the viewer token the daemon generated
	certDER     []byte
	fingerprint string // as the banner printed it
	pool        *x509.CertPool
	cookies     *cookieAudit
}

// cookieAudit checks every Set-Cookie of every reply.
type cookieAudit struct {
	mu       sync.Mutex
	seen     int
	problems []string
	tokens   []string // what no cookie may hold
}

func (a *cookieAudit) check(resp *http.Response) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, raw := range resp.Header.Values("Set-Cookie") {
		a.seen++
		what := fmt.Sprintf("%s %s: Set-Cookie %q", resp.Request.Method, resp.Request.URL.Path, raw)
		for _, want := range []string{"; Path=/", "; HttpOnly", "; Secure", "; SameSite=Strict"} {
			if !strings.Contains(raw, want) {
				a.problems = append(a.problems, what+" lacks "+strings.TrimPrefix(want, "; "))
			}
		}
		if !strings.HasPrefix(raw, "__Host-saga-session=") || strings.Contains(strings.ToLower(raw), "domain=") {
			a.problems = append(a.problems, what+": not the __Host- session cookie, or with a Domain")
		}
		for _, tok := range a.tokens {
			if tok != "" && strings.Contains(raw, tok) {
				a.problems = append(a.problems, what+": holds a token")
			}
		}
	}
}

func (a *cookieAudit) mark() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.problems)
}

func (a *cookieAudit) since(m int) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.problems[m:])
}

type auditTransport struct {
	rt    http.RoundTripper
	audit *cookieAudit
}

func (t auditTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(r)
	if err == nil {
		t.audit.check(resp)
	}
	return resp, err
}

// lanAddress is a non-loopback IPv4 address of an interface that is up,
// or "".
func lanAddress() string {
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
				return n.IP.String()
			}
		}
	}
	return ""
}

// loginConfig is config.DefaultYAML as shipped with temporary paths, HTTP
// on httpListen over TLS with a self-signed certificate, the viewer token
// generated, and sessions of ttl.
func loginConfig(t *testing.T, dir, httpListen, mqttListen, lan string, ttl time.Duration) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "operator-token"), []byte(secToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	allowed := "[]"
	if lan != "" {
		allowed = "[" + lan + "]"
	}
	text := string(config.DefaultYAML)
	for _, r := range [][2]string{
		{"  dir: ./saga-data/journal", "  dir: " + filepath.Join(dir, "journal")},
		{"  world: ./saga-data/world", "  world: " + filepath.Join(dir, "world")},
		{"  listen: 127.0.0.1:1883", "  listen: " + mqttListen},
		{"  listen: 127.0.0.1:8080", "  listen: " + httpListen},
		{"  reset_token_file: ./saga-data/operator-token", "  reset_token_file: " + filepath.Join(dir, "operator-token")},
		{"sim: {slew: 720}", "sim: {slew: 0}"},
		{"    password_file: ./saga-data/mqtt/passwd", "    password_file: " + filepath.Join(dir, "mqtt", "passwd")},
		{"    credentials_dir: ./saga-data/mqtt/credentials", "    credentials_dir: " + filepath.Join(dir, "mqtt", "credentials")},
		{"  # allowed_hosts: [robot.local, 192.168.1.20:8080]", "  allowed_hosts: " + allowed},
		{`    cert_file: ""`, "    cert_file: " + filepath.Join(dir, "http", "tls.crt")},
		{`    key_file: ""`, "    key_file: " + filepath.Join(dir, "http", "tls.key")},
		{"    self_signed: false", "    self_signed: true"},
		{`  viewer_token_file: ""`, "  viewer_token_file: " + filepath.Join(dir, "viewer-token")},
		{"  generate_viewer_token: false", "  generate_viewer_token: true"},
		{"  session_ttl: 12h", "  session_ttl: " + ttl.String()},
	} {
		if !strings.Contains(text, r[0]) {
			t.Fatalf("the default config no longer has %q; adapt the login security test", r[0])
		}
		text = strings.Replace(text, r[0], r[1], 1)
	}
	path := filepath.Join(dir, "arm.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func newLoginSecure(t *testing.T) *loginSecure {
	t.Helper()
	dir := t.TempDir()
	ports := stablePorts(t, 2)
	port := fmt.Sprint(ports[0])
	s := &loginSecure{port: port, lan: lanAddress(), cookies: &cookieAudit{}}
	s.hostile = &hostile{kind: "embedded", dir: dir, journal: filepath.Join(dir, "journal"), worldPath: filepath.Join(dir, "world")}
	cfgPath := loginConfig(t, dir, "0.0.0.0:"+port, fmt.Sprintf("127.0.0.1:%d", ports[1]), s.lan, loginSessionTTL)
	out, code := run(t, "check-config", cfgPath)
	if code != 0 || !strings.Contains(out, "http.listen: 0.0.0.0:"+port+" is reachable from other machines") {
		t.Fatalf("the login config: exit %d\n%s", code, out)
	}
	if s.lan == "" {
		t.Logf("no LAN address on this machine: the reset beyond loopback is made on loopback")
	}

	d := &daemonProc{t: t, cfgPath: cfgPath, http: "127.0.0.1:" + port}
	d.start()
	s.d = d
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			d.cmd.Process.Kill()
			d.cmd.Wait()
		}
	})
	// The banner names the certificate and its fingerprint.
	banner := regexp.MustCompile(`(?m)^  TLS      (\S+)  \(SHA-256 ([0-9A-F:]{95}), created now\)$`)
	daemontestWait(t, "the banner's TLS line", 20*time.Second, func() bool { return banner.MatchString(d.out.String()) })
	m := banner.FindStringSubmatch(d.out.String())
	if m[1] != filepath.Join(dir, "http", "tls.crt") {
		t.Errorf("the banner names %s", m[1])
	}
	s.fingerprint = m[2]
	b, err := os.ReadFile(m[1])
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	s.certDER = blk.Bytes
	sum := sha256.Sum256(s.certDER)
	if got := strings.ToUpper(strings.Join(hexBytes(sum[:]), ":")); got != s.fingerprint {
		t.Errorf("the banner's fingerprint %s is not the certificate's %s", s.fingerprint, got)
	}
	if !strings.Contains(d.out.String(), "sha256="+s.fingerprint) {
		t.Errorf("the log does not carry the fingerprint")
	}
	for _, f := range []string{"tls.crt", "tls.key"} {
		if st, err := os.Stat(filepath.Join(dir, "http", f)); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want mode 0600", f, st.Mode(), err)
		}
	}
	cert, err := x509.ParseCertificate(s.certDER)
	if err != nil {
		t.Fatal(err)
	}
	s.pool = x509.NewCertPool()
	s.pool.AddCert(cert)
	vb, err := os.ReadFile(filepath.Join(dir, "viewer-token"))
	if err != nil {
		t.Fatal(err)
	}
	s.viewer = strings.TrimSpace(string(vb))
	s.cookies.tokens = []string{secToken, s.viewer}
	s.hc = s.client("127.0.0.1")

	daemontestWait(t, "ready over TLS", 20*time.Second, func() bool {
		code, _, _ := s.req(t, s.hc, "GET", "/readyz", nil, "")
		return code == http.StatusOK
	})
	st := s.status(t)
	for _, a := range st.Actuators {
		s.names = append(s.names, a.Name)
	}
	slices.Sort(s.names)
	// The baseline: a halt sends elbow and shoulder to their safe values,
	// so a halt in a row moves nothing.
	s.halt(t, s.hc, nil, "Bearer "+secToken)
	daemontestWait(t, "the elbow at its safe value", 10*time.Second, func() bool { return s.status(t).commanded()["elbow"] == 45 })
	// ctl on the robot follows the config: https:// on loopback, trusting
	// exactly the certificate it names — and no other.
	other := filepath.Join(dir, "other.crt")
	writeSelfSignedTo(t, other)
	if out, code := run(t, "ctl", "--config", cfgPath, "reset", "--http-cert", other); code == 0 || !strings.Contains(out, "certificate is not the one in "+other) {
		t.Errorf("ctl reset trusting another certificate: exit %d\n%s", code, out)
	}
	if out, code := run(t, "ctl", "--config", cfgPath, "reset"); code != 0 || !strings.Contains(out, "HALTED") || !strings.Contains(out, "the halt is cleared") {
		t.Fatalf("ctl --config reset over https: exit %d\n%s", code, out)
	}
	daemontestWait(t, "ready", 10*time.Second, func() bool { return s.status(t).Ready })
	return s
}

// writeSelfSignedTo writes a self-signed certificate (of a key of no one's)
// to path.
func writeSelfSignedTo(t *testing.T, path string) {
	t.Helper()
	cert, _, _ := writeSelfSigned(t, t.TempDir())
	b, err := os.ReadFile(cert)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func hexBytes(b []byte) []string {
	out := make([]string, len(b))
	for i, x := range b {
		out[i] = fmt.Sprintf("%02x", x)
	}
	return out
}

// client is an HTTPS client that trusts the daemon's own certificate,
// speaking from the loopback address src, auditing every cookie; no
// cookie jar: each request carries what the row gives it.
func (s *loginSecure) client(src string) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	tr := &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: s.pool, MinVersion: tls.VersionTLS12}}
	return &http.Client{Timeout: 10 * time.Second, Transport: auditTransport{tr, s.cookies},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// req sends one request to the daemon over TLS (to 127.0.0.1, or to the
// LAN address when the client dials from it), with header pairs hdr (a
// POST is JSON unless hdr says otherwise). The body is read for at most
// 2 s: a stream served by mistake ends there.
func (s *loginSecure) req(t *testing.T, hc *http.Client, method, path string, cookies []*http.Cookie, body string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	return s.reqTo(t, hc, "127.0.0.1", method, path, cookies, body, hdr...)
}

func (s *loginSecure) reqTo(t *testing.T, hc *http.Client, host, method, path string, cookies []*http.Cookie, body string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r, err := http.NewRequestWithContext(ctx, method, "https://"+net.JoinHostPort(host, s.port)+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if method == http.MethodPost {
		r.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			r.Header.Del(hdr[i])
		} else {
			r.Header.Set(hdr[i], hdr[i+1])
		}
	}
	for _, c := range cookies {
		r.AddCookie(c)
	}
	resp, err := hc.Do(r)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, resp.Header, string(b)
}

func (s *loginSecure) status(t *testing.T) hostileStatus {
	t.Helper()
	code, _, body := s.req(t, s.hc, "GET", "/api/v1/status", nil, "", "Authorization", "Bearer "+secToken)
	var st hostileStatus
	if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil {
		t.Fatalf("GET /api/v1/status as the operator: %d %s", code, body)
	}
	return st
}

// login logs in with token from hc and returns the session cookie.
func (s *loginSecure) login(t *testing.T, hc *http.Client, token string) *http.Cookie {
	t.Helper()
	code, hdr, body := s.req(t, hc, "POST", "/login", nil, "{}", "Authorization", "Bearer "+token)
	cs := (&http.Response{Header: hdr}).Cookies()
	if code != http.StatusOK || len(cs) != 1 || cs[0].MaxAge != int(loginSessionTTL/time.Second) {
		t.Fatalf("login: %d %s %v", code, body, hdr.Values("Set-Cookie"))
	}
	return &http.Cookie{Name: cs[0].Name, Value: cs[0].Value}
}

func (s *loginSecure) halt(t *testing.T, hc *http.Client, cookies []*http.Cookie, auth string) {
	t.Helper()
	code, _, body := s.req(t, hc, "POST", "/api/v1/halt", cookies, `{"reason":"login security test"}`, "Authorization", auth)
	if code != http.StatusOK || !strings.Contains(body, `"halted":true`) {
		t.Fatalf("halt: %d %s", code, body)
	}
}

func (s *loginSecure) reset(t *testing.T) {
	t.Helper()
	code, _, body := s.req(t, s.hc, "POST", "/api/v1/reset", nil, "", "Authorization", "Bearer "+secToken)
	if code != http.StatusOK || !strings.Contains(body, `"halted":false`) {
		t.Fatalf("reset: %d %s", code, body)
	}
	daemontestWait(t, "ready", 10*time.Second, func() bool { return s.status(t).Ready })
}

func (s *loginSecure) halted(t *testing.T) bool {
	t.Helper()
	return s.status(t).Halted
}

// snap is the world file and the status, once they agree.
func (s *loginSecure) snap(t *testing.T) hostileSnap {
	t.Helper()
	var why string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		w, err := s.world()
		if err != nil {
			why = err.Error()
			continue
		}
		c := s.status(t).commanded()
		why = ""
		for _, n := range s.names {
			if ds := w[n]; !ds.Known || ds.Commanded != c[n] || ds.Position != c[n] {
				why = fmt.Sprintf("%s: world %+v, status %v", n, ds, c[n])
			}
		}
		if why == "" {
			return hostileSnap{world: w, commanded: c}
		}
	}
	t.Fatalf("the world file and the status never agreed: %s", why)
	return hostileSnap{}
}

type loginCase struct {
	name  string
	halts bool // halts (and resets) itself
	run   func(t *testing.T, s *loginSecure)
}

func (s *loginSecure) runCase(t *testing.T, c loginCase) {
	before := s.snap(t)
	cm := s.cookies.mark()
	c.run(t, s)
	s.unchanged(t, before, s.snap(t))
	if st := s.status(t); st.Halted {
		t.Errorf("halted after the attack: %s", st.HaltWhy)
		s.reset(t)
	}
	if code, _, body := s.req(t, s.hc, "GET", "/readyz", nil, ""); code != http.StatusOK || body != "ready\n" {
		t.Errorf("/readyz after the attack: %d %q", code, body)
	}
	if s.d.cmd.ProcessState != nil {
		t.Fatalf("the daemon exited: %v", s.d.cmd.ProcessState)
	}
	for _, p := range s.cookies.since(cm) {
		t.Errorf("cookie: %s", p)
	}
}

// refused checks a refusal: its status and code, JSON, no state, no
// stream, no cookie.
func refusedLogin(t *testing.T, what string, code int, hdr http.Header, body string, wantStatus int, wantCode string) {
	t.Helper()
	guardRefused(t, what, code, hdr, body, wantStatus, wantCode)
	if v := hdr.Values("Set-Cookie"); len(v) != 0 {
		t.Errorf("%s: a refusal set a cookie: %v", what, v)
	}
}

func loginCases() []loginCase {
	return []loginCase{
		{name: "49_set_cookie_attributes", run: caseCookieAttributes},
		{name: "50_no_login_reads_nothing_halts_nothing", run: caseNoLogin},
		{name: "51_session_replayed_after_logout_or_expiry", run: caseSessionReplay},
		{name: "52_viewer_resets_forbidden", halts: true, run: caseViewerReset},
		{name: "53_token_in_query_string", run: caseQueryToken},
		{name: "54_foreign_origin_on_login", run: caseLoginOrigin},
		{name: "55_plain_http_to_tls_port", run: casePlainToTLS},
		{name: "56_listener_beyond_loopback_without_tls", run: caseNoTLSRefused},
		{name: "57_login_brute_force", halts: true, run: caseLoginBruteForce},
	}
}

// caseCookieAttributes: logins of both roles and a logout set cookies
// with every attribute (checked by the audit on every reply of the run),
// a random id each time, never a token; the session answers who it is.
func caseCookieAttributes(t *testing.T, s *loginSecure) {
	seen := s.cookies.seen
	op, vw := s.login(t, s.hc, secToken), s.login(t, s.hc, s.viewer)
	again := s.login(t, s.hc, s.viewer)
	if op.Name != "__Host-saga-session" || op.Value == vw.Value || vw.Value == again.Value || len(op.Value) != 43 {
		t.Errorf("session cookies %q %q %q", op, vw, again)
	}
	for c, role := range map[*http.Cookie]string{op: "operator", vw: "viewer"} {
		code, _, body := s.req(t, s.hc, "GET", "/api/v1/session", []*http.Cookie{c}, "")
		if code != http.StatusOK || !strings.Contains(body, `"role":"`+role+`","via":"session"`) {
			t.Errorf("session of %s: %d %s", role, code, body)
		}
	}
	code, hdr, _ := s.req(t, s.hc, "POST", "/logout", []*http.Cookie{again}, "{}")
	if code != http.StatusOK || !strings.Contains(hdr.Get("Set-Cookie"), "Max-Age=0") {
		t.Errorf("logout: %d %v", code, hdr.Values("Set-Cookie"))
	}
	if n := s.cookies.seen - seen; n != 4 {
		t.Errorf("%d cookies set, want 4 (three logins, one logout)", n)
	}
}

// caseNoLogin: from another machine's point of view, with no credential
// every path but the login page's and the probes' is refused 401
// LOGIN_REQUIRED (the dashboard 303 to /login), nothing read, nothing
// halted; the probes say only ready; a refused halt is journaled with its
// source.
func caseNoLogin(t *testing.T, s *loginSecure) {
	hc := s.client("127.0.0.3")
	mark := s.status(t).Journal.LastSeq
	for _, p := range []string{"/api/v1/status", "/api/v1/events", "/api/v1/dashboard", "/metrics", "/dashboard.js", "/api/v1/guarantees", "/api/v1/session"} {
		code, hdr, body := s.req(t, hc, "GET", p, nil, "")
		refusedLogin(t, "GET "+p, code, hdr, body, http.StatusUnauthorized, api.CodeLoginRequired)
	}
	for _, p := range []string{"/api/v1/halt", "/api/v1/reset"} {
		code, hdr, body := s.req(t, hc, "POST", p, nil, `{"reason":"no login"}`)
		refusedLogin(t, "POST "+p, code, hdr, body, http.StatusUnauthorized, api.CodeLoginRequired)
	}
	if code, hdr, body := s.req(t, hc, "GET", "/", nil, ""); code != http.StatusSeeOther || hdr.Get("Location") != "/login" || strings.Contains(body, "actuators") {
		t.Errorf("GET /: %d %q %.200s", code, hdr.Get("Location"), body)
	}
	if code, _, body := s.req(t, hc, "GET", "/readyz", nil, ""); code != http.StatusOK || body != "ready\n" {
		t.Errorf("readyz: %d %q", code, body)
	}
	if code, _, body := s.req(t, hc, "GET", "/login", nil, ""); code != http.StatusOK || !strings.Contains(body, `id="login-form"`) {
		t.Errorf("the login page: %d %.200s", code, body)
	}
	if s.halted(t) {
		t.Fatal("halted without a login")
	}
	recs := s.records(t, mark)
	if count(recs, rollback.RecRefused, func(r jrec) bool {
		return r.Agent == "http" && r.Code == api.CodeLoginRequired && strings.HasPrefix(r.Message, "halt: refused from 127.0.0.3:")
	}) != 1 {
		t.Errorf("the refused halt is not journaled with its source:\n%s", formatRecs(recs, 10))
	}
}

// caseSessionReplay: a cookie replayed after its logout, or after it
// expired, is refused on every path — reads, the stream, a halt — and a
// stream opened with it ends when it does.
func caseSessionReplay(t *testing.T, s *loginSecure) {
	hc := s.client("127.0.0.3")
	c := s.login(t, s.hc, s.viewer)
	if code, _, _ := s.req(t, hc, "GET", "/api/v1/status", []*http.Cookie{c}, ""); code != http.StatusOK {
		t.Fatalf("status with the session: %d", code)
	}
	if code, _, _ := s.req(t, s.hc, "POST", "/logout", []*http.Cookie{c}, "{}"); code != http.StatusOK {
		t.Fatalf("logout: %d", code)
	}
	replay := func(why string) {
		t.Helper()
		for _, p := range []string{"/api/v1/status", "/api/v1/events", "/api/v1/dashboard", "/metrics"} {
			code, hdr, body := s.req(t, hc, "GET", p, []*http.Cookie{c}, "")
			refusedLogin(t, why+": GET "+p, code, hdr, body, http.StatusUnauthorized, api.CodeLoginRequired)
		}
		code, hdr, body := s.req(t, hc, "POST", "/api/v1/halt", []*http.Cookie{c}, "{}")
		refusedLogin(t, why+": halt", code, hdr, body, http.StatusUnauthorized, api.CodeLoginRequired)
		if s.halted(t) {
			t.Fatalf("%s: the session halted", why)
		}
	}
	replay("after the logout")

	// Expiry: a stream opened with a fresh session ends with it.
	c = s.login(t, s.hc, s.viewer)
	began := time.Now()
	r, _ := http.NewRequest("GET", "https://127.0.0.1:"+s.port+"/api/v1/events", nil)
	r.AddCookie(c)
	resp, err := s.hc.Do(r)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("events with the session: %v %v", resp, err)
	}
	sc := bufio.NewScanner(resp.Body)
	events := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "event: status") {
			events++
		}
	}
	resp.Body.Close()
	lasted := time.Since(began)
	t.Logf("the stream of a %v session ended after %v and %d snapshots", loginSessionTTL, lasted.Round(10*time.Millisecond), events)
	if lasted < loginSessionTTL-time.Second || lasted > loginSessionTTL+3*time.Second || events == 0 {
		t.Errorf("the stream lasted %v with %d snapshots, want about the session's %v", lasted, events, loginSessionTTL)
	}
	time.Sleep(time.Until(began.Add(loginSessionTTL + 200*time.Millisecond)))
	replay("after the expiry")
}

// caseViewerReset: the viewer token may halt but never reset — by its
// session or as a bearer, over TLS from another machine's address: 403
// FORBIDDEN, still halted, journaled; the operator's session then resets
// across the network, as TLS allows.
func caseViewerReset(t *testing.T, s *loginSecure) {
	hc, host := s.hc, "127.0.0.1"
	if s.lan != "" {
		hc, host = s.client(s.lan), s.lan
	}
	vw := s.login(t, s.hc, s.viewer)
	if code, _, body := s.reqTo(t, hc, host, "POST", "/api/v1/halt", []*http.Cookie{vw}, `{"reason":"the viewer halts"}`); code != http.StatusOK {
		t.Fatalf("the viewer's halt: %d %s", code, body)
	}
	daemontestWait(t, "halted", 5*time.Second, func() bool { return s.halted(t) })
	before := s.snap(t)
	mark := s.status(t).Journal.LastSeq
	vw = s.login(t, s.hc, s.viewer) // a fresh one: sessions here last 5 s
	for what, auth := range map[string][2]string{"session": {"", ""}, "bearer": {"Authorization", "Bearer " + s.viewer}} {
		cookies := []*http.Cookie{vw}
		if auth[0] != "" {
			cookies = nil
		}
		code, hdr, body := s.reqTo(t, hc, host, "POST", "/api/v1/reset", cookies, `{"operator":"viewer"}`, auth[0], auth[1])
		refusedLogin(t, "the viewer's reset by "+what, code, hdr, body, http.StatusForbidden, api.CodeForbidden)
		if !s.halted(t) {
			t.Fatalf("the viewer's reset by %s cleared the halt", what)
		}
	}
	s.unchanged(t, before, s.snap(t))
	recs := s.records(t, mark)
	if n := count(recs, rollback.RecRefused, func(r jrec) bool { return r.Code == api.CodeForbidden && strings.Contains(r.Message, "viewer role") }); n != 2 {
		t.Errorf("%d refused resets of the viewer journaled, want 2:\n%s", n, formatRecs(recs, 10))
	}
	op := s.login(t, s.hc, secToken)
	if code, _, body := s.reqTo(t, hc, host, "POST", "/api/v1/reset", []*http.Cookie{op}, `{"operator":"security test"}`); code != http.StatusOK {
		t.Fatalf("the operator's session resets over TLS from %s: %d %s", host, code, body)
	}
	daemontestWait(t, "ready", 10*time.Second, func() bool { return s.status(t).Ready })
}

// caseQueryToken: a token in a query string is never a credential: the
// reads are LOGIN_REQUIRED, the login 400 without a look at it, the
// dashboard a 303 to the login.
func caseQueryToken(t *testing.T, s *loginSecure) {
	hc := s.client("127.0.0.3")
	for _, q := range []string{"token=", "access_token=", "bearer=", "auth=Bearer%20"} {
		for _, tok := range []string{secToken, s.viewer} {
			for _, p := range []string{"/api/v1/status", "/api/v1/events", "/metrics"} {
				code, hdr, body := s.req(t, hc, "GET", p+"?"+q+tok, nil, "")
				refusedLogin(t, p+"?"+q, code, hdr, body, http.StatusUnauthorized, api.CodeLoginRequired)
			}
			code, hdr, body := s.req(t, hc, "POST", "/login?"+q+tok, nil, "{}")
			refusedLogin(t, "login?"+q, code, hdr, body, http.StatusBadRequest, api.CodeBadRequest)
			code, hdr, body = s.req(t, hc, "POST", "/api/v1/halt?"+q+tok, nil, "{}")
			refusedLogin(t, "halt?"+q, code, hdr, body, http.StatusUnauthorized, api.CodeLoginRequired)
			if code, hdr, _ := s.req(t, hc, "GET", "/?"+q+tok, nil, ""); code != http.StatusSeeOther || hdr.Get("Location") != "/login" {
				t.Errorf("/?%s: %d", q, code)
			}
		}
	}
	if s.halted(t) {
		t.Fatal("a token in a query string halted")
	}
}

// caseLoginOrigin: a page of another site posting the login form — with
// the right token even — is refused by the guard's Origin rule before the
// login: 403, no cookie; a form post (text/plain) from the page's own
// origin is 415, no cookie.
func caseLoginOrigin(t *testing.T, s *loginSecure) {
	hc := s.client("127.0.0.3")
	for _, o := range []string{"https://evil.example", "http://evil.example", "null", "https://127.0.0.1:" + fmt.Sprint(1+mustAtoi(s.port)%60000), "https://127.0.0.1.nip.io:" + s.port} {
		code, hdr, body := s.req(t, hc, "POST", "/login", nil, "{}", "Origin", o, "Authorization", "Bearer "+secToken)
		refusedLogin(t, "login from "+o, code, hdr, body, http.StatusForbidden, api.CodeOriginNotAllowed)
	}
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"} {
		code, hdr, body := s.req(t, hc, "POST", "/login", nil, "token="+secToken, "Content-Type", ct, "Origin", "https://127.0.0.1:"+s.port, "Authorization", "Bearer "+secToken)
		refusedLogin(t, "login as "+ct, code, hdr, body, http.StatusUnsupportedMediaType, api.CodeBadRequest)
	}
}

func mustAtoi(s string) int {
	var n int
	fmt.Sscan(s, &n)
	return n
}

// casePlainToTLS: plain HTTP to the TLS port — a read with the operator
// token, a halt — gets net/http's 400 and nothing else.
func casePlainToTLS(t *testing.T, s *loginSecure) {
	for _, raw := range []string{
		"GET /api/v1/status HTTP/1.1\r\nHost: 127.0.0.1:" + s.port + "\r\nAuthorization: Bearer " + secToken + "\r\n\r\n",
		"POST /api/v1/halt HTTP/1.1\r\nHost: 127.0.0.1:" + s.port + "\r\nContent-Type: application/json\r\nAuthorization: Bearer " + secToken + "\r\nContent-Length: 2\r\n\r\n{}",
		"POST /login HTTP/1.1\r\nHost: 127.0.0.1:" + s.port + "\r\nContent-Type: application/json\r\nAuthorization: Bearer " + secToken + "\r\nContent-Length: 2\r\n\r\n{}",
	} {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+s.port, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, raw)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			c.Close()
			t.Fatalf("%q: %v", raw[:20], err)
		}
		b, _ := io.ReadAll(resp.Body)
		c.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "HTTP request to an HTTPS server") || len(resp.Header.Values("Set-Cookie")) != 0 {
			t.Errorf("%s over plain HTTP: %d %v %q", strings.SplitN(raw, " ", 3)[1], resp.StatusCode, resp.Header, b)
		}
		for _, leak := range []string{"actuators", "halted", "saga-session"} {
			if strings.Contains(string(b), leak) {
				t.Errorf("plain HTTP got %s: %q", leak, b)
			}
		}
	}
	if s.halted(t) {
		t.Fatal("a plain-HTTP halt halted")
	}
}

// caseNoTLSRefused: a config with HTTP beyond loopback and no TLS (or TLS
// with the login off) is refused by check-config and by run, which exits
// before listening.
func caseNoTLSRefused(t *testing.T, s *loginSecure) {
	dir := t.TempDir()
	port := fmt.Sprint(testtool.FreePort(t))
	text, err := os.ReadFile(s.d.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	base := strings.NewReplacer("0.0.0.0:"+s.port, "0.0.0.0:"+port, filepath.Dir(s.d.cfgPath), dir).Replace(string(text))
	os.WriteFile(filepath.Join(dir, "operator-token"), []byte(secToken+"\n"), 0o600)
	for what, cfg := range map[string]string{
		"no TLS": strings.NewReplacer("    self_signed: true", "    self_signed: false", "    cert_file: "+filepath.Join(dir, "http", "tls.crt"), `    cert_file: ""`,
			"    key_file: "+filepath.Join(dir, "http", "tls.key"), `    key_file: ""`).Replace(base),
		"login: false": strings.Replace(base, "  # login: true", "  login: false", 1),
	} {
		path := filepath.Join(dir, "bad.yaml")
		os.WriteFile(path, []byte(cfg), 0o600)
		want := "needs TLS and a login"
		if what == "login: false" {
			want = "http.login: off on 0.0.0.0:" + port
		}
		out, code := run(t, "check-config", path)
		if code != 1 || !strings.Contains(out, want) {
			t.Errorf("check-config, %s: exit %d\n%s", what, code, out)
		}
		// A daemon that starts anyway is stopped after 20 s (and fails).
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, binary, "run", "--config", path)
		cmd.Dir = dir
		b, err := cmd.CombinedOutput()
		started := ctx.Err() != nil // it ran until it was stopped
		cancel()
		if err == nil || started || !strings.Contains(string(b), want) {
			t.Errorf("run, %s: %v (ran until stopped: %v)\n%s", what, err, started, lastBytes(string(b), 2048))
		}
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second); err == nil {
			c.Close()
			t.Errorf("run, %s: something listens on %s", what, port)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "journal")); err == nil {
		t.Error("a refused run opened a journal")
	}
}

// caseLoginBruteForce: guessing from one host — logins and bearer reads —
// is 401 five times, then 429 with Retry-After for every login and token,
// the right one included, with no cookie; a halt is never limited: a
// wrong token on it is 401 (nothing halted), the right one halts, and
// the operator's session from before resets.
func caseLoginBruteForce(t *testing.T, s *loginSecure) {
	hc := s.client("127.0.0.2")
	op := s.login(t, hc, secToken) // before the guessing
	limited := 0
	for i := range 7 {
		code, hdr, body := s.req(t, hc, "POST", "/login", nil, "{}", "Authorization", fmt.Sprintf("Bearer guess-%02d-0123456789abcdef0123456789", i))
		switch {
		case code == http.StatusUnauthorized && limited == 0:
			refusedLogin(t, fmt.Sprintf("guess %d", i), code, hdr, body, http.StatusUnauthorized, api.CodeUnauthorized)
		case code == http.StatusTooManyRequests:
			if limited == 0 {
				limited = i + 1
			}
			refusedLogin(t, fmt.Sprintf("guess %d", i), code, hdr, body, http.StatusTooManyRequests, api.CodeTooManyAttempts)
			if hdr.Get("Retry-After") == "" {
				t.Errorf("429 without Retry-After")
			}
		default:
			t.Errorf("guess %d: %d %s", i, code, body)
		}
	}
	if limited != 6 {
		t.Fatalf("the first 429 came at guess %d (0: never), want 6", limited)
	}
	code, hdr, body := s.req(t, hc, "POST", "/login", nil, "{}", "Authorization", "Bearer "+secToken)
	refusedLogin(t, "the right token while limited", code, hdr, body, http.StatusTooManyRequests, api.CodeTooManyAttempts)
	code, hdr, body = s.req(t, hc, "GET", "/api/v1/status", nil, "", "Authorization", "Bearer "+secToken)
	refusedLogin(t, "a read with the right token while limited", code, hdr, body, http.StatusTooManyRequests, api.CodeTooManyAttempts)
	code, hdr, body = s.req(t, hc, "POST", "/api/v1/halt", nil, "{}", "Authorization", "Bearer guess-halt-0123456789abcdef0123456789")
	refusedLogin(t, "a halt with a wrong token while limited", code, hdr, body, http.StatusUnauthorized, api.CodeUnauthorized)
	if s.halted(t) {
		t.Fatal("a wrong token halted")
	}
	// The session from before still reads; a halt is never limited.
	if code, _, _ := s.req(t, hc, "GET", "/api/v1/status", []*http.Cookie{op}, ""); code != http.StatusOK {
		t.Errorf("the session from before the guessing: %d", code)
	}
	s.halt(t, hc, nil, "Bearer "+secToken)
	if code, _, body := s.req(t, hc, "POST", "/api/v1/reset", []*http.Cookie{op}, "{}"); code != http.StatusOK {
		t.Errorf("the operator's session resets while its host is limited: %d %s", code, body)
	}
	daemontestWait(t, "ready", 10*time.Second, func() bool { return s.status(t).Ready })
}
