package client_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/client"
)

// Every wire code is classified: a code added to api.Codes must be given
// a meaning here before this test passes again.
func TestClientErrorCodesClassified(t *testing.T) {
	for _, ci := range api.Codes {
		if !client.CodeClassified(ci.Code) {
			t.Errorf("code %s is not classified by the client", ci.Code)
		}
	}
	if client.CodeClassified("NO_SUCH_CODE") {
		t.Fatal("an unknown code is classified")
	}
}

func TestClientErrorClasses(t *testing.T) {
	cases := []struct {
		code     string
		refusal  bool
		sentinel error
	}{
		{"LIMIT_MAX", true, nil},
		{"SUPPLY_LOW", true, nil},
		{"ACTUATOR_BUSY", true, nil},
		{"HALTED", true, client.ErrHalted},
		{"NOT_READY", true, client.ErrNotReady},
		{"UNAUTHORIZED", true, client.ErrUnauthorized},
		{"LEASE_EXPIRED", true, client.ErrLeaseLost},
		{"LEASE_UNKNOWN", true, client.ErrLeaseLost},
		{"LEASE_NOT_HOLDER", true, client.ErrLeaseLost},
		{"SAGA_UNKNOWN", true, client.ErrSagaEnded},
		{"STEP_FAILED", false, client.ErrSagaEnded},
		{"STEP_IN_DOUBT", false, client.ErrSagaEnded},
		{"INTERNAL", false, nil},
		{"A_CODE_FROM_THE_FUTURE", false, nil}, // cannot promise nothing moved
	}
	all := []error{client.ErrHalted, client.ErrNotReady, client.ErrUnauthorized, client.ErrLeaseLost, client.ErrSagaEnded, client.ErrClosed, client.ErrNoLease, client.ErrConnectionLost}
	for _, tc := range cases {
		err := fmt.Errorf("wrapped: %w", &client.Error{Op: "step", ID: "a-1", Code: tc.code, Message: "m"})
		if got := client.IsRefusal(err); got != tc.refusal {
			t.Errorf("%s: IsRefusal %v, want %v", tc.code, got, tc.refusal)
		}
		if client.CodeOf(err) != tc.code {
			t.Errorf("%s: CodeOf %q", tc.code, client.CodeOf(err))
		}
		for _, s := range all {
			if got := errors.Is(err, s); got != (s == tc.sentinel) {
				t.Errorf("%s: errors.Is(%v) = %v", tc.code, s, got)
			}
		}
	}
	if client.IsRefusal(nil) || client.IsRefusal(errors.New("timeout")) || client.CodeOf(nil) != "" {
		t.Fatal("non-*Error classified as a refusal")
	}
	e := &client.Error{Op: "step", Code: "STEP_FAILED", Message: "wrist: driver error", Report: &api.ReportJSON{Saga: 7, Verdict: "partial"}}
	if got, want := e.Error(), "step: STEP_FAILED: wrist: driver error (saga 7 unwound: partial)"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}
