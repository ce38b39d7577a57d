package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/rollback"
)

// TestSecurity's rows on the HTTP listener's guard (issue 28): a web page
// the operator opens in a browser that can reach the listener — by DNS
// rebinding (its own name pointed at 127.0.0.1, so that it is same-origin
// with the supervisor) or from its own origin — reads nothing, and halts
// and resets nothing. Each refusal is coded JSON that carries no status.

// secPort is the listener's port.
func (s *secure) secPort(t *testing.T) string {
	t.Helper()
	_, port, err := net.SplitHostPort(s.d.http)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// otherPort is a port on this machine that is not the listener's.
func (s *secure) otherPort(t *testing.T) string {
	p, _ := strconv.Atoi(s.secPort(t))
	return strconv.Itoa(p%60000 + 1)
}

// request sends one request to the daemon's listener, naming host in its
// Host header; hdr's empty values remove a header. The body is read for
// at most 2 s (a stream served by mistake ends there).
func (s *secure) request(t *testing.T, method, path, host string, hdr map[string]string, body string) (int, http.Header, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+s.d.http+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, path, host, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, resp.Header, string(b)
}

// guardRefused checks a refusal of the guard: its status, a JSON body
// with its code, and nothing of the supervisor's state in it.
func guardRefused(t *testing.T, what string, code int, hdr http.Header, body string, wantStatus int, wantCode string) {
	t.Helper()
	var e struct {
		OK      bool   `json:"ok"`
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if code != wantStatus || json.Unmarshal([]byte(body), &e) != nil || e.OK || e.Code != wantCode || e.Message == "" {
		t.Errorf("%s: %d %.300s, want %d %s", what, code, body, wantStatus, wantCode)
	}
	if ct := hdr.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q, want application/json", what, ct)
	}
	for _, leak := range []string{`"actuators"`, `"commanded"`, `"halted"`, `"journal"`, "saga_", "event: status", "ready\n"} {
		if strings.Contains(body, leak) {
			t.Errorf("%s: the refusal gives away %s: %.300s", what, leak, body)
		}
	}
	for k := range hdr {
		if strings.HasPrefix(k, "Access-Control-") {
			t.Errorf("%s: CORS header %s: %s", what, k, hdr.Get(k))
		}
	}
}

// jsonPost is what a script posting to the API sends.
var jsonPost = map[string]string{"Content-Type": "application/json"}

func withHeaders(base map[string]string, kv ...string) map[string]string {
	m := map[string]string{}
	for k, v := range base {
		m[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// rebindingHosts are Host headers a page of another site can make a
// browser send to the listener: its own names (rebound to 127.0.0.1),
// an address of another interface, the loopback name on another port.
func (s *secure) rebindingHosts(t *testing.T) []string {
	port := s.secPort(t)
	return []string{"evil.example:" + port, "localhost.evil.example:" + port, "127.0.0.1.nip.io:" + port,
		"7f000001.rbndr.us:" + port, "10.0.0.5:" + port, "localhost:" + s.otherPort(t)}
}

// caseRebindingReads: every path answers a rebinding Host 421: no page,
// no status, no event stream, no metrics, no readiness.
func caseRebindingReads(t *testing.T, s *secure) {
	for _, host := range s.rebindingHosts(t) {
		for _, path := range []string{"/", "/dashboard.js", "/api/v1/status", "/api/v1/events", "/api/v1/dashboard", "/metrics", "/readyz", "/healthz"} {
			code, hdr, body := s.request(t, http.MethodGet, path, host, nil, "")
			guardRefused(t, fmt.Sprintf("GET %s, Host %s", path, host), code, hdr, body, http.StatusMisdirectedRequest, api.CodeHostNotAllowed)
		}
	}
}

// caseRebindingHalt: a rebinding page's halt — JSON, its Host and its
// matching Origin — is refused and journaled with its source; the robot is
// not halted (runCase).
func caseRebindingHalt(t *testing.T, s *secure) {
	mark := s.mark(t)
	host := "evil.example:" + s.secPort(t)
	for _, hdr := range []map[string]string{
		withHeaders(jsonPost, "Origin", "http://"+host),
		{"X-Saga-Request": "1", "Origin": "http://" + host},
	} {
		code, h, body := s.request(t, http.MethodPost, "/api/v1/halt", host, hdr, `{"reason":"rebound"}`)
		guardRefused(t, fmt.Sprintf("halt %v", hdr), code, h, body, http.StatusMisdirectedRequest, api.CodeHostNotAllowed)
		s.assertNotHalted(t)
	}
	s.waitRecords(t, mark, rollback.RecRefused, func(r jrec) bool {
		return r.Agent == "http" && r.Code == api.CodeHostNotAllowed &&
			strings.HasPrefix(r.Message, "halt: refused from 127.0.0.1:") &&
			strings.Contains(r.Message, fmt.Sprintf(`(Host %q, Origin "http://%s")`, host, host))
	}, 2)
}

// caseRebindingReset: with the right token, a rebinding page's reset
// leaves the halt latched.
func caseRebindingReset(t *testing.T, s *secure) {
	s.httpHalt(t, "security test")
	host := "evil.example:" + s.secPort(t)
	code, h, body := s.request(t, http.MethodPost, "/api/v1/reset", host,
		withHeaders(jsonPost, "Origin", "http://"+host, "Authorization", "Bearer "+secToken), "")
	guardRefused(t, "rebinding reset", code, h, body, http.StatusMisdirectedRequest, api.CodeHostNotAllowed)
	s.assertHalted(t)
	s.httpReset(t)
	s.waitReady(t)
}

// foreignOrigins are Origins of pages that are not the supervisor's.
func (s *secure) foreignOrigins(t *testing.T) []string {
	return []string{"http://evil.example", "https://evil.example", "null", "http://localhost:" + s.otherPort(t),
		"http://127.0.0.1.nip.io:" + s.secPort(t)}
}

// caseForeignOrigin: on the supervisor's own address, every request that
// may change state, from a page of another origin, is refused 403; a
// refused halt is journaled with its source.
func caseForeignOrigin(t *testing.T, s *secure) {
	mark := s.mark(t)
	origins := s.foreignOrigins(t)
	for _, o := range origins {
		for _, mp := range [][2]string{{"POST", "/api/v1/halt"}, {"POST", "/api/v1/status"}, {"PUT", "/api/v1/halt"}, {"DELETE", "/api/v1/reset"}, {"POST", "/"}} {
			code, h, body := s.request(t, mp[0], mp[1], s.d.http, withHeaders(jsonPost, "Origin", o), `{"reason":"cross-site"}`)
			guardRefused(t, fmt.Sprintf("%s %s, Origin %s", mp[0], mp[1], o), code, h, body, http.StatusForbidden, api.CodeOriginNotAllowed)
			s.assertNotHalted(t)
		}
	}
	s.waitRecords(t, mark, rollback.RecRefused, func(r jrec) bool {
		return r.Agent == "http" && r.Code == api.CodeOriginNotAllowed && strings.HasPrefix(r.Message, "halt: refused from 127.0.0.1:")
	}, len(origins))
	recs := s.records(t, mark)
	if count(recs, rollback.RecRefused, func(r jrec) bool {
		return strings.Contains(r.Message, fmt.Sprintf(`(Host %q, Origin "null")`, s.d.http))
	}) != 1 {
		t.Errorf("no refused halt naming Origin null:\n%s", formatRecs(recs, 20))
	}
}

// caseForeignOriginReset: the right token, from a page of another origin,
// leaves the halt latched.
func caseForeignOriginReset(t *testing.T, s *secure) {
	s.httpHalt(t, "security test")
	for _, o := range s.foreignOrigins(t) {
		code, h, body := s.request(t, http.MethodPost, "/api/v1/reset", s.d.http,
			withHeaders(jsonPost, "Origin", o, "Authorization", "Bearer "+secToken), "")
		guardRefused(t, "reset, Origin "+o, code, h, body, http.StatusForbidden, api.CodeOriginNotAllowed)
		s.assertHalted(t)
	}
	s.httpReset(t)
	s.waitReady(t)
}

// caseCrossSiteForms: the posts an HTML form or a no-preflight fetch of
// another site makes are refused for their Origin, before their content
// type is looked at.
func caseCrossSiteForms(t *testing.T, s *secure) {
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"} {
		for _, path := range []string{"/api/v1/halt", "/api/v1/reset"} {
			code, h, body := s.request(t, http.MethodPost, path, s.d.http, map[string]string{"Content-Type": ct, "Origin": "http://evil.example"}, "reason=csrf")
			guardRefused(t, fmt.Sprintf("%s %s", ct, path), code, h, body, http.StatusForbidden, api.CodeOriginNotAllowed)
			s.assertNotHalted(t)
		}
	}
}

// caseCORSPreflight: a preflight from another site is refused and granted
// nothing, so the browser sends neither the JSON post nor the reset.
func caseCORSPreflight(t *testing.T, s *secure) {
	for _, path := range []string{"/api/v1/halt", "/api/v1/reset", "/api/v1/status"} {
		code, h, body := s.request(t, http.MethodOptions, path, s.d.http, map[string]string{"Origin": "http://evil.example",
			"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type, authorization"}, "")
		guardRefused(t, "preflight "+path, code, h, body, http.StatusForbidden, api.CodeOriginNotAllowed)
	}
}

// caseHostless: an HTTP/1.0 request without a Host header names no site:
// refused like a foreign one.
func caseHostless(t *testing.T, s *secure) {
	for _, raw := range []string{
		"GET /api/v1/status HTTP/1.0\r\n\r\n",
		"GET /metrics HTTP/1.0\r\n\r\n",
		"POST /api/v1/halt HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
	} {
		c, err := net.DialTimeout("tcp", s.d.http, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, raw)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			c.Close()
			t.Fatalf("%q: %v", raw, err)
		}
		b, _ := io.ReadAll(resp.Body)
		c.Close()
		guardRefused(t, fmt.Sprintf("%q", strings.SplitN(raw, "\r\n", 2)[0]), resp.StatusCode, resp.Header, string(b), http.StatusMisdirectedRequest, api.CodeHostNotAllowed)
		s.assertNotHalted(t)
	}
}
