package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/client"
	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
)

// output prints results as text or JSON.
type output struct {
	w    io.Writer
	json bool
	// halt is the latched halt the op found when it started (warnHalt);
	// the op's JSON carries it as "halt".
	halt *haltNotice
	// resetHint is the command that clears a halt, for the warning.
	resetHint string
}

// withHalt adds the halt found at the start, if any, to an op's JSON.
func (o *output) withHalt(j map[string]any) map[string]any {
	if o.halt != nil {
		j["halt"] = o.halt
	}
	return j
}

func (o *output) printJSON(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	fmt.Fprintf(o.w, "%s\n", b)
}

// done prints that op succeeded: text, or {"ok":true,"op":op} with --json.
func (o *output) done(op, text string) {
	if o.json {
		o.printJSON(o.withHalt(map[string]any{"ok": true, "op": op}))
	} else {
		fmt.Fprintln(o.w, text)
	}
}

// fail turns an error into the exit status: 1 with the code and message of
// a refusal or failure (also printed as JSON with --json).
func (o *output) fail(what string, err error) error {
	if errors.Is(err, client.ErrWillRefused) {
		err = fmt.Errorf("%w\n  talk to the device that supervisor serves: --config FILE (its config file: device, prefix, broker and\n  HTTP from one place), or --device NAME and --prefix P", err)
	}
	if errors.Is(err, client.ErrLoginRefused) {
		err = fmt.Errorf("%w\n  log in as an agent the supervisor knows: --agent NAME with --password-file FILE, or give --config with the\n  supervisor's config, whose credentials_dir holds <agent>'s password (--credentials DIR: default ./saga-data/mqtt/credentials)", err)
	}
	if o.json {
		j := o.withHalt(map[string]any{"ok": false, "op": what, "error": err.Error()})
		var ce *client.Error
		if errors.As(err, &ce) {
			j["code"], j["message"] = ce.Code, ce.Message
			if ce.Report != nil {
				j["report"] = ce.Report
			}
		}
		o.printJSON(j)
	}
	var ce *client.Error
	if errors.As(err, &ce) {
		return cli.Exit(1, "%s refused: %s: %s", what, ce.Code, ce.Message)
	}
	return cli.Exit(1, "%s: %v", what, err)
}

// cleanupCtx is a context for the last words (abort, bye) after ctx was
// interrupted.
func cleanupCtx(opt client.Options) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), opt.Timeout)
}

// describe is "CODE: message" for a supervisor's refusal or failure, the
// error's text otherwise.
func describe(err error) string {
	var ce *client.Error
	if errors.As(err, &ce) {
		return ce.Code + ": " + ce.Message
	}
	return err.Error()
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

func verdictOf(r *api.ReportJSON) string {
	if r == nil {
		return "unknown"
	}
	return r.Verdict
}

// printReport prints a rollback report as text (JSON output carries it
// whole).
func printReport(out *output, r *api.ReportJSON) {
	if out.json || r == nil {
		return
	}
	reportText(out.w, r, "")
}

func reportText(w io.Writer, r *api.ReportJSON, indent string) {
	how := "unwind " + r.Verdict
	if r.Verdict != "clean" {
		how = "unwind PARTIAL — look at the robot"
	}
	rec := ""
	if r.Recovered {
		rec = ", finished by recovery"
	}
	fmt.Fprintf(w, "%ssaga %d of %s: %s (%s%s): %s\n", indent, r.Saga, r.Agent, how, r.Order, rec, r.Reason)
	for _, s := range r.Steps {
		fmt.Fprintf(w, "%s  step %d %-10s %s, back to %s (was commanded %s), %s, %d attempt(s)", indent,
			s.Step, s.Actuator, s.Outcome, num(s.Prior, "null"), num(s.Target, "null"), s.Bucket, s.Attempts)
		if s.Error != "" {
			fmt.Fprintf(w, ": %s", s.Error)
		}
		fmt.Fprintln(w)
	}
}

// num is *p, or ifNil.
func num(p *float64, ifNil string) string {
	if p == nil {
		return ifNil
	}
	return strconv.FormatFloat(*p, 'g', -1, 64)
}
