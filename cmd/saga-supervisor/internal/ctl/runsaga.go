package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/client"
	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
)

type sagaStep struct {
	actuator string
	value    float64
}

// parseSteps reads ACTUATOR=VALUE pairs.
func parseSteps(args []string) ([]sagaStep, error) {
	if len(args) == 0 {
		return nil, errors.New("run-saga: give at least one ACTUATOR=VALUE")
	}
	steps := make([]sagaStep, 0, len(args))
	for _, a := range args {
		name, val, ok := strings.Cut(a, "=")
		if !ok || name == "" || val == "" {
			return nil, fmt.Errorf("run-saga: %q is not ACTUATOR=VALUE", a)
		}
		if err := api.ValidName(name); err != nil {
			return nil, fmt.Errorf("run-saga: actuator %q: %w", name, err)
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("run-saga: %q: the value must be a finite number", a)
		}
		steps = append(steps, sagaStep{name, v})
	}
	return steps, nil
}

// stepJSON is one step of run-saga's JSON output.
type stepJSON struct {
	Actuator  string   `json:"actuator"`
	Requested float64  `json:"requested"`
	Step      uint32   `json:"step,omitempty"`
	Value     *float64 `json:"value,omitempty"`
	Prior     *float64 `json:"prior,omitempty"`
	Clamped   bool     `json:"clamped,omitempty"`
	Code      string   `json:"code,omitempty"`
	Message   string   `json:"message,omitempty"`
}

// sagaJSON is run-saga's JSON output.
type sagaJSON struct {
	OK        bool            `json:"ok"`
	Agent     string          `json:"agent"`
	Lease     string          `json:"lease,omitempty"`
	Epoch     uint64          `json:"epoch,omitempty"`
	Saga      uint64          `json:"saga,omitempty"`
	Steps     []stepJSON      `json:"steps"`
	Committed bool            `json:"committed"`
	Aborted   bool            `json:"aborted,omitempty"`
	Report    *api.ReportJSON `json:"report,omitempty"`
	Error     string          `json:"error,omitempty"`
	Code      string          `json:"code,omitempty"`
	Halt      *haltNotice     `json:"halt,omitempty"` // latched when run-saga started
}

// approver gives the approval tokens of a step of saga (none: nil).
type approver func(saga uint64, s sagaStep) ([]string, error)

// stdin is where --ask-approval reads tokens (tests replace it).
var stdin io.Reader = os.Stdin

func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func opRunSaga(ctx context.Context, opt client.Options, out *output, steps []sagaStep, reason string, sopts []client.StepOption, ap approver) error {
	res := sagaJSON{Agent: opt.Agent, Steps: []stepJSON{}}
	text := func(format string, args ...any) {
		if !out.json {
			fmt.Fprintf(out.w, format, args...)
		}
	}
	// finish prints the result and gives the exit status; cause is the
	// supervisor's refusal or failure behind err, if any.
	finish := func(err, cause error) error {
		if out.json {
			res.OK, res.Halt = err == nil, out.halt
			if err != nil {
				res.Error, res.Code = err.Error(), client.CodeOf(cause)
			}
			out.printJSON(res)
		}
		if err == nil {
			return nil
		}
		return cli.Exit(1, "run-saga: %v", err)
	}

	c, err := client.Dial(ctx, opt)
	if err != nil {
		out.noticeHaltRefusal(err)
		return finish(err, err)
	}
	defer func() {
		cctx, cancel := cleanupCtx(opt)
		defer cancel()
		c.Close(cctx) // bye; the saga is committed or unwound by now
	}()
	l, _ := c.Lease()
	res.Lease, res.Epoch = l.ID, l.Epoch
	text("lease %s, epoch %d, ttl %v\n", l.ID, l.Epoch, l.TTL)
	saga, err := c.Begin(ctx)
	if err != nil {
		return finish(err, err)
	}
	res.Saga = saga.ID()
	text("saga %d begun\n", saga.ID())

	for i, s := range steps {
		opts := sopts
		if ap != nil {
			toks, err := ap(saga.ID(), s)
			if err != nil {
				cctx, cancel := cleanupCtx(opt)
				rep, _ := saga.Abort(cctx, "run-saga: no approval")
				cancel()
				res.Aborted, res.Report = rep != nil, rep
				return finish(fmt.Errorf("step %s=%g: approval: %w; saga %d aborted", s.actuator, s.value, err, saga.ID()), err)
			}
			if len(toks) > 0 {
				opts = append(opts[:len(opts):len(opts)], client.WithApprovals(toks...))
			}
		}
		r, err := saga.Step(ctx, s.actuator, s.value, opts...)
		js := stepJSON{Actuator: s.actuator, Requested: s.value}
		if err == nil {
			js.Step, js.Value, js.Prior, js.Clamped = r.Step, &r.Value, &r.Prior, r.Clamped
			res.Steps = append(res.Steps, js)
			clamped := ""
			if r.Clamped {
				clamped = fmt.Sprintf(" (clamped from %g)", r.Requested)
			}
			text("step %d  %-10s %g -> %g%s\n", r.Step, s.actuator, r.Prior, r.Value, clamped)
			continue
		}
		var ce *client.Error
		if errors.As(err, &ce) {
			js.Code, js.Message = ce.Code, ce.Message
		} else {
			js.Message = err.Error()
		}
		res.Steps = append(res.Steps, js)
		what := fmt.Sprintf("step %s=%g (%d of %d)", s.actuator, s.value, i+1, len(steps))
		switch {
		case ce != nil && ce.Report != nil:
			// The step failed and the supervisor unwound the saga already.
			text("%s FAILED: %s: %s\n", what, ce.Code, ce.Message)
			res.Report = ce.Report
			printReport(out, ce.Report)
			return finish(fmt.Errorf("%s failed: %s; saga %d unwound, %s", what, describe(err), saga.ID(), ce.Report.Verdict), err)
		case errors.Is(err, client.ErrLeaseLost):
			text("%s: LEASE LOST: %v\n", what, err)
			text("the supervisor unwinds the saga itself; its report is on the events topic (ctl watch)\n")
			return finish(fmt.Errorf("%s: %w", what, err), err)
		}
		how := "refused"
		if ce != nil && client.IsRefusal(err) {
			text("%s REFUSED, nothing moved: %s: %s\n", what, ce.Code, ce.Message)
		} else {
			how = "outcome unknown"
			text("%s: outcome unknown: %v\n", what, err)
		}
		why := reason
		if why == "" {
			why = fmt.Sprintf("run-saga: %s: %s", what, firstNonEmpty(client.CodeOf(err), "no reply"))
		}
		cctx, cancel := cleanupCtx(opt)
		rep, aerr := saga.Abort(cctx, why)
		cancel()
		if aerr != nil {
			text("abort: %v\n", aerr)
			return finish(fmt.Errorf("%s: %s; abort: %w", what, describe(err), aerr), err)
		}
		res.Aborted, res.Report = true, rep
		text("saga %d aborted\n", saga.ID())
		printReport(out, rep)
		return finish(fmt.Errorf("%s %s: %s; saga %d aborted, unwind %s", what, how, describe(err), saga.ID(), verdictOf(rep)), err)
	}
	if err := saga.Commit(ctx); err != nil {
		if !client.IsRefusal(err) && !errors.Is(err, client.ErrSagaEnded) && !errors.Is(err, client.ErrLeaseLost) {
			// The commit's outcome is unknown: unwind rather than guess.
			cctx, cancel := cleanupCtx(opt)
			rep, aerr := saga.Abort(cctx, "run-saga: commit outcome unknown")
			cancel()
			if aerr == nil {
				res.Aborted, res.Report = true, rep
				printReport(out, rep)
			}
		}
		return finish(err, err)
	}
	res.Committed = true
	text("saga %d committed\n", saga.ID())
	return finish(nil, nil)
}
