package main

import (
	"regexp"
	"strings"
	"testing"
)

// The ctl line of the usage names every OP ctl takes: the ones its own
// error for an unknown OP lists.
func TestUsageNamesEveryCtlOp(t *testing.T) {
	out, code := run(t, "ctl", "no-such-op")
	m := regexp.MustCompile(`unknown OP "no-such-op": ([a-z, -]+)`).FindStringSubmatch(out)
	if code != 2 || m == nil {
		t.Fatalf("ctl no-such-op exited %d without the list of OPs:\n%s", code, out)
	}
	ops := strings.FieldsFunc(strings.ReplaceAll(m[1], " or ", ", "), func(r rune) bool { return r == ',' || r == ' ' })
	usage, _ := run(t, "--help")
	var line string
	for _, l := range strings.Split(usage, "\n") {
		if strings.HasPrefix(l, "  ctl ") {
			line = l
		}
	}
	if len(ops) < 8 || line == "" {
		t.Fatalf("OPs %q, usage line %q", ops, line)
	}
	for _, op := range ops {
		if !regexp.MustCompile(`(^|[^\w-])` + regexp.QuoteMeta(op) + `([^\w-]|$)`).MatchString(line) {
			t.Errorf("the usage's ctl line does not name %s:\n%s", op, line)
		}
	}
}
