package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/client"
	"github.com/saga-supervisor/saga-supervisor/supervisor"
)

// barrierReply is the supervisor's answer to drain, undrain, quarantine
// and release.
type barrierReply struct {
	OK          bool                        `json:"ok"`
	Code        string                      `json:"code"`
	Message     string                      `json:"message"`
	Drain       *supervisor.DrainJSON       `json:"drain"`
	Quarantined []supervisor.QuarantineJSON `json:"quarantined"`
	Already     bool                        `json:"already"`
}

// opOperatorHTTP sends one of the operator's drain and quarantine ops over
// the supervisor's HTTP API with the operator token, as reset does, and
// prints the drain and quarantined agents that follow.
func opOperatorHTTP(ctx context.Context, hc *http.Client, base string, timeout time.Duration, out *output, token, op string, body map[string]any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body["operator"] = "ctl"
	b, err := json.Marshal(body)
	if err != nil {
		return usageErr(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(base, "/")+"/api/v1/"+op, strings.NewReader(string(b)))
	if err != nil {
		return usageErr(fmt.Errorf("--http: %w", err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := hc.Do(req)
	if err != nil {
		return out.fail(op, err)
	}
	defer res.Body.Close()
	var rep barrierReply
	json.NewDecoder(io.LimitReader(res.Body, 256<<10)).Decode(&rep)
	if res.StatusCode != http.StatusOK || !rep.OK {
		if rep.Code == "" {
			rep.Code, rep.Message = api.CodeInternal, res.Status
		}
		return out.fail(op, &client.Error{Op: op, Code: rep.Code, Message: rep.Message})
	}
	if out.json {
		out.printJSON(map[string]any{"ok": true, "op": op, "drain": rep.Drain, "quarantined": rep.Quarantined, "already": rep.Already})
		return nil
	}
	switch op {
	case "drain":
		fmt.Fprintln(out.w, "drain: new sagas are refused (DRAINING) until `saga-supervisor ctl undrain`")
	case "undrain":
		fmt.Fprintln(out.w, "undrain: the drain is ended; new sagas are admitted")
	case "quarantine":
		if rep.Already {
			fmt.Fprintf(out.w, "quarantine: %s was quarantined already\n", body["agent"])
		} else {
			fmt.Fprintf(out.w, "quarantine: %s is barred: its lease ended, its sagas were unwound, its requests are refused (QUARANTINED) until `saga-supervisor ctl release %s`\n", body["agent"], body["agent"])
		}
	case "release":
		fmt.Fprintf(out.w, "release: %s may act again (hello first)\n", body["agent"])
	}
	writeBarriers(out.w, rep.Drain, rep.Quarantined)
	return nil
}

// writeBarriers prints the drain in force and the quarantined agents.
func writeBarriers(w io.Writer, d *supervisor.DrainJSON, qs []supervisor.QuarantineJSON) {
	switch {
	case d == nil:
		fmt.Fprintln(w, "drain:      none")
	case d.Recovered:
		fmt.Fprintf(w, "drain:      IN FORCE since %s (before the last restart: its open sagas were unwound then) — %s\n",
			d.Since.Local().Format(time.DateTime), d.Why)
	default:
		left := time.Until(d.Deadline).Round(time.Second)
		when := "open sagas unwound in " + left.String()
		if left <= 0 {
			when = "its deadline has passed: open sagas were unwound"
		}
		fmt.Fprintf(w, "drain:      IN FORCE since %s, deadline %s (%s) — %s\n",
			d.Since.Local().Format(time.DateTime), d.Deadline.Local().Format(time.DateTime), when, d.Why)
	}
	if len(qs) == 0 {
		fmt.Fprintln(w, "quarantine: none")
	}
	for _, q := range qs {
		fmt.Fprintf(w, "quarantine: %-10s since %s — %s\n", q.Agent, q.Since.Local().Format(time.DateTime), q.Why)
	}
}
