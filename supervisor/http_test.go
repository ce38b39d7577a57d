package supervisor_test

import (
	"encoding/json"
	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/supervisor"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

const operatorToken = "operator-token-0123456789abcdef-test"

// startSupervisor is a supervisor on the default config (the sim arm) in
// temporary directories, without MQTT: HTTP and Handle drive it.
func startSupervisor(t *testing.T, dir string) (*supervisor.Supervisor, *supervisor.Built) {
	t.Helper()
	cfg := config.Default()
	cfg.Journal.Dir = filepath.Join(dir, "journal")
	cfg.Sim.World = filepath.Join(dir, "world")
	cfg.HTTP.ResetToken = operatorToken
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
			contains: []string{`<meta http-equiv="refresh" content="1">`, "READY", "battery", "elbow"},
			check: func(t *testing.T, r httpReply) {
				if !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") || strings.Contains(r.body, "<script") {
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
		{name: "dashboard halted", method: "GET", path: "/", status: 200, contains: []string{"HALTED", "person in the cell &lt;script&gt;"}},
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
