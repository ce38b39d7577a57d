package ctl

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/client"
	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/supervisor"
)

func opStatus(ctx context.Context, opt client.Options, out *output) error {
	opt.NoLease = true
	c, err := client.Dial(ctx, opt)
	if err != nil {
		return out.fail("status", err)
	}
	defer c.Close(context.Background())
	raw, err := c.Status(ctx)
	if err != nil {
		return out.fail("status", err)
	}
	if out.json {
		// The status carries the halt itself: "halted", "halt_reason".
		fmt.Fprintf(out.w, "%s\n", raw)
		return nil
	}
	var st supervisor.Status
	if err := json.Unmarshal(raw, &st); err != nil {
		return cli.Exit(1, "status: cannot read the supervisor's status %s: %v", raw, err)
	}
	if st.Halted {
		out.warnHalt(st.HaltWhy)
	}
	writeStatus(out.w, &st)
	return nil
}

func writeStatus(w io.Writer, st *supervisor.Status) {
	if st.Ready {
		fmt.Fprintln(w, "ready:      yes")
	} else {
		fmt.Fprintf(w, "ready:      NO — %s\n", strings.Join(st.Reasons, "; "))
	}
	if st.Halted {
		fmt.Fprintf(w, "halted:     YES — %s\n", st.HaltWhy)
	} else {
		fmt.Fprintln(w, "halted:     no")
	}
	for _, z := range st.Zones {
		if z.Halted {
			fmt.Fprintf(w, "zone:       %-10s HALTED — %s (%s)", z.Name, z.HaltWhy, strings.Join(z.Actuators, ", "))
			if len(z.Held) > 0 {
				fmt.Fprintf(w, "; reset held: %s", strings.Join(z.Held, "; "))
			}
			fmt.Fprintln(w)
		} else {
			fmt.Fprintf(w, "zone:       %-10s serving (%s)\n", z.Name, strings.Join(z.Actuators, ", "))
		}
	}
	j := st.Journal
	fmt.Fprintf(w, "journal:    %s, last seq %d, durable %d", j.Dir, j.LastSeq, j.Durable)
	if j.Error != "" {
		fmt.Fprintf(w, ", FAILED: %s", j.Error)
	}
	fmt.Fprintln(w)
	for _, s := range st.Supplies {
		state := "ok"
		switch {
		case !s.Known:
			state = "unknown"
		case s.Tripped:
			state = "TRIPPED " + s.Code
		case s.Stale:
			state = "stale"
		case s.Code != "":
			state = s.Code
		}
		fmt.Fprintf(w, "supply:     %-10s %6.2f V  %s (on trip: %s)\n", s.Name, s.Volts, state, s.Action)
	}
	for _, a := range st.Actuators {
		fmt.Fprintf(w, "actuator:   %-10s %-8s commanded %g", a.Name, a.Kind, a.Commanded)
		if a.ReadBack != nil {
			fmt.Fprintf(w, ", reads %g", *a.ReadBack)
		}
		if a.NotDriven {
			fmt.Fprint(w, ", not driven (no command since start, or detached: no fault)")
		}
		if a.Error != "" {
			fmt.Fprintf(w, ", ERROR: %s", a.Error)
		}
		switch n := a.ApprovalsRequired; {
		case n == 1:
			fmt.Fprint(w, ", moves only with an operator's approval")
		case n > 1:
			fmt.Fprintf(w, ", moves only with %d operators' approvals (distinct keys)", n)
		}
		fmt.Fprintln(w)
	}
	if len(st.Leases) == 0 {
		fmt.Fprintln(w, "leases:     none")
	}
	for _, l := range st.Leases {
		fmt.Fprintf(w, "lease:      %-10s ttl %dms, expires in %.2fs\n", l.Agent, l.TTLMS, l.ExpiresIn)
	}
	writeBarriers(w, st.Drain, st.Quarantined)
	if len(st.OpenSagas) == 0 {
		fmt.Fprintln(w, "open sagas: none")
	} else {
		ids := make([]string, len(st.OpenSagas))
		for i, id := range st.OpenSagas {
			ids[i] = strconv.FormatUint(id, 10)
		}
		fmt.Fprintf(w, "open sagas: %s\n", strings.Join(ids, ", "))
	}
}

// Texts of an op that succeeded (with --json: {"ok":true,"op":...}).
const (
	haltedText = "halted: every actuator is at its safe policy and every command is refused until an operator resets"
	resetText  = "reset: the halt is cleared; controllers must hello again and begin new sagas"
	// A zone's halt and reset (--zone).
	zoneHaltedText = "halted zone %s: its actuators are at their safe policy and steps on them are refused until an operator resets the zone; the other zones keep serving"
	zoneResetText  = "reset zone %s: its halt is cleared; sagas on it begin again"
)

// withoutLease dials without taking a lease, runs op's call, and prints
// done when it succeeds. notice: warn first if the supervisor is halted.
func withoutLease(ctx context.Context, opt client.Options, out *output, op, done string, notice bool, call func(*client.Client) error) error {
	opt.NoLease = true
	c, err := client.Dial(ctx, opt)
	if err != nil {
		return out.fail(op, err)
	}
	defer c.Close(context.Background())
	if notice {
		noticeHaltRetained(ctx, c, opt, out)
	}
	if err := call(c); err != nil {
		return out.fail(op, err)
	}
	out.done(op, done)
	return nil
}

func opHalt(ctx context.Context, opt client.Options, out *output, reason, zone string) error {
	if zone != "" {
		return withoutLease(ctx, opt, out, "halt", fmt.Sprintf(zoneHaltedText, zone), false, func(c *client.Client) error { return c.HaltZone(ctx, zone, reason) })
	}
	return withoutLease(ctx, opt, out, "halt", haltedText, false, func(c *client.Client) error { return c.Halt(ctx, reason) })
}

func opReset(ctx context.Context, opt client.Options, out *output, token, zone string) error {
	if zone != "" {
		return withoutLease(ctx, opt, out, "reset", fmt.Sprintf(zoneResetText, zone), false, func(c *client.Client) error { return c.ResetZone(ctx, token, zone) })
	}
	return withoutLease(ctx, opt, out, "reset", resetText, true, func(c *client.Client) error { return c.Reset(ctx, token) })
}

func opHello(ctx context.Context, opt client.Options, out *output) error {
	c, err := client.Dial(ctx, opt)
	if err != nil {
		out.noticeHaltRefusal(err)
		return out.fail("hello", err)
	}
	l, _ := c.Lease()
	cctx, cancel := cleanupCtx(opt)
	defer cancel()
	if err := c.Close(cctx); err != nil {
		return out.fail("bye", err)
	}
	if out.json {
		out.printJSON(out.withHalt(map[string]any{"ok": true, "op": "hello", "agent": opt.Agent, "lease": l.ID, "epoch": l.Epoch,
			"ttl_ms": l.TTL.Milliseconds(), "heartbeat_ms": l.Heartbeat.Milliseconds()}))
	} else {
		fmt.Fprintf(out.w, "hello: agent %s got lease %s, epoch %d, ttl %v (heartbeat every %v)\n", opt.Agent, l.ID, l.Epoch, l.TTL, l.Heartbeat)
		fmt.Fprintln(out.w, "bye: lease ended")
	}
	return nil
}

// opResetHTTP resets over the supervisor's HTTP API, as an operator does:
// the token goes as a bearer token, never through the broker.
func opResetHTTP(ctx context.Context, hc *http.Client, base string, timeout time.Duration, out *output, token, zone string) error {
	reqBody := `{"operator":"ctl"}`
	done := resetText
	if zone != "" {
		b, _ := json.Marshal(map[string]string{"operator": "ctl", "zone": zone})
		reqBody, done = string(b), fmt.Sprintf(zoneResetText, zone)
	} else {
		noticeHaltHTTP(ctx, hc, base, timeout, out, token)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(base, "/")+"/api/v1/reset", strings.NewReader(reqBody))
	if err != nil {
		return usageErr(fmt.Errorf("--http: %w", err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := hc.Do(req)
	if err != nil {
		return out.fail("reset", err)
	}
	defer res.Body.Close()
	var body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	json.NewDecoder(io.LimitReader(res.Body, 64<<10)).Decode(&body)
	if res.StatusCode != http.StatusOK {
		if body.Code == "" {
			body.Code, body.Message = api.CodeInternal, res.Status
		}
		return out.fail("reset", &client.Error{Op: "reset", Code: body.Code, Message: body.Message})
	}
	out.done("reset", done)
	return nil
}

// httpClient is the client a reset over HTTP uses: with certFile, one
// that trusts exactly the certificate in it (the first of the file) on an
// https:// address — the supervisor's own, self-signed or not, reached by
// whatever name (ctl dials 127.0.0.1) — and no other; without, the
// default (plain HTTP, or the system's CAs).
func httpClient(certFile string) (*http.Client, error) {
	if certFile == "" {
		return http.DefaultClient, nil
	}
	b, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("--http-cert: the supervisor's certificate: %w (ctl reset runs as the supervisor's user, e.g. sudo -u saga, or give --http-cert FILE)", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("--http-cert %s: no PEM certificate in it", certFile)
	}
	want := blk.Bytes
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // replaced by the pin below, not skipped
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || !bytes.Equal(raw[0], want) {
				return fmt.Errorf("the supervisor's certificate is not the one in %s", certFile)
			}
			return nil
		},
	}}}, nil
}
