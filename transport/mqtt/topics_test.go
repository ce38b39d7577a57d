package mqtt

import (
	"github.com/saga-supervisor/saga-supervisor/api"

	"strings"
	"testing"
)

func TestTopicLayout(t *testing.T) {
	for _, c := range []struct {
		tp   Topics
		got  func(Topics) string
		want string
	}{
		{Topics{Device: "arm1"}, Topics.Cmd, "saga/v1/arm1/cmd"},
		{Topics{Device: "arm1"}, func(t Topics) string { return t.Reply("me") }, "saga/v1/arm1/reply/me"},
		{Topics{Device: "arm1"}, Topics.Status, "saga/v1/arm1/status"},
		{Topics{Device: "arm1"}, func(t Topics) string { return t.State("elbow") }, "saga/v1/arm1/state/elbow"},
		{Topics{Device: "arm1"}, Topics.Events, "saga/v1/arm1/events"},
		{Topics{Device: "arm1"}, Topics.Estop, "saga/v1/arm1/estop"},
		{Topics{Device: "arm1"}, func(t Topics) string { return t.Will("me") }, "saga/v1/arm1/will/me"},
		{Topics{Device: "arm1"}, Topics.Summary, "saga/v1/arm1/summary"},
		{Topics{Prefix: "site3/saga/v1", Device: "x"}, Topics.SummaryFilter, "site3/saga/v1/+/summary"},
		{Topics{Device: "x"}, Topics.StatusFilter, "saga/v1/+/status"},
		{Topics{Device: "arm1"}, Topics.WillFilter, "saga/v1/arm1/will/+"},
		{Topics{Prefix: "site3/saga/v1", Device: "arm1"}, Topics.Cmd, "site3/saga/v1/arm1/cmd"},
	} {
		if err := c.tp.Validate(); err != nil {
			t.Errorf("%+v: %v", c.tp, err)
		}
		if got := c.got(c.tp); got != c.want {
			t.Errorf("got %s, want %s", got, c.want)
		}
	}
}

func TestTopicsValidate(t *testing.T) {
	for _, tp := range []Topics{
		{},
		{Device: "arm/1"},
		{Device: "+"},
		{Prefix: "/saga/v1", Device: "arm1"},
		{Prefix: "saga/v1/", Device: "arm1"},
		{Prefix: "saga//v1", Device: "arm1"},
		{Prefix: "saga/#", Device: "arm1"},
		{Prefix: "$SYS/saga", Device: "arm1"},
	} {
		if err := tp.Validate(); err == nil {
			t.Errorf("%+v accepted", tp)
		}
	}
}

func TestValidLevel(t *testing.T) {
	for _, s := range []string{"me", "arm-ctl_2", "bras.gauche", "été", "a b", "$me", strings.Repeat("a", api.MaxNameBytes)} {
		if err := api.ValidName(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	for _, s := range []string{"", "a/b", "a+", "#", "a\x00", "a\n", "\u0085", "\u200b", "\xff", strings.Repeat("a", api.MaxNameBytes+1)} {
		if err := api.ValidName(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

// TestDecodedAgentsRouteToOneLevel: any agent DecodeRequest accepts makes a
// reply topic with exactly one more level, whatever escapes it was sent with.
func TestDecodedAgentsRouteToOneLevel(t *testing.T) {
	tp := Topics{Device: "arm1"}
	base := strings.Count(tp.Reply("x"), "/")
	for _, agent := range []string{`me`, `\u002f`, `a\/b`, `\u002b`, `\u0023`, `caf\u00e9`} {
		r, err := api.DecodeRequest([]byte(`{"id":"1","agent":"`+agent+`","op":"status"}`), 0)
		if err != nil {
			continue
		}
		if topic := tp.Reply(r.Agent); strings.Count(topic, "/") != base || strings.ContainsAny(r.Agent, "+#") {
			t.Errorf("agent %s gave topic %q", agent, topic)
		}
	}
}
