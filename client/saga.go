package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
)

// Saga is one open saga under the client's lease. Its methods wait for each
// other: the supervisor takes one step of a saga at a time.
type Saga struct {
	c  *Client
	id uint64

	mu    sync.Mutex
	ended error // why the saga is no longer open; nil while it is
}

// Begin opens a saga under the lease.
func (c *Client) Begin(ctx context.Context) (*Saga, error) {
	r, err := c.call(ctx, api.Request{Op: api.OpBegin}, true)
	if err != nil {
		return nil, err
	}
	if r.Saga == 0 {
		return nil, &Error{Op: string(api.OpBegin), ID: r.ID, Code: api.CodeInternal, Message: "begin granted no saga id"}
	}
	return &Saga{c: c, id: r.Saga}, nil
}

// ID is the supervisor's id of the saga.
func (s *Saga) ID() uint64 { return s.id }

// StepResult is what a step did.
type StepResult struct {
	Step      uint32  // the step's number in its saga, from 1
	Value     float64 // the value commanded
	Prior     float64 // the value the actuator had, which an unwind restores (NaN if the reply had none)
	Requested float64 // what was asked for: Value unless Clamped
	Clamped   bool    // the actuator's clamp policy moved the value inside its limits
}

// StepOption modifies one step.
type StepOption func(*api.Request) error

// WithDeadline makes the step void unless the supervisor admits it within
// d of receiving it (deadline_ms, rounded up to a millisecond, 1ms..1m);
// otherwise it is refused DEADLINE_PASSED and nothing moves.
func WithDeadline(d time.Duration) StepOption {
	return func(r *api.Request) error {
		ms := (d + time.Millisecond - 1) / time.Millisecond
		if d <= 0 || ms > api.MaxDeadlineMS {
			return &Error{Op: string(api.OpStep), Code: api.CodeBadRequest,
				Message: fmt.Sprintf("not sent: deadline %v is outside 1ms..%v", d, time.Duration(api.MaxDeadlineMS)*time.Millisecond)}
		}
		r.DeadlineMS = int64(ms)
		return nil
	}
}

// WithApproval sends an operator's signed approval with the step (package
// approval: approval.Sign, or `saga-supervisor ctl approve`). An actuator
// marked requires_approval moves only with one naming this device, the
// actuator, the exact value and this saga; an approval sent to any other
// actuator is checked too, and a bad one refused. Each approval admits one
// step once: a step refused APPROVAL_REPLAYED needs a new one.
//
// Given more than once (or with WithApprovals), the step carries every
// approval given, for an actuator that requires approvals from several
// operators (requires_approval: M).
func WithApproval(token string) StepOption {
	return WithApprovals(token)
}

// WithApprovals sends several operators' approvals with the step, each
// signed by its own key: an actuator marked requires_approval: M moves only
// with M of them from M distinct keys, and only if every one sent is good.
// At most api.MaxApprovals go with one step.
func WithApprovals(tokens ...string) StepOption {
	return func(r *api.Request) error {
		all := append(r.Approvals(), tokens...)
		if len(tokens) == 0 || len(all) > api.MaxApprovals {
			return &Error{Op: string(api.OpStep), Code: api.CodeBadRequest,
				Message: fmt.Sprintf("not sent: a step carries 1..%d approvals, got %d", api.MaxApprovals, len(all))}
		}
		for _, token := range tokens {
			if token == "" || len(token) > api.MaxApprovalBytes || strings.Contains(token, " ") {
				return &Error{Op: string(api.OpStep), Code: api.CodeBadRequest,
					Message: fmt.Sprintf("not sent: an approval is 1..%d bytes without a space, got %d bytes", api.MaxApprovalBytes, len(token))}
			}
		}
		r.Approval = api.JoinApprovals(all...)
		return nil
	}
}

// Step commands one actuator. A refusal is an *Error for which IsRefusal
// holds: nothing moved and the saga goes on. STEP_FAILED and STEP_IN_DOUBT
// are an *Error carrying the report of the unwind: the saga is over
// (ErrSagaEnded). Any other error (a timeout) leaves the step's outcome
// unknown: abort the saga.
func (s *Saga) Step(ctx context.Context, actuator string, value float64, opts ...StepOption) (StepResult, error) {
	req := api.Request{Op: api.OpStep, Saga: s.id, Actuator: actuator, Value: value}
	for _, o := range opts {
		if err := o(&req); err != nil {
			return StepResult{}, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended != nil {
		return StepResult{}, s.ended
	}
	r, err := s.c.call(ctx, req, true)
	if err != nil {
		s.end(err)
		return StepResult{}, err
	}
	res := StepResult{Step: r.Step, Value: value, Requested: value, Prior: math.NaN(), Clamped: r.Clamped}
	if r.Value != nil {
		res.Value = *r.Value
	}
	if r.Prior != nil {
		res.Prior = *r.Prior
	}
	if r.Requested != nil {
		res.Requested = *r.Requested
	}
	return res, nil
}

// Commit closes the saga, keeping what it did; the commit is durable in the
// supervisor's journal when Commit returns nil.
func (s *Saga) Commit(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended != nil {
		return s.ended
	}
	_, err := s.c.call(ctx, api.Request{Op: api.OpCommit, Saga: s.id}, true)
	if err == nil {
		s.ended = fmt.Errorf("client: saga %d was committed: %w", s.id, ErrSagaEnded)
		return nil
	}
	s.end(err)
	return err
}

// Abort unwinds the saga and returns the report of the unwind: whether it
// put everything back is the report's Verdict ("clean" or "partial"), not
// the error, which is nil when the unwind ran.
func (s *Saga) Abort(ctx context.Context, reason string) (*api.ReportJSON, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended != nil {
		return nil, s.ended
	}
	r, err := s.c.call(ctx, api.Request{Op: api.OpAbort, Saga: s.id, Reason: reason}, true)
	if err == nil {
		s.ended = fmt.Errorf("client: saga %d was aborted: %w", s.id, ErrSagaEnded)
		return r.Report, nil
	}
	s.end(err)
	return nil, err
}

// end records that err closed the saga, when it did.
func (s *Saga) end(err error) {
	if errors.Is(err, ErrSagaEnded) {
		s.ended = fmt.Errorf("client: saga %d ended: %w", s.id, err)
	}
}
