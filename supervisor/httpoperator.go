package supervisor

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/rollback"
)

// DefaultDrainGrace is how long open sagas may run on after a drain that
// names no grace begins.
const DefaultDrainGrace = time.Minute

// operatorBody is the body of the operator's drain, undrain, quarantine and
// release requests; which fields each takes is checked by its handler.
type operatorBody struct {
	Operator string `json:"operator"` // who, for the journal (as reset's)
	Reason   string `json:"reason"`
	GraceMS  *int64 `json:"grace_ms"` // drain: how long open sagas may run on
	Agent    string `json:"agent"`    // quarantine, release: whom
}

// barrierJSON answers drain, undrain, quarantine and release: the drain
// and the quarantined agents after it.
type barrierJSON struct {
	OK          bool             `json:"ok"`
	Drain       *DrainJSON       `json:"drain"`
	Quarantined []QuarantineJSON `json:"quarantined"`
	// Already: the agent was quarantined before (nothing was journaled).
	Already bool `json:"already,omitempty"`
}

func (h *httpAPI) barriers(already bool) barrierJSON {
	var st Status
	h.s.barrierStatus(&st)
	return barrierJSON{OK: true, Drain: st.Drain, Quarantined: st.Quarantined, Already: already}
}

// operator authorizes an operator's request other than reset exactly as
// reset is authorized (a program's headers, loopback or TLS, the operator
// token or an operator's login, the failed attempts' limit) and reads its
// body. It answers every refusal itself (journaled and counted) and then
// returns ok false; otherwise it returns who asked, for the journal.
func (h *httpAPI) operator(w http.ResponseWriter, r *http.Request, op api.Op, body *operatorBody) (by string, ok bool) {
	refuse := func(status int, err error) (string, bool) {
		h.refuseOperator(w, op, status, err)
		return "", false
	}
	if err := checkAPIRequest(r); err != nil {
		return refuse(http.StatusUnsupportedMediaType, err)
	}
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && !isLoopback(la) && r.TLS == nil {
		return refuse(http.StatusForbidden, &api.Error{Code: api.CodeForbidden, Message: fmt.Sprintf(
			"%s refused: over plain HTTP the operator token is taken only on a loopback address (this machine: saga-supervisor ctl %s)", op, op)})
	}
	if r.URL.RawQuery != "" {
		return refuse(http.StatusBadRequest, &api.Error{Code: api.CodeBadRequest,
			Message: fmt.Sprintf("%s takes no query parameters: send the token as Authorization: Bearer <token>", op)})
	}
	host := clientHost(r)
	if p := principalOf(r); p != nil {
		// A login checked the token or session (and its failed attempts'
		// limit): only the operator role may go on.
		if p.role != RoleOperator {
			return refuse(http.StatusForbidden, &api.Error{Code: api.CodeForbidden, Message: fmt.Sprintf(
				"%s refused: the %s role may read and halt, never %s: log in with the operator token (nothing was done)", op, p.role, op)})
		}
		by = "http " + host + " " + string(p.role) + " " + p.via()
	} else {
		at, ok, retry := h.limit.begin(host)
		if !ok {
			secs := max(int64((retry+time.Second-1)/time.Second), 1)
			w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
			return refuse(http.StatusTooManyRequests, &api.Error{Code: api.CodeTooManyAttempts, Message: fmt.Sprintf(
				"%s refused: too many failed operator tokens (at most %d a minute from one host, %d from all): retry in %d s",
				op, ResetFailsPerHost, ResetFailsTotal, secs)})
		}
		token, _ := bearerToken(r)
		switch {
		case h.s.opt.ResetToken == "":
			h.limit.refund(host, at) // nothing to guess
			return refuse(http.StatusForbidden, &api.Error{Code: api.CodeNoOperatorToken, Message: string(op) +
				" refused: no operator token is configured (http.reset_token_file), so no one can " + string(op)})
		case !TokenMatches(token, h.s.opt.ResetToken):
			w.Header().Set("WWW-Authenticate", `Bearer realm="saga-supervisor"`)
			return refuse(http.StatusUnauthorized, &api.Error{Code: api.CodeUnauthorized, Message: string(op) + " refused: wrong operator token"})
		}
		h.limit.refund(host, at)
		by = "http " + host
	}
	if status, err := readBody(w, r, body); err != nil {
		return refuse(status, err)
	}
	if why := api.CheckText(body.Operator, maxOperatorBytes); why != "" {
		return refuse(http.StatusBadRequest, &api.Error{Code: api.CodeBadRequest, Field: "operator", Message: "field \"operator\" " + why})
	}
	if why := api.CheckText(body.Reason, maxReasonBytes); why != "" {
		return refuse(http.StatusBadRequest, &api.Error{Code: api.CodeBadRequest, Field: "reason", Message: "field \"reason\" " + why})
	}
	if body.Operator != "" {
		by += " operator " + body.Operator
	}
	return by, true
}

// refuseOperator journals (within the refusal budget), counts and answers
// a refused operator request.
func (h *httpAPI) refuseOperator(w http.ResponseWriter, op api.Op, status int, err error) {
	rep := api.ErrorReply("", err)
	h.s.journalHTTPRefusal(op, rep.Code, string(op)+": "+rep.Message)
	h.s.metrics.command(string(op), false, rep.Code)
	writeError(w, status, rep.Code, rep.Message, nil)
}

// operatorStatus is the HTTP status of a refusal by the engine.
func operatorStatus(err error) int {
	switch rep := api.ErrorReply("", err); rep.Code {
	case api.CodeBadRequest:
		return http.StatusBadRequest
	case api.CodeInternal:
		return http.StatusInternalServerError
	}
	return http.StatusConflict // the state forbids it: none in force, full, a failed journal
}

// drain begins a drain: POST /api/v1/drain {"grace_ms": N, "reason": "..."}.
func (h *httpAPI) drain(w http.ResponseWriter, r *http.Request) {
	var body operatorBody
	by, ok := h.operator(w, r, api.OpDrain, &body)
	if !ok {
		return
	}
	if body.Agent != "" {
		h.refuseOperator(w, api.OpDrain, http.StatusBadRequest, &api.Error{Code: api.CodeBadRequest, Field: "agent", Message: "drain takes no agent"})
		return
	}
	grace := DefaultDrainGrace
	if body.GraceMS != nil {
		if *body.GraceMS < 0 || *body.GraceMS > rollback.MaxDrainGrace.Milliseconds() {
			h.refuseOperator(w, api.OpDrain, http.StatusBadRequest, &api.Error{Code: api.CodeBadRequest, Field: "grace_ms",
				Message: fmt.Sprintf("field \"grace_ms\" is outside 0..%d", rollback.MaxDrainGrace.Milliseconds())})
			return
		}
		grace = time.Duration(*body.GraceMS) * time.Millisecond
	}
	if _, err := h.s.Drain(grace, by, body.Reason); err != nil {
		h.refuseOperator(w, api.OpDrain, operatorStatus(err), err)
		return
	}
	h.s.metrics.command(string(api.OpDrain), true, "")
	writeJSON(w, http.StatusOK, h.barriers(false))
}

// undrain ends the drain: POST /api/v1/undrain.
func (h *httpAPI) undrain(w http.ResponseWriter, r *http.Request) {
	var body operatorBody
	by, ok := h.operator(w, r, api.OpUndrain, &body)
	if !ok {
		return
	}
	if body.Agent != "" || body.GraceMS != nil {
		h.refuseOperator(w, api.OpUndrain, http.StatusBadRequest, &api.Error{Code: api.CodeBadRequest, Message: "undrain takes only operator and reason"})
		return
	}
	if err := h.s.Undrain(by, body.Reason); err != nil {
		h.refuseOperator(w, api.OpUndrain, operatorStatus(err), err)
		return
	}
	h.s.metrics.command(string(api.OpUndrain), true, "")
	writeJSON(w, http.StatusOK, h.barriers(false))
}

// quarantine bars an agent: POST /api/v1/quarantine {"agent": "...", "reason": "..."}.
func (h *httpAPI) quarantine(w http.ResponseWriter, r *http.Request) {
	h.bar(w, r, api.OpQuarantine)
}

// release ends an agent's quarantine: POST /api/v1/release {"agent": "..."}.
func (h *httpAPI) release(w http.ResponseWriter, r *http.Request) {
	h.bar(w, r, api.OpRelease)
}

func (h *httpAPI) bar(w http.ResponseWriter, r *http.Request, op api.Op) {
	var body operatorBody
	by, ok := h.operator(w, r, op, &body)
	if !ok {
		return
	}
	if body.GraceMS != nil {
		h.refuseOperator(w, op, http.StatusBadRequest, &api.Error{Code: api.CodeBadRequest, Field: "grace_ms", Message: string(op) + " takes no grace_ms"})
		return
	}
	if body.Agent == "" {
		h.refuseOperator(w, op, http.StatusBadRequest, &api.Error{Code: api.CodeBadRequest, Field: "agent", Message: string(op) + " needs the field \"agent\""})
		return
	}
	var already bool
	var err error
	if op == api.OpQuarantine {
		already, err = h.s.Quarantine(body.Agent, by, body.Reason)
	} else {
		err = h.s.Release(body.Agent, by, body.Reason)
	}
	if err != nil {
		var ae *api.Error
		if errors.As(err, &ae) && ae.Code == api.CodeBadRequest {
			h.refuseOperator(w, op, http.StatusBadRequest, err)
			return
		}
		h.refuseOperator(w, op, operatorStatus(err), err)
		return
	}
	h.s.metrics.command(string(op), true, "")
	writeJSON(w, http.StatusOK, h.barriers(already))
}
