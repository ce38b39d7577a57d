package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
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
	n := 0
	err = c.Watch(ctx, func(u client.Update) {
		if count > 0 && n >= count {
			return
		}
		n++
		writeUpdate(out, u)
		if count > 0 && n >= count {
			cancel()
		}
	})
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
		fmt.Fprintf(w, "%s state    %s = %g\n", ts, u.State.Actuator, u.State.Commanded)
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
