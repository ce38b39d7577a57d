package supervisor_test

import (
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

func withZones(c *config.Config) {
	c.Zones = map[string][]string{"arm": {"shoulder", "elbow", "gripper"}, "base": {"base"}}
}

// submit sends one request as the MQTT transport does, and waits for the
// reply.
func submit(t *testing.T, sup *supervisor.Supervisor, payload string) api.Reply {
	t.Helper()
	req, derr := api.DecodeRequest([]byte(payload), 0)
	got := make(chan api.Reply, 1)
	sup.Submit(req.Agent, req, derr, time.Now(), func(r api.Reply) { got <- r })
	return <-got
}

// TestZoneHaltOverHTTPAndMQTT: a zone halt from HTTP and from the
// controller API stops the zone only; the other zone steps on; the
// status, metrics and readiness say so; a full reset leaves the zone
// halted and a zone reset clears it; unknown zones are coded errors (a halt
// naming one halts everything).
func TestZoneHaltOverHTTPAndMQTT(t *testing.T) {
	sup, _ := startSupervisor(t, t.TempDir(), withZones, func(c *config.Config) { c.MQTT.AllowReset = true })
	srv := httptest.NewServer(sup.HTTPHandler())
	defer srv.Close()

	h := submit(t, sup, `{"id":"h","agent":"p","op":"hello","ttl_ms":60000}`)
	lease := fmt.Sprintf(`"lease":%q,"epoch":%d`, h.Lease, h.Epoch)
	n := 0
	step := func(saga uint64, act string, v float64) api.Reply {
		n++
		return submit(t, sup, fmt.Sprintf(`{"id":"s%d","agent":"p","op":"step",%s,"saga":%d,"actuator":%q,"value":%g}`, n, lease, saga, act, v))
	}
	begin := func() uint64 {
		n++
		r := submit(t, sup, fmt.Sprintf(`{"id":"b%d","agent":"p","op":"begin",%s}`, n, lease))
		if !r.OK {
			t.Fatalf("begin: %s %s", r.Code, r.Message)
		}
		return r.Saga
	}
	baseSaga, armSaga := begin(), begin()
	if r := step(baseSaga, "base", 10); !r.OK {
		t.Fatal(r.Message)
	}
	if r := step(armSaga, "shoulder", 30); !r.OK {
		t.Fatal(r.Message)
	}

	r := do(t, srv, "POST", "/api/v1/halt?zone=arm", nil, `{"reason":"light curtain"}`)
	if r.status != 200 || !strings.Contains(r.body, `"halted_zones":["arm"]`) || !strings.Contains(r.body, `"halted":false`) {
		t.Fatalf("zone halt: %d %s", r.status, r.body)
	}
	sup.Engine().WaitZoneHalts()
	if r := step(armSaga, "elbow", 30); r.OK || r.Code != string(rollback.CodeSagaUnknown) {
		t.Errorf("the arm's saga after the zone halt: %+v (it should have been unwound)", r)
	}
	arm2 := begin()
	if r := step(arm2, "elbow", 30); r.OK || r.Code != string(rollback.CodeZoneHalted) {
		t.Errorf("a step on the halted zone: %+v", r)
	}
	if r := step(baseSaga, "base", 20); !r.OK {
		t.Errorf("a step on the base during the arm's halt: %s %s", r.Code, r.Message)
	}
	if v, _ := sup.Engine().Commanded("shoulder"); v != 10 {
		t.Errorf("shoulder commanded %g, want its safe value 10", v)
	}
	st := sup.Status()
	if !st.Ready || st.Halted || len(st.Zones) != 2 || !st.Zones[0].Halted || !strings.Contains(st.Zones[0].HaltWhy, "light curtain") || st.Zones[1].Halted {
		t.Errorf("status: ready %v halted %v zones %+v", st.Ready, st.Halted, st.Zones)
	}
	m := do(t, srv, "GET", "/metrics", nil, "").body
	if !strings.Contains(m, `saga_zone_halted{zone="arm"} 1`) || !strings.Contains(m, `saga_zone_halted{zone="base"} 0`) {
		t.Errorf("metrics lack the zone gauges:\n%s", grepLines(m, "saga_zone"))
	}

	// The base halts over MQTT; both zones are now halted, never the whole.
	if r := submit(t, sup, `{"id":"zh","agent":"p","op":"halt","zone":"base","reason":"bumper"}`); !r.OK {
		t.Fatalf("zone halt over MQTT: %s %s", r.Code, r.Message)
	}
	sup.Engine().WaitZoneHalts()
	if h, _ := sup.Engine().Halted(); h {
		t.Fatal("a zone halt latched the full halt")
	}
	// A full halt and its reset leave the zones halted.
	if r := do(t, srv, "POST", "/api/v1/halt", nil, ""); r.status != 200 {
		t.Fatal(r.body)
	}
	sup.Engine().WaitHalts()
	if r := do(t, srv, "POST", "/api/v1/reset", bearer(operatorToken), ""); r.status != 200 {
		t.Fatalf("full reset: %d %s", r.status, r.body)
	}
	if !sup.Status().Zones[0].Halted || !sup.Status().Zones[1].Halted {
		t.Error("a full reset cleared the zone halts")
	}
	// Zone resets: unknown, wrong token, then right.
	if r := do(t, srv, "POST", "/api/v1/reset", bearer(operatorToken), `{"zone":"wrist"}`); r.status != 404 || !strings.Contains(r.body, "UNKNOWN_ZONE") {
		t.Errorf("reset of an unknown zone: %d %s", r.status, r.body)
	}
	if r := do(t, srv, "POST", "/api/v1/reset", bearer(operatorToken), `{"zone":"no/such"}`); r.status != 400 || !strings.Contains(r.body, "BAD_REQUEST") {
		t.Errorf("reset of a zone with a bad name: %d %s", r.status, r.body)
	}
	if r := submit(t, sup, `{"id":"zr1","agent":"p","op":"reset","token":"wrong","zone":"arm"}`); r.OK || r.Code != api.CodeUnauthorized {
		t.Errorf("zone reset with a wrong token: %+v", r)
	}
	if r := do(t, srv, "POST", "/api/v1/reset", bearer(operatorToken), `{"zone":"arm"}`); r.status != 200 || !strings.Contains(r.body, `"halted_zones":["base"]`) {
		t.Errorf("zone reset over HTTP: %d %s", r.status, r.body)
	}
	if r := submit(t, sup, `{"id":"zr2","agent":"p","op":"reset","token":"`+operatorToken+`","zone":"base"}`); !r.OK {
		t.Errorf("zone reset over MQTT: %s %s", r.Code, r.Message)
	}
	h = submit(t, sup, `{"id":"h2","agent":"p","op":"hello","ttl_ms":60000}`)
	lease = fmt.Sprintf(`"lease":%q,"epoch":%d`, h.Lease, h.Epoch)
	if r := step(begin(), "elbow", 30); !r.OK {
		t.Errorf("a step on the arm after its reset: %s %s", r.Code, r.Message)
	}

	// A halt naming no zone halts everything, and says so.
	if r := submit(t, sup, `{"id":"zh2","agent":"p","op":"halt","zone":"wrist"}`); r.OK || r.Code != string(rollback.CodeUnknownZone) {
		t.Errorf("halt of an unknown zone over MQTT: %+v", r)
	}
	if h, _ := sup.Engine().Halted(); !h {
		t.Error("a halt naming an unknown zone did not halt")
	}
	if r := do(t, srv, "POST", "/api/v1/halt?zone=wrist", nil, ""); r.status != 404 || !strings.Contains(r.body, "UNKNOWN_ZONE") {
		t.Errorf("halt of an unknown zone over HTTP: %d %s", r.status, r.body)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(slices.Clip(out), "")
}

// TestZoneConfigRefusals: zones naming unknown or shared actuators, and
// bindings naming unknown zones, are refused with the line and path.
func TestZoneConfigRefusals(t *testing.T) {
	base := "device: d\nactuators: {a: {kind: servo, driver: sim, min: 0, max: 1}, b: {kind: servo, driver: sim, min: 0, max: 1}}\n"
	for _, c := range []struct{ yaml, want string }{
		{"zones: {arm: [a, c]}\n", `no actuator "c"`},
		{"zones: {arm: [a], base: [a]}\n", "already in zone arm"},
		{"zones: {arm: []}\n", "lists no actuator"},
		{"zones: {arm: [a]}\nsupplies: {bat: {driver: sim, min_volts: 1, max_volts: 2, zone: wrist}}\n", `no zone "wrist"`},
		{"zones: {arm: [a]}\nsupplies: {bat: {driver: sim, min_volts: 1, max_volts: 2, zone: arm, action: unwind}}\n", "scopes the halt action only"},
		{"zones: {arm: [a]}\nestop: {driver: gpio, pin: GPIO27, zone: base}\n", `no zone "base"`},
	} {
		_, err := config.Parse([]byte(base+c.yaml), "t.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.yaml, err, c.want)
		}
	}
	if _, err := config.Parse([]byte(base+"zones: {arm: [a], base: [b]}\n"), "t.yaml"); err != nil {
		t.Errorf("a valid zones section: %v", err)
	}
}
