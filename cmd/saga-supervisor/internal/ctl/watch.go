package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/client"
)

func opWatch(ctx context.Context, opt client.Options, out *output, forDur time.Duration, count int) error {
	opt.NoLease = true
	c, err := client.Dial(ctx, opt)
	if err != nil {
		return out.fail("watch", err)
	}
	defer c.Close(context.Background())
	if forDur > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, forDur)
		defer cancel()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The retained messages arrive in the broker's order, actuator states
	// possibly before the status: they wait for the status (or for
	// retainedWait), so that a latched halt is said first.
	var (
		mu      sync.Mutex
		started bool
		pending []client.Update
		halted  bool
		n       int
	)
	show := func(u client.Update) {
		if count > 0 && n >= count {
			return
		}
		n++
		if u.Status != nil {
			// The warning when a halt latches, or is latched when the
			// watch starts; JSON lines carry "halted" in the status.
			if u.Status.Halted && !halted && !out.json {
				fmt.Fprintln(out.w, haltWarning(u.Status.HaltReason, out.resetHint))
			}
			halted = u.Status.Halted
		}
		writeUpdate(out, u)
		if count > 0 && n >= count {
			cancel()
		}
	}
	start := func(first *client.Update) {
		started = true
		if first != nil {
			show(*first)
		}
		for _, u := range pending {
			show(u)
		}
		pending = nil
	}
	t := time.AfterFunc(min(opt.Timeout, retainedWait), func() {
		mu.Lock()
		defer mu.Unlock()
		if !started {
			start(nil)
		}
	})
	defer t.Stop()
	err = c.Watch(ctx, func(u client.Update) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case started:
			show(u)
		case u.Status != nil:
			start(&u)
		default:
			pending = append(pending, u)
		}
	})
	mu.Lock()
	if !started {
		start(nil) // ended before the status came: what arrived is still shown
	}
	mu.Unlock()
	if err != nil {
		return out.fail("watch", err)
	}
	return nil
}

// writeUpdate prints one watched message.
func writeUpdate(out *output, u client.Update) {
	if out.json {
		j := map[string]any{"topic": u.Topic, "retained": u.Retained}
		if json.Valid(u.Payload) {
			j["payload"] = json.RawMessage(u.Payload)
		} else {
			j["payload"] = string(u.Payload)
		}
		out.printJSON(j)
		return
	}
	w := out.w
	ts := time.Now().Format("15:04:05.000")
	switch {
	case u.Status != nil:
		s := u.Status
		line := fmt.Sprintf("%s status   %s", ts, s.State)
		if s.State == api.StateOnline {
			if s.Ready {
				line += ", ready"
			} else {
				line += ", NOT READY: " + strings.Join(s.Reasons, "; ")
			}
		}
		if s.Halted {
			line += ", HALTED: " + s.HaltReason
		}
		fmt.Fprintln(w, line)
	case u.State != nil:
		// An unknown position is null on the wire, which the client's
		// State cannot tell from 0.
		var s struct {
			Commanded *float64 `json:"commanded"`
		}
		json.Unmarshal(u.Payload, &s)
		fmt.Fprintf(w, "%s state    %s = %s\n", ts, u.State.Actuator, num(s.Commanded, "unknown"))
	case u.Event != nil && u.Event.Kind == api.EventDrift:
		fmt.Fprintf(w, "%s drift    %s = %s (moved by its device; the supervisor takes it as the position)\n", ts, u.Event.Actuator, num(u.Event.Value, "unknown"))
	case u.Event != nil && u.Event.Kind == api.EventRollback && u.Event.Report != nil:
		fmt.Fprintf(w, "%s rollback ", ts)
		reportText(w, u.Event.Report, "")
	case u.Event != nil && u.Event.Kind == api.EventReply && u.Event.Reply != nil:
		r := u.Event.Reply
		fmt.Fprintf(w, "%s refused  (no reply topic) id %q: %s: %s\n", ts, r.ID, r.Code, r.Message)
	default:
		fmt.Fprintf(w, "%s %s %s\n", ts, u.Topic, u.Payload)
	}
}
