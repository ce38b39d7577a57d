package supervisor

import (
	"net/http"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/api"
)

// Only the operator may drain, undrain, quarantine and release: the viewer
// of an HTTP login is refused FORBIDDEN, as for reset, and nothing
// changes; the operator's bearer token is taken over TLS beyond loopback.
func TestOperatorOpsRefuseTheViewer(t *testing.T) {
	s, h, _ := loggedIn(t)
	for _, path := range []string{"/api/v1/drain", "/api/v1/undrain", "/api/v1/quarantine", "/api/v1/release"} {
		refusedWith(t, path+" by the viewer", loginReq(h, "POST", path, nil, "Authorization", "Bearer "+viewerToken), http.StatusForbidden, api.CodeForbidden)
	}
	if st := s.Status(); st.Drain != nil || len(st.Quarantined) != 0 {
		t.Fatalf("the viewer changed something: %+v %+v", st.Drain, st.Quarantined)
	}
	if rec := loginReq(h, "POST", "/api/v1/drain", nil, "Authorization", "Bearer "+guardToken); rec.Code != http.StatusOK {
		t.Fatalf("the operator's drain: %d %s", rec.Code, rec.Body)
	}
	if d, on := s.engine.Draining(); !on || d.Grace != DefaultDrainGrace {
		t.Fatalf("drain after the operator's request: %+v %v", d, on)
	}
}
