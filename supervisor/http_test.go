package supervisor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"github.com/saga-supervisor/saga-supervisor/supervisor"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

const operatorToken = "operator-token-0123456789abcdef-test"

// startSupervisor is a supervisor on the default config (the sim arm) in
// temporary directories, without MQTT: HTTP and Handle drive it.
func startSupervisor(t *testing.T, dir string, edits ...func(*config.Config)) (*supervisor.Supervisor, *supervisor.Built) {
	t.Helper()
	cfg := config.Default()
	cfg.Journal.Dir = filepath.Join(dir, "journal")
	cfg.Sim.World = filepath.Join(dir, "world")
	cfg.HTTP.ResetToken = operatorToken
	cfg.Agents.Allow = nil // agents of every name; permissions are tested on their own
	for _, edit := range edits {
		edit(cfg)
	}
	b, err := supervisor.FromConfig(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	sup, err := supervisor.New(b.Options)
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sup.Close()
		b.Close()
	})
	daemontest.WaitFor(t, "ready", 5*time.Second, func() bool { return sup.Status().Ready })
	return sup, b
}

// httpReply is what one request got back.
type httpReply struct {
	status int
	header http.Header
	body   string
}

// jsonBody decodes the reply's JSON body into a map.
func (r httpReply) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(r.body), &m); err != nil {
		t.Fatalf("reply is not JSON (%v): %q", err, r.body)
	}
	return m
}

func do(t *testing.T, srv *httptest.Server, method, path string, hdr map[string]string, body string) httpReply {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if method == http.MethodPost {
		// What every program posting to the API sends; a test of what a
		// cross-site form sends overrides it (an empty value: no header).
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return httpReply{res.StatusCode, res.Header, string(b)}
}

func bearer(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}

// The HTTP interface, as one operator session: probes, status, an e-stop,
// refused resets, a reset, and what each endpoint refuses.
func TestHTTPInterface(t *testing.T) {
	sup, _ := startSupervisor(t, t.TempDir())
	srv := httptest.NewServer(sup.HTTPHandler())
	defer srv.Close()

	big := `{"reason":"` + strings.Repeat("x", supervisor.MaxHTTPBody) + `"}`
	steps := []struct {
		name         string
		method, path string
		hdr          map[string]string
		body         string
		status       int
		code         string // the error code of a JSON refusal
		contains     []string
		check        func(t *testing.T, r httpReply)
	}{
		{name: "healthz", method: "GET", path: "/healthz", status: 200, contains: []string{"ok"}},
		{name: "readyz ready", method: "GET", path: "/readyz", status: 200, contains: []string{"ready"}},
		{name: "status", method: "GET", path: "/api/v1/status", status: 200, check: func(t *testing.T, r httpReply) {
			var st supervisor.Status
			if err := json.Unmarshal([]byte(r.body), &st); err != nil {
				t.Fatal(err)
			}
			if !st.Ready || st.Halted || len(st.Actuators) != 4 || len(st.Supplies) != 1 || st.Journal.Dir == "" {
				t.Fatalf("status %+v", st)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("content type %q", ct)
			}
		}},
		{name: "dashboard", method: "GET", path: "/", status: 200,
			contains: []string{`<script src="/dashboard.js" defer></script>`, `id="estop"`, `id="reset-form"`},
			check: func(t *testing.T, r httpReply) {
				if !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") || strings.Contains(r.body, "<script>") {
					t.Fatalf("dashboard: %q", r.header)
				}
			}},
		{name: "halt by GET", method: "GET", path: "/api/v1/halt", status: 405, code: "BAD_REQUEST", check: func(t *testing.T, r httpReply) {
			if r.header.Get("Allow") != "POST" {
				t.Fatalf("Allow %q", r.header.Get("Allow"))
			}
		}},
		{name: "status by POST", method: "POST", path: "/api/v1/status", status: 405, code: "BAD_REQUEST"},
		{name: "unknown path", method: "GET", path: "/api/v1/nothing", status: 404, code: "BAD_REQUEST"},
		{name: "reset over the body limit", method: "POST", path: "/api/v1/reset", hdr: bearer(operatorToken), body: big,
			status: 413, code: "PAYLOAD_TOO_LARGE"},
		{name: "reset token in the URL", method: "POST", path: "/api/v1/reset?token=" + operatorToken, status: 400, code: "BAD_REQUEST"},
		{name: "reset unknown body field", method: "POST", path: "/api/v1/reset", hdr: bearer(operatorToken),
			body: `{"token":"` + operatorToken + `"}`, status: 400, code: "BAD_REQUEST"},

		// The e-stop: anyone, no token. The reason is journaled and shown
		// escaped on the page.
		{name: "halt", method: "POST", path: "/api/v1/halt", body: `{"reason":"person in the cell <script>"}`, status: 200,
			check: func(t *testing.T, r httpReply) {
				m := r.json(t)
				if m["ok"] != true || m["halted"] != true || m["ready"] != false ||
					!strings.Contains(m["halt_reason"].(string), "person in the cell") {
					t.Fatalf("halt reply %v", m)
				}
			}},
		{name: "readyz halted", method: "GET", path: "/readyz", status: 503, contains: []string{"halted: http 127.0.0.1: person in the cell"}},
		{name: "dashboard halted", method: "GET", path: "/api/v1/dashboard", status: 200, check: func(t *testing.T, r httpReply) {
			var d supervisor.Dashboard
			if err := json.Unmarshal([]byte(r.body), &d); err != nil || !d.Status.Halted || d.Status.Ready ||
				!strings.Contains(d.Status.HaltWhy, "person in the cell <script>") {
				t.Fatalf("dashboard snapshot (%v): %s", err, r.body)
			}
		}},
		{name: "reset without token", method: "POST", path: "/api/v1/reset", status: 401, code: "UNAUTHORIZED",
			check: func(t *testing.T, r httpReply) {
				if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
					t.Fatalf("WWW-Authenticate %q", r.header.Get("WWW-Authenticate"))
				}
			}},
		{name: "reset wrong token", method: "POST", path: "/api/v1/reset", hdr: bearer("guess"), status: 401, code: "UNAUTHORIZED"},
		{name: "reset wrong scheme", method: "POST", path: "/api/v1/reset", hdr: map[string]string{"Authorization": "Basic " + operatorToken},
			status: 401, code: "UNAUTHORIZED"},
		{name: "still halted", method: "GET", path: "/readyz", status: 503},
		{name: "reset", method: "POST", path: "/api/v1/reset", hdr: bearer(operatorToken), body: `{"operator":"alice"}`, status: 200,
			check: func(t *testing.T, r httpReply) {
				if m := r.json(t); m["ok"] != true || m["halted"] != false || m["ready"] != true {
					t.Fatalf("reset reply %v", m)
				}
			}},
		{name: "readyz ready again", method: "GET", path: "/readyz", status: 200, contains: []string{"ready"}},

		// A halt is never refused for its body: the reason is dropped and
		// the reply says so.
		{name: "halt over the body limit", method: "POST", path: "/api/v1/halt", body: big, status: 200,
			check: func(t *testing.T, r httpReply) {
				if m := r.json(t); m["halted"] != true || !strings.Contains(m["warning"].(string), "reason ignored") {
					t.Fatalf("halt reply %v", m)
				}
			}},
		{name: "halt with a malformed body", method: "POST", path: "/api/v1/halt", body: `reason=stop`, status: 200,
			check: func(t *testing.T, r httpReply) {
				if m := r.json(t); m["halted"] != true || m["warning"] == nil {
					t.Fatalf("halt reply %v", m)
				}
			}},
		{name: "halt with no body", method: "POST", path: "/api/v1/halt", status: 200},
		{name: "reset once more", method: "POST", path: "/api/v1/reset", hdr: bearer(operatorToken), status: 200},
	}
	for _, st := range steps {
		r := do(t, srv, st.method, st.path, st.hdr, st.body)
		if r.status != st.status {
			t.Fatalf("%s: status %d, want %d: %s", st.name, r.status, st.status, r.body)
		}
		if st.code != "" {
			m := r.json(t)
			if m["ok"] != false || m["code"] != st.code || m["message"] == "" {
				t.Fatalf("%s: error reply %v, want code %s", st.name, m, st.code)
			}
		}
		for _, s := range st.contains {
			if !strings.Contains(r.body, s) {
				t.Fatalf("%s: body does not hold %q:\n%s", st.name, s, r.body)
			}
		}
		if st.check != nil {
			st.check(t, r)
		}
		if r.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("%s: Cache-Control %q", st.name, r.header.Get("Cache-Control"))
		}
	}
}

// A reset is refused 409, with the reasons, while something other than the
// halt keeps the supervisor from being ready: here a tripped battery (whose
// action, halt, latched the halt).
func TestHTTPResetRefusedWhileNotReady(t *testing.T) {
	sup, b := startSupervisor(t, t.TempDir())
	srv := httptest.NewServer(sup.HTTPHandler())
	defer srv.Close()
	battery := b.World.Supply("battery", 7.4)
	if err := battery.SetVolts(5.0); err != nil {
		t.Fatal(err)
	}
	daemontest.WaitFor(t, "the battery trip to halt", 5*time.Second, func() bool { return sup.Status().Halted })
	r := do(t, srv, "POST", "/api/v1/reset", bearer(operatorToken), "")
	if r.status != http.StatusConflict {
		t.Fatalf("reset on a tripped battery: %d %s", r.status, r.body)
	}
	m := r.json(t)
	if m["code"] != "NOT_READY" || !strings.Contains(r.body, "supply battery") {
		t.Fatalf("reset refusal %v", m)
	}
	if err := battery.SetVolts(7.4); err != nil {
		t.Fatal(err)
	}
	daemontest.WaitFor(t, "the battery to clear", 5*time.Second, func() bool {
		for _, s := range sup.Status().Supplies {
			if s.Tripped {
				return false
			}
		}
		return true
	})
	if r := do(t, srv, "POST", "/api/v1/reset", bearer(operatorToken), ""); r.status != http.StatusOK {
		t.Fatalf("reset after the battery cleared: %d %s", r.status, r.body)
	}
	if r := do(t, srv, "GET", "/readyz", nil, ""); r.status != http.StatusOK {
		t.Fatalf("readyz after reset: %d %s", r.status, r.body)
	}
}

func TestNewHTTPServerHasTimeouts(t *testing.T) {
	s := supervisor.NewHTTPServer("127.0.0.1:0", http.NotFoundHandler())
	if s.ReadHeaderTimeout <= 0 || s.ReadTimeout <= 0 || s.WriteTimeout <= 0 || s.IdleTimeout <= 0 || s.MaxHeaderBytes <= 0 {
		t.Fatalf("server without limits: %+v", s)
	}
}

// call serves one request straight from the handler, from the client
// address remote.
func call(h http.Handler, method, path, remote string, hdr http.Header, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.RemoteAddr = remote
	for k, vs := range hdr {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// errCode is the code of an error reply.
func errCode(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var m struct {
		OK      bool   `json:"ok"`
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil || m.OK || m.Message == "" {
		t.Fatalf("not a coded error reply (%v): %s", err, rec.Body)
	}
	return m.Code
}

var jsonType = http.Header{"Content-Type": {"application/json"}}

func withBearer(token string) http.Header {
	return http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer " + token}}
}

// A POST a web page on another site could make a browser send — an HTML
// form (urlencoded, multipart, text/plain) or a request without a content
// type — neither halts nor resets: 415, coded, and nothing happens.
func TestHTTPRefusesCrossSitePosts(t *testing.T) {
	sup, _ := startSupervisor(t, t.TempDir())
	h := sup.HTTPHandler()
	refused := []struct {
		name string
		hdr  http.Header
	}{
		{"form", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}},
		{"multipart form", http.Header{"Content-Type": {"multipart/form-data; boundary=xyz"}}},
		{"text/plain", http.Header{"Content-Type": {"text/plain"}}},
		{"text/plain json-looking", http.Header{"Content-Type": {"text/plain; charset=utf-8"}}},
		{"no content type", http.Header{}},
		{"json suffix type", http.Header{"Content-Type": {"application/json-seq"}}},
		{"malformed type", http.Header{"Content-Type": {"application/json;;="}}},
		{"two content types", http.Header{"Content-Type": {"text/plain", "application/json"}}},
		{"header not 1", http.Header{"X-Saga-Request": {"yes"}, "Content-Type": {"text/plain"}}},
	}
	for _, tc := range refused {
		rec := call(h, "POST", "/api/v1/halt", "192.0.2.1:4000", tc.hdr, `{"reason":"csrf"}`)
		if rec.Code != http.StatusUnsupportedMediaType || errCode(t, rec) != "BAD_REQUEST" {
			t.Errorf("halt, %s: %d %s", tc.name, rec.Code, rec.Body)
		}
		if st := sup.Status(); st.Halted {
			t.Fatalf("halt, %s: latched the halt (%s)", tc.name, st.HaltWhy)
		}
	}
	// Reset: latch a halt the proper way, then no refused reset clears it,
	// not even with the right token; nor do they count as failed resets.
	if rec := call(h, "POST", "/api/v1/halt", "192.0.2.1:4000", jsonType, ""); rec.Code != http.StatusOK {
		t.Fatalf("halt: %d %s", rec.Code, rec.Body)
	}
	for _, tc := range refused {
		hdr := tc.hdr.Clone()
		hdr.Set("Authorization", "Bearer "+operatorToken)
		rec := call(h, "POST", "/api/v1/reset", "192.0.2.1:4000", hdr, "")
		if rec.Code != http.StatusUnsupportedMediaType || errCode(t, rec) != "BAD_REQUEST" {
			t.Errorf("reset, %s: %d %s", tc.name, rec.Code, rec.Body)
		}
		if !sup.Status().Halted {
			t.Fatalf("reset, %s: cleared the halt", tc.name)
		}
	}
	if rec := call(h, "POST", "/api/v1/reset", "192.0.2.1:4000", withBearer(operatorToken), ""); rec.Code != http.StatusOK {
		t.Fatalf("reset after %d refused ones: %d %s", len(refused), rec.Code, rec.Body)
	}
}

// application/json (with parameters, in any case) or X-Saga-Request: 1
// (with any content type, or none) is accepted.
func TestHTTPAcceptsJSONOrHeader(t *testing.T) {
	sup, _ := startSupervisor(t, t.TempDir())
	h := sup.HTTPHandler()
	for _, hdr := range []http.Header{
		{"Content-Type": {"application/json"}},
		{"Content-Type": {"application/json; charset=utf-8"}},
		{"Content-Type": {"Application/JSON"}},
		{"X-Saga-Request": {"1"}},
		{"X-Saga-Request": {"1"}, "Content-Type": {"text/plain"}},
	} {
		rec := call(h, "POST", "/api/v1/halt", "192.0.2.1:4000", hdr, `{"reason":"drill"}`)
		if rec.Code != http.StatusOK || !sup.Status().Halted {
			t.Fatalf("halt with %v: %d %s", hdr, rec.Code, rec.Body)
		}
		hdr = hdr.Clone()
		hdr.Set("Authorization", "Bearer "+operatorToken)
		if rec := call(h, "POST", "/api/v1/reset", "192.0.2.1:4000", hdr, ""); rec.Code != http.StatusOK || sup.Status().Halted {
			t.Fatalf("reset with %v: %d %s", hdr, rec.Code, rec.Body)
		}
	}
}

// The token comes only as exactly "Authorization: Bearer <token>": any
// other spelling is refused 401 even when it holds the right token.
func TestHTTPBearerExact(t *testing.T) {
	sup, _ := startSupervisor(t, t.TempDir())
	h := sup.HTTPHandler()
	now := time.Unix(1_000_000, 0)
	supervisor.SetResetClock(sup, func() time.Time { return now })
	call(h, "POST", "/api/v1/halt", "192.0.2.1:4000", jsonType, "")
	for _, auth := range [][]string{
		{"bearer " + operatorToken},
		{"BEARER " + operatorToken},
		{"Basic " + operatorToken},
		{"Bearer  " + operatorToken},
		{"Bearer\t" + operatorToken},
		{"Bearer" + operatorToken},
		{" Bearer " + operatorToken},
		{"Bearer " + operatorToken + " "},
		{"Bearer " + operatorToken + ", realm=x"},
		{"Bearer " + operatorToken + " extra"},
		{"Bearer "},
		{"Bearer " + operatorToken, "Bearer " + operatorToken},
		{"Bearer " + operatorToken[:len(operatorToken)-1]},
		{"Bearer " + operatorToken + "x"},
	} {
		now = now.Add(supervisor.ResetFailWindow) // each case on a clean slate
		hdr := http.Header{"Content-Type": {"application/json"}, "Authorization": auth}
		rec := call(h, "POST", "/api/v1/reset", "192.0.2.1:4000", hdr, "")
		if rec.Code != http.StatusUnauthorized || errCode(t, rec) != "UNAUTHORIZED" || !sup.Status().Halted {
			t.Fatalf("Authorization %q: %d %s", auth, rec.Code, rec.Body)
		}
	}
	now = now.Add(supervisor.ResetFailWindow)
	if rec := call(h, "POST", "/api/v1/reset", "192.0.2.1:4000", withBearer(operatorToken), ""); rec.Code != http.StatusOK {
		t.Fatalf("Bearer <token>: %d %s", rec.Code, rec.Body)
	}
}

// TokenMatches, which HTTP and MQTT resets share, accepts the token only:
// not a prefix, an extension, another case, nor anything when no token is
// configured.
func TestTokenMatches(t *testing.T) {
	const tok = "0123456789abcdef0123456789abcdef"
	if !supervisor.TokenMatches(tok, tok) {
		t.Fatal("the token itself refused")
	}
	for _, got := range []string{"", tok[:31], tok + "0", "0123456789ABCDEF0123456789ABCDEF", tok[1:] + "0", strings.Repeat("x", 1000)} {
		if supervisor.TokenMatches(got, tok) {
			t.Errorf("%q accepted", got)
		}
	}
	if supervisor.TokenMatches("", "") || supervisor.TokenMatches("x", "") {
		t.Error("a token accepted where none is configured")
	}
	// Reset (the MQTT path) goes through it.
	sup, _ := startSupervisor(t, t.TempDir())
	sup.Halt("test", "")
	if err := sup.Reset(operatorToken[:len(operatorToken)-1], "test"); !errors.Is(err, supervisor.ErrUnauthorized) {
		t.Fatalf("reset with a prefix of the token: %v", err)
	}
	if err := sup.Reset(operatorToken, "test"); err != nil {
		t.Fatalf("reset with the token: %v", err)
	}
}

// Failed resets are limited per host and in total; while limited every
// reset is refused 429 with Retry-After, the right token included; halt is
// never limited; successes and the 429s do not count.
func TestHTTPResetRateLimit(t *testing.T) {
	sup, _ := startSupervisor(t, t.TempDir())
	h := sup.HTTPHandler()
	now := time.Unix(1_000_000, 0)
	supervisor.SetResetClock(sup, func() time.Time { return now })
	halt := func(from string) {
		t.Helper()
		if rec := call(h, "POST", "/api/v1/halt", from, jsonType, `{"reason":"limit test"}`); rec.Code != http.StatusOK || !sup.Status().Halted {
			t.Fatalf("halt from %s: %d %s", from, rec.Code, rec.Body)
		}
	}
	reset := func(from, token string) *httptest.ResponseRecorder {
		return call(h, "POST", "/api/v1/reset", from, withBearer(token), "")
	}
	limited := func(rec *httptest.ResponseRecorder, retry string) {
		t.Helper()
		if rec.Code != http.StatusTooManyRequests || errCode(t, rec) != "TOO_MANY_ATTEMPTS" || rec.Header().Get("Retry-After") != retry {
			t.Fatalf("want 429 TOO_MANY_ATTEMPTS, Retry-After %s: %d %v %s", retry, rec.Code, rec.Header(), rec.Body)
		}
		if !sup.Status().Halted {
			t.Fatal("a limited reset cleared the halt")
		}
	}
	const a, b = "192.0.2.1:4000", "192.0.2.2:4000"

	// Successful resets do not count.
	for range 2 * supervisor.ResetFailsPerHost {
		halt(a)
		if rec := reset(a, operatorToken); rec.Code != http.StatusOK {
			t.Fatalf("reset: %d %s", rec.Code, rec.Body)
		}
	}
	halt(a)
	for i := range supervisor.ResetFailsPerHost {
		if rec := reset(a, "wrong-guess"); rec.Code != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d %s", i+1, rec.Code, rec.Body)
		}
		now = now.Add(time.Second)
	}
	// Host a is limited, the right token included, until its first
	// failure is a minute old.
	limited(reset(a, operatorToken), "55")
	now = now.Add(30 * time.Second)
	limited(reset(a, "wrong-guess"), "25")
	// Halt is never limited, from the limited host either.
	halt(a)
	// Another host is not limited by a's failures.
	if rec := reset(b, operatorToken); rec.Code != http.StatusOK {
		t.Fatalf("reset from another host: %d %s", rec.Code, rec.Body)
	}
	halt(a)
	// Once the window passes, a may reset again (the 429s did not count).
	now = now.Add(25 * time.Second)
	if rec := reset(a, operatorToken); rec.Code != http.StatusOK {
		t.Fatalf("reset after the window: %d %s", rec.Code, rec.Body)
	}

	// The global limit: one failure each from many hosts.
	now = now.Add(supervisor.ResetFailWindow)
	halt(a)
	for i := range supervisor.ResetFailsTotal {
		from := fmt.Sprintf("198.51.100.%d:5000", i+1)
		if rec := reset(from, "wrong-guess"); rec.Code != http.StatusUnauthorized {
			t.Fatalf("global failure %d: %d %s", i+1, rec.Code, rec.Body)
		}
	}
	limited(reset(b, operatorToken), "60")
	halt(b)
	now = now.Add(supervisor.ResetFailWindow)
	if rec := reset(b, operatorToken); rec.Code != http.StatusOK {
		t.Fatalf("reset after the global window: %d %s", rec.Code, rec.Body)
	}
}

// With no operator token configured, every reset is refused 403
// NO_OPERATOR_TOKEN, saying which key to set, whatever the request carries;
// the halt stays latched; and the refusals are not failed guesses: they never
// turn into 429s (there is nothing to guess).
func TestHTTPResetNoOperatorToken(t *testing.T) {
	sup, _ := startSupervisor(t, t.TempDir(), func(c *config.Config) { c.HTTP.ResetToken = "" })
	h := sup.HTTPHandler()
	if rec := call(h, "POST", "/api/v1/halt", "127.0.0.1:4000", jsonType, `{"reason":"no token"}`); rec.Code != http.StatusOK {
		t.Fatalf("halt: %d %s", rec.Code, rec.Body)
	}
	for i := range 3 * supervisor.ResetFailsPerHost {
		hdr := withBearer([]string{operatorToken, "guess", ""}[i%3])
		rec := call(h, "POST", "/api/v1/reset", "127.0.0.1:4000", hdr, "")
		if rec.Code != http.StatusForbidden || errCode(t, rec) != api.CodeNoOperatorToken ||
			!strings.Contains(rec.Body.String(), "no operator token is configured") || !strings.Contains(rec.Body.String(), "http.reset_token_file") {
			t.Fatalf("reset %d: %d %s", i+1, rec.Code, rec.Body)
		}
		if !sup.Status().Halted {
			t.Fatal("a reset with no token configured cleared the halt")
		}
	}
	if err := sup.Reset("", "test"); !errors.Is(err, supervisor.ErrNoOperatorToken) {
		t.Fatalf("Reset with no token configured: %v", err)
	}
}

// The code table states the limits the code applies.
func TestResetLimitDocumented(t *testing.T) {
	info, ok := api.Lookup(api.CodeTooManyAttempts)
	if !ok {
		t.Fatal("TOO_MANY_ATTEMPTS missing from api.Codes")
	}
	for _, want := range []string{fmt.Sprintf("%d from this host", supervisor.ResetFailsPerHost),
		fmt.Sprintf("%d from all", supervisor.ResetFailsTotal), "last minute"} {
		if !strings.Contains(info.Meaning, want) {
			t.Errorf("TOO_MANY_ATTEMPTS says %q, not %q", info.Meaning, want)
		}
	}
	if supervisor.ResetFailWindow != time.Minute {
		t.Error("the window is documented as a minute")
	}
}

// Everything the daemon creates for its data is private to its user:
// ./saga-data and the directories under it 0700, the journal's segments
// and the sim world file 0600.
func TestDataFilesArePrivate(t *testing.T) {
	root := filepath.Join(t.TempDir(), "saga-data")
	cfg := config.Default()
	cfg.Journal.Dir = filepath.Join(root, "journal")
	cfg.Sim.World = filepath.Join(root, "sim", "world")
	b, err := supervisor.FromConfig(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sup, err := supervisor.New(b.Options)
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close()
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s has mode %04o, want %04o", p, info.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{cfg.Sim.World, filepath.Join(cfg.Journal.Dir, "0000000000000001.wal")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("not created: %v", err)
		}
	}
}

// A reset that reached the HTTP server on an address other machines can
// reach (http.listen beyond loopback) is refused: over plain HTTP its token
// would cross the network in clear. Halt still works there.
func TestHTTPResetOnlyOnLoopback(t *testing.T) {
	sup, _ := startSupervisor(t, t.TempDir())
	h := sup.HTTPHandler()
	post := func(path string, local net.Addr) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, path, nil)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+operatorToken)
		req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, local))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	lan := &net.TCPAddr{IP: net.ParseIP("192.168.1.5"), Port: 8080}
	if rec := post("/api/v1/halt", lan); rec.Code != http.StatusOK {
		t.Fatalf("halt over the LAN address: %d %s", rec.Code, rec.Body)
	}
	if rec := post("/api/v1/reset", lan); rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "FORBIDDEN") {
		t.Fatalf("reset over the LAN address: %d %s", rec.Code, rec.Body)
	}
	if h, _ := sup.Engine().Halted(); !h {
		t.Fatal("a refused reset cleared the halt")
	}
	if rec := post("/api/v1/reset", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}); rec.Code != http.StatusOK {
		t.Fatalf("reset on loopback: %d %s", rec.Code, rec.Body)
	}
}
