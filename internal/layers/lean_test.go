package layers

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLeanBuildLinksNoHardware lists the packages of the binary built with
// -tags saga_lean: none of the hardware libraries or hardware driver kinds
// may be among them (docs/DESIGN.md, "Driver kinds register themselves").
func TestLeanBuildLinksNoHardware(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the lean build's packages: %v", err)
	}
	list := func(tags ...string) []string {
		args := append([]string{"list", "-deps"}, tags...)
		out, err := exec.Command(goTool, append(args, module+"/cmd/saga-supervisor")...).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %v: %v\n%s", tags, err, out)
		}
		return strings.Fields(string(out))
	}
	hardware := []string{"periph.io/...", "go.bug.st/...", "drivers/gpio", "drivers/serial", "drivers/ina2xx", "drivers/pca9685", "drivers/sim/mcu"}
	found := func(pkgs []string) []string {
		var hits []string
		for _, p := range pkgs {
			for _, h := range hardware {
				if match(h, p) {
					hits = append(hits, p)
				}
			}
		}
		return hits
	}
	if hits := found(list("-tags", "saga_lean")); len(hits) > 0 {
		t.Errorf("the saga_lean build links hardware packages: %v", hits)
	}
	// The full build does link them: the test would pass vacuously if the
	// patterns matched nothing.
	if hits := found(list()); len(hits) < len(hardware) {
		t.Errorf("the full build links only %v of %v: update the list", hits, hardware)
	}
}
