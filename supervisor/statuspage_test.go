package supervisor

import (
	"bytes"
	"strings"
	"testing"
)

// Every string of the status reaches the page escaped: a name, reason or
// error holding markup shows as text, never as markup.
func TestStatusPageEscapesEveryString(t *testing.T) {
	const evil = `<i x='1'>&"`
	const escaped = `&lt;i x=&#39;1&#39;&gt;&amp;&#34;`
	rb := 1.0
	st := Status{
		Halted: true, HaltWhy: evil, Reasons: []string{evil},
		Journal:   JournalStatus{Dir: evil, Error: evil, TailCut: evil},
		Supplies:  []SupplyJSON{{Name: evil, Code: evil, Action: evil, ReadError: evil}},
		Actuators: []ActuatorStatus{{Name: evil, Kind: evil, ReadBack: &rb, Error: evil}},
		Leases:    []LeaseJSON{{Agent: evil}},
	}
	var b bytes.Buffer
	writeStatusPage(&b, st, evil)
	page := b.String()
	if strings.Contains(page, "<i ") {
		t.Fatalf("markup from the status reached the page:\n%s", page)
	}
	// HaltWhy, a reason, the time, the journal's three, the supply's four,
	// the actuator's three and the agent.
	if n := strings.Count(page, escaped); n != 14 {
		t.Errorf("%d escaped strings on the page, want 14:\n%s", n, page)
	}
}
