package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

const guardToken = "operator-token-0123456789abcdef-test" // newTestSupervisorWith's

// guarded is the test supervisor's HTTP interface behind a guard for a
// listener on 127.0.0.1:8080 with the given allowed_hosts.
func guarded(t *testing.T, allowed ...string) (*Supervisor, http.Handler) {
	t.Helper()
	s, _ := newTestSupervisor(t)
	guardReady(t, s)
	h, err := s.GuardHTTP(s.HTTPHandler(), HTTPGuard{Listen: "127.0.0.1:8080", Bound: "127.0.0.1:8080", AllowedHosts: allowed})
	if err != nil {
		t.Fatal(err)
	}
	return s, h
}

// guardReady waits until s is ready.
func guardReady(t *testing.T, s *Supervisor) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !s.Status().Ready; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 5 s: %v", s.Status().Reasons)
		}
	}
}

// guardReq sends one request through h: Host host, header pairs kv. A
// request still served after 2 s is cancelled (a stream let through).
func guardReq(h http.Handler, method, path, host string, kv ...string) *httptest.ResponseRecorder {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, method, path, nil)
	req.Host = host
	req.RemoteAddr = "192.0.2.1:4000"
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Add(kv[i], kv[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// refusedWith checks a coded JSON refusal that gives nothing away.
func refusedWith(t *testing.T, what string, rec *httptest.ResponseRecorder, status int, code string) {
	t.Helper()
	var m struct {
		OK      bool   `json:"ok"`
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	body := rec.Body.String()
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil || rec.Code != status || m.OK || m.Code != code || m.Message == "" {
		t.Errorf("%s: %d %s, want %d %s", what, rec.Code, body, status, code)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q", what, ct)
	}
	for _, leak := range []string{"actuators", "commanded", "halted", "saga_", "ready\n"} {
		if strings.Contains(body, leak) {
			t.Errorf("%s: the refusal carries %q: %s", what, leak, body)
		}
	}
	if v := rec.Header().Get("Access-Control-Allow-Origin"); v != "" {
		t.Errorf("%s: Access-Control-Allow-Origin %q", what, v)
	}
}

// Host: the listener's own addresses, the loopback names on its port or
// none, and allowed_hosts pass; every other Host — a rebinding name, an
// address of another interface, another port, none at all — is refused
// 421 HOST_NOT_ALLOWED, whatever the path, and nothing is done.
func TestGuardHosts(t *testing.T) {
	s, h := guarded(t, "robot.local", "192.168.1.20:8080", "[fd00::1]:8080")
	for _, host := range []string{
		"127.0.0.1:8080", "localhost:8080", "[::1]:8080", "localhost", "127.0.0.1", "[::1]",
		"LOCALHOST:8080", "LocalHost", "localhost.:8080", "127.0.0.1.:8080", "[0:0:0:0:0:0:0:1]:8080",
		"robot.local", "robot.local:8080", "Robot.Local.:9000", "192.168.1.20:8080", "[FD00::1]:8080",
	} {
		if rec := guardReq(h, "GET", "/api/v1/status", host); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"actuators"`) {
			t.Errorf("Host %q: %d %.200s, want 200 and the status", host, rec.Code, rec.Body)
		}
	}
	refused := []string{
		// DNS rebinding: the attacker's own names, pointed at this address.
		"evil.example:8080", "evil.example", "localhost.evil.example:8080", "127.0.0.1.nip.io:8080",
		"7f000001.c0a80114.rbndr.us:8080", "robot.local.evil.example", "localhost8080",
		// An address of another interface, or another loopback address.
		"10.0.0.5:8080", "192.168.1.20", "192.168.1.20:9000", "127.0.0.2:8080", "[::2]:8080", "[fd00::1]", "0.0.0.0:8080",
		// The loopback names on another port.
		"localhost:9000", "127.0.0.1:80", "[::1]:9000",
		// Spellings that are no name, or a second spelling of one.
		"", "localhost:8080:8080", "localhost:08080", "[::1%lo]:8080", "::1", "0x7f.0.0.1:8080", "2130706433:8080",
		"127.1:8080", "localhost..:8080", "local_host:8080", "localhost:8080/", "user@localhost:8080",
	}
	for _, host := range refused {
		refusedWith(t, fmt.Sprintf("GET /api/v1/status, Host %q", host), guardReq(h, "GET", "/api/v1/status", host), http.StatusMisdirectedRequest, api.CodeHostNotAllowed)
	}
	for _, p := range []string{"/", "/dashboard.js", "/api/v1/events", "/api/v1/dashboard", "/metrics", "/readyz", "/healthz",
		"/api/v1/guarantees", "/no/such/path"} {
		for _, m := range []string{"GET", "HEAD"} {
			rec := guardReq(h, m, p, "evil.example:8080")
			if rec.Code != http.StatusMisdirectedRequest {
				t.Errorf("%s %s with a rebinding Host: %d, want 421", m, p, rec.Code)
			}
		}
	}
	// A halt and a reset with a rebinding Host and its matching Origin:
	// refused, the robot not halted, then (halted) not reset.
	rebound := []string{"Origin", "http://evil.example:8080"}
	refusedWith(t, "rebinding halt", guardReq(h, "POST", "/api/v1/halt", "evil.example:8080", rebound...), http.StatusMisdirectedRequest, api.CodeHostNotAllowed)
	if halted, why := s.engine.Halted(); halted {
		t.Fatalf("halted by a refused halt: %s", why)
	}
	s.Halt("test", "latched")
	refusedWith(t, "rebinding reset", guardReq(h, "POST", "/api/v1/reset", "evil.example:8080", append(rebound, "Authorization", "Bearer "+guardToken)...),
		http.StatusMisdirectedRequest, api.CodeHostNotAllowed)
	if halted, _ := s.engine.Halted(); !halted {
		t.Fatal("a refused reset cleared the halt")
	}
	// An absolute request URI names the host too, over the Host header.
	req := httptest.NewRequest("GET", "http://evil.example:8080/api/v1/status", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if req.Host != "evil.example:8080" || rec.Code != http.StatusMisdirectedRequest {
		t.Errorf("absolute URI: Host %q, %d", req.Host, rec.Code)
	}

	want := len(refused) + 9*2 + 3
	if got := guardMetric(t, h, "host"); got != want {
		t.Errorf(`saga_http_refused_total{reason="host"} = %d, want %d`, got, want)
	}
	recs := httpRefusals(t, s)
	var journaled []string
	for _, r := range recs {
		if r.Agent == "http" && r.Code == api.CodeHostNotAllowed {
			journaled = append(journaled, r.Message)
		}
	}
	if len(journaled) != 2 || !strings.HasPrefix(journaled[0], `halt: refused from 192.0.2.1:4000 (Host "evil.example:8080", Origin "http://evil.example:8080")`) ||
		!strings.HasPrefix(journaled[1], `reset: refused from 192.0.2.1:4000`) {
		t.Errorf("journaled HOST_NOT_ALLOWED refusals: %q, want the halt's and the reset's", journaled)
	}
}

// httpRefusals are the journal's REFUSED records of agent "http". The
// journal is read while the supervisor writes it (a halt being applied):
// a read that meets a batch half written is read again.
func httpRefusals(t *testing.T, s *Supervisor) []rollback.Record {
	t.Helper()
	var err error
	for range 100 {
		if err = s.journal.Sync(); err != nil {
			t.Fatal(err)
		}
		var out []rollback.Record
		err = wal.Scan(s.journal.Dir(), wal.Options{}, 1, func(wr wal.Record) error {
			rec, err := rollback.DecodeRecord(wr.Type, wr.Payload)
			if err == nil && rec.Type == rollback.RecRefused && rec.Agent == httpAgent {
				out = append(out, rec)
			}
			return err
		})
		if err == nil {
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("reading the journal: %v", err)
	return nil
}

// guardMetric reads saga_http_refused_total{reason=...} off /metrics.
func guardMetric(t *testing.T, h http.Handler, reason string) int {
	t.Helper()
	rec := guardReq(h, "GET", "/metrics", "127.0.0.1:8080")
	m := regexp.MustCompile(`(?m)^saga_http_refused_total\{reason="` + reason + `"\} (\d+)$`).FindStringSubmatch(rec.Body.String())
	if m == nil {
		t.Fatalf("no saga_http_refused_total{reason=%q} in /metrics", reason)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// Origin: a request that may change state passes with no Origin (ctl,
// curl) or one of the supervisor's own, http or https; any other — a site,
// null, another port, a malformed one, two — is refused 403
// ORIGIN_NOT_ALLOWED, journaled with its source, and changes nothing.
// GET and HEAD are not checked (a browser lets no other origin read the
// reply: nothing grants CORS).
func TestGuardOrigins(t *testing.T) {
	s, h := guarded(t, "robot.local", "192.168.1.20:8080")
	const host = "127.0.0.1:8080"
	for _, origin := range []string{
		"", "http://127.0.0.1:8080", "http://localhost:8080", "https://localhost:8080", "http://[::1]:8080",
		"http://localhost", "http://LOCALHOST:8080", "http://localhost.:8080", "http://robot.local", "https://robot.local:9443",
		"http://192.168.1.20:8080",
	} {
		var kv []string
		if origin != "" {
			kv = []string{"Origin", origin}
		}
		if rec := guardReq(h, "POST", "/api/v1/halt", host, kv...); rec.Code != http.StatusOK {
			t.Errorf("halt with Origin %q: %d %s, want 200", origin, rec.Code, rec.Body)
		}
		if halted, _ := s.engine.Halted(); !halted {
			t.Fatalf("halt with Origin %q did not latch", origin)
		}
		rec := guardReq(h, "POST", "/api/v1/reset", host, append(kv, "Authorization", "Bearer "+guardToken)...)
		if rec.Code != http.StatusOK {
			t.Fatalf("reset with Origin %q: %d %s, want 200", origin, rec.Code, rec.Body)
		}
		guardReady(t, s)
	}
	// The refusal budget's clock stands still: exactly its burst is
	// journaled one by one, the rest in aggregate.
	s.refusals.mu.Lock()
	at := time.Now()
	s.refusals.now = func() time.Time { return at }
	s.refusals.mu.Unlock()
	foreign := []string{
		"null", "http://evil.example:8080", "http://evil.example", "https://evil.example", "http://localhost.evil.example:8080",
		"http://localhost:9000", "https://127.0.0.1:9443", "http://[::1]:9000", "http://10.0.0.5:8080", "http://192.168.1.20:9000",
		"http://127.0.0.1:8080/", "http://127.0.0.1:8080/api", "http://user@127.0.0.1:8080", "ftp://127.0.0.1:8080",
		"127.0.0.1:8080", "", "HTTP://127.0.0.1:8080", "file://", "chrome-extension://abcdef", "http://",
	}
	for _, origin := range foreign {
		refusedWith(t, fmt.Sprintf("halt with Origin %q", origin), guardReq(h, "POST", "/api/v1/halt", host, "Origin", origin), http.StatusForbidden, api.CodeOriginNotAllowed)
		if halted, why := s.engine.Halted(); halted {
			t.Fatalf("halted by Origin %q: %s", origin, why)
		}
	}
	// Two Origins, even one of them ours: which one the page is, is unclear.
	refusedWith(t, "two Origins", guardReq(h, "POST", "/api/v1/halt", host, "Origin", "http://127.0.0.1:8080", "Origin", "http://evil.example"),
		http.StatusForbidden, api.CodeOriginNotAllowed)
	// A form post and a text/plain post from a page of another site.
	for _, ct := range []string{"application/x-www-form-urlencoded", "text/plain", "multipart/form-data; boundary=x"} {
		req := httptest.NewRequest("POST", "/api/v1/halt", strings.NewReader("reason=csrf"))
		req.Host, req.RemoteAddr = host, "192.0.2.1:4000"
		req.Header.Set("Content-Type", ct)
		req.Header.Set("Origin", "http://evil.example")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		refusedWith(t, "cross-site "+ct+" halt", rec, http.StatusForbidden, api.CodeOriginNotAllowed)
	}
	// Every other method, on every path: refused before the API sees it.
	for _, mp := range [][2]string{{"PUT", "/api/v1/halt"}, {"DELETE", "/api/v1/reset"}, {"PATCH", "/api/v1/status"}, {"POST", "/api/v1/status"}, {"POST", "/"}} {
		refusedWith(t, mp[0]+" "+mp[1], guardReq(h, mp[0], mp[1], host, "Origin", "http://evil.example"), http.StatusForbidden, api.CodeOriginNotAllowed)
	}
	// A CORS preflight from another site is refused, and granted nothing;
	// one without Origin reaches the API, which grants nothing either.
	pre := guardReq(h, "OPTIONS", "/api/v1/halt", host, "Origin", "http://evil.example", "Access-Control-Request-Method", "POST",
		"Access-Control-Request-Headers", "content-type")
	refusedWith(t, "preflight", pre, http.StatusForbidden, api.CodeOriginNotAllowed)
	if rec := guardReq(h, "OPTIONS", "/api/v1/halt", host); rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("OPTIONS without Origin: %d %v", rec.Code, rec.Header())
	}
	// GET is not checked, and grants no other origin the reply.
	if rec := guardReq(h, "GET", "/api/v1/status", host, "Origin", "http://evil.example"); rec.Code != http.StatusOK || rec.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("GET with a foreign Origin: %d %v", rec.Code, rec.Header())
	}
	// A reset from another site while halted: refused, still halted.
	s.Halt("test", "latched")
	refusedWith(t, "foreign reset", guardReq(h, "POST", "/api/v1/reset", host, "Origin", "http://evil.example", "Authorization", "Bearer "+guardToken),
		http.StatusForbidden, api.CodeOriginNotAllowed)
	if halted, _ := s.engine.Halted(); !halted {
		t.Fatal("a reset from another site cleared the halt")
	}

	halts := len(foreign) + 1 + 3
	if got, want := guardMetric(t, h, "origin"), halts+5+1+1; got != want {
		t.Errorf(`saga_http_refused_total{reason="origin"} = %d, want %d`, got, want)
	}
	// Within the refusal budget every refused halt and reset has a record
	// of its own, naming where it came from.
	var msgs []string
	for _, r := range httpRefusals(t, s) {
		if r.Agent == "http" && r.Code == api.CodeOriginNotAllowed {
			msgs = append(msgs, r.Message)
		}
	}
	if len(msgs) != refusalBurst {
		t.Fatalf("%d ORIGIN_NOT_ALLOWED records, want the budget's %d", len(msgs), refusalBurst)
	}
	if want := `halt: refused from 192.0.2.1:4000 (Host "127.0.0.1:8080", Origin "null"): Origin null`; !strings.HasPrefix(msgs[0], want) {
		t.Errorf("first record %q, want %q...", msgs[0], want)
	}
	if want := `(Host "127.0.0.1:8080", Origin "http://evil.example:8080")`; !strings.Contains(msgs[1], want) {
		t.Errorf("second record %q lacks %q", msgs[1], want)
	}
	// Past the budget, in aggregate: the reset among them.
	FlushLanes(s)
	var agg []string
	for _, r := range httpRefusals(t, s) {
		if r.Agent == "http" && strings.Contains(r.Message, "beyond the refusals journaled one by one") {
			agg = append(agg, r.Code+" "+r.Message)
		}
	}
	if len(agg) != 2 || !strings.Contains(agg[0], fmt.Sprintf("%d halt requests refused with ORIGIN_NOT_ALLOWED", halts-refusalBurst)) || !strings.Contains(agg[1], "1 reset requests refused with ORIGIN_NOT_ALLOWED") {
		t.Errorf("aggregate records %q", agg)
	}
}

// A flood of refused halts from another site neither delays nor drops a
// halt that passes: each refusal is decided on headers alone.
func TestGuardedHaltUnderFlood(t *testing.T) {
	s, h := guarded(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	flood := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if rec := guardReq(h, "POST", "/api/v1/halt", "127.0.0.1:8080", "Origin", "http://evil.example"); rec.Code != http.StatusForbidden {
					t.Errorf("flood halt: %d", rec.Code)
					return
				}
				mu.Lock()
				flood++
				mu.Unlock()
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	if halted, _ := s.engine.Halted(); halted {
		t.Fatal("halted by the flood")
	}
	began := time.Now()
	rec := guardReq(h, "POST", "/api/v1/halt", "127.0.0.1:8080", "Origin", "http://127.0.0.1:8080")
	latched, _ := s.engine.Halted()
	took := time.Since(began)
	close(stop)
	wg.Wait()
	if rec.Code != http.StatusOK || !latched {
		t.Fatalf("the operator's halt during the flood: %d %s, latched %v", rec.Code, rec.Body, latched)
	}
	t.Logf("the halt latched in %v among %d refused ones", took, flood)
	if took > time.Second {
		t.Errorf("the halt took %v during the flood", took)
	}
}

// The listener's own address counts as its own whatever it is; port 0
// takes the bound port; a listener on port 80 is named without one.
func TestGuardListenerAddresses(t *testing.T) {
	s, _ := newTestSupervisor(t)
	for _, tc := range []struct {
		listen, bound string
		allow, refuse []string
	}{
		{"0.0.0.0:8080", "0.0.0.0:8080", []string{"0.0.0.0:8080", "localhost:8080"}, []string{"192.168.1.5:8080", "robot:8080"}},
		{":8080", "[::]:8080", []string{"[::]:8080", "127.0.0.1:8080"}, []string{"192.168.1.5:8080", ":8080"}},
		{"127.0.0.1:0", "127.0.0.1:43210", []string{"127.0.0.1:43210", "localhost:43210", "localhost"}, []string{"127.0.0.1:0", "127.0.0.1:8080"}},
		{"Robot.Lan:80", "192.168.1.5:80", []string{"robot.lan", "robot.lan:80", "192.168.1.5", "192.168.1.5:80", "localhost:80"}, []string{"robot.lan:8080", "lan"}},
		{"[::1]:8080", "[::1]:8080", []string{"[::1]:8080", "localhost:8080"}, []string{"[::1]:80"}},
	} {
		h, err := s.GuardHTTP(http.NotFoundHandler(), HTTPGuard{Listen: tc.listen, Bound: tc.bound})
		if err != nil {
			t.Fatalf("%s: %v", tc.listen, err)
		}
		for _, host := range tc.allow {
			if rec := guardReq(h, "GET", "/", host); rec.Code != http.StatusNotFound {
				t.Errorf("listen %s: Host %q refused: %d", tc.listen, host, rec.Code)
			}
		}
		for _, host := range tc.refuse {
			if rec := guardReq(h, "GET", "/", host); rec.Code != http.StatusMisdirectedRequest {
				t.Errorf("listen %s: Host %q: %d, want 421", tc.listen, host, rec.Code)
			}
		}
	}
	for _, g := range []HTTPGuard{
		{Listen: "127.0.0.1:0", Bound: "127.0.0.1:0"},
		{Listen: "127.0.0.1:8080", Bound: ""},
		{Listen: "127.0.0.1:8080", Bound: "127.0.0.1:8080", AllowedHosts: []string{"http://robot.local"}},
	} {
		if _, err := s.GuardHTTP(http.NotFoundHandler(), g); err == nil {
			t.Errorf("GuardHTTP(%+v) accepted", g)
		}
	}
}
