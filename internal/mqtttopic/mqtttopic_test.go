package mqtttopic

import (
	"strings"
	"testing"
)

func TestCheckPublish(t *testing.T) {
	for _, ok := range []string{"robots/arm1/pump/set", "a", "ünïcode/topic", strings.Repeat("x", MaxBytes)} {
		if err := CheckPublish(ok); err != nil {
			t.Errorf("%.30q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a/+/b", "a/#", "$SYS/x", "bad\x00nul", "tab\there", "\xff\xfe", strings.Repeat("x", MaxBytes+1)} {
		if err := CheckPublish(bad); err == nil {
			t.Errorf("%.30q accepted", bad)
		}
	}
}
