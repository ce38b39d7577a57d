package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/saga-supervisor/saga-supervisor/client"
)

// haltNotice is a latched halt an op found when it started: printed
// before anything else (text), or as the "halt" member of the op's JSON.
type haltNotice struct {
	Halted bool   `json:"halted"`
	Reason string `json:"reason"`
}

// retainedWait bounds waiting for the broker's retained status: it comes
// right after the subscription is acknowledged, so this is only ever
// waited out when no supervisor ever published one.
const retainedWait = 2 * time.Second

// noticeHaltRefusal warns when err is the supervisor's refusal of a hello
// because it is halted: nothing may begin while halted, not even a lease,
// so an op that takes one learns of the halt from its first request,
// reason included ("halted: <why>"), with no request of its own.
func (o *output) noticeHaltRefusal(err error) {
	var ce *client.Error
	if errors.As(err, &ce) && errors.Is(err, client.ErrHalted) {
		o.warnHalt(strings.TrimPrefix(ce.Message, "halted: "))
	}
}

// noticeHaltRetained reads the supervisor's status from the retained
// status topic — the broker hands it over on subscribing, without a
// request to the supervisor — and warns when it says halted.
func noticeHaltRetained(ctx context.Context, c *client.Client, opt client.Options, out *output) {
	ctx, cancel := context.WithTimeout(ctx, min(opt.Timeout, retainedWait))
	defer cancel()
	c.Watch(ctx, func(u client.Update) {
		if u.Status == nil {
			return
		}
		if u.Status.Halted {
			out.warnHalt(u.Status.HaltReason)
		}
		cancel()
	})
}

// noticeHaltHTTP does the same for a reset over HTTP, from the status
// endpoint (the token stays off the broker, so there is no retained
// status at hand). A status that cannot be read is passed over: the reset
// itself says what is wrong.
func noticeHaltHTTP(ctx context.Context, hc *http.Client, base string, timeout time.Duration, out *output, token string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+"/api/v1/status", nil)
	if err != nil {
		return
	}
	// The operator token reads the status of a listener with a login
	// (http.login); one without ignores it.
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := hc.Do(req)
	if err != nil {
		return
	}
	defer res.Body.Close()
	var st struct {
		Halted bool   `json:"halted"`
		Why    string `json:"halt_reason"`
	}
	if res.StatusCode == http.StatusOK && json.NewDecoder(io.LimitReader(res.Body, 1<<20)).Decode(&st) == nil && st.Halted {
		out.warnHalt(st.Why)
	}
}

// warnHalt records a latched halt and, in text, prints the warning line.
func (o *output) warnHalt(reason string) {
	o.halt = &haltNotice{Halted: true, Reason: reason}
	if !o.json {
		fmt.Fprintln(o.w, haltWarning(reason, o.resetHint))
	}
}

// haltWarning is the line that says the supervisor is halted, why, and
// how to clear it.
func haltWarning(reason, resetHint string) string {
	if reason == "" {
		reason = "no reason given"
	}
	return fmt.Sprintf("WARNING: the supervisor is HALTED: %s — every command is refused until an operator resets it: %s", reason, resetHint)
}
