package main

import (
	"regexp"
	"strings"
	"testing"
)

// benchFlags are the flags of each bench beside --dir and --json, which
// every bench takes.
var benchFlags = map[string][]string{
	"disk":    {"n"},
	"journal": {"n", "records", "junk-time"},
	"mqtt":    {"n", "broker", "halts", "agents", "expiries", "slow-fsync", "agents-time", "flood-rate", "halt-topic"},
	"rss":     {"daemon", "settle", "flood-time", "after"},
	"pi": {"daemon", "cpu", "period", "fsync-delay", "rounds", "steps", "halts", "flood-steps", "expiries", "records",
		"weight", "cgroup-parent", "settle", "profile"},
}

// hasFlag reports whether a usage lists flag name (as PrintDefaults does).
func hasFlag(usage, name string) bool {
	return regexp.MustCompile(`(?m)^  -` + regexp.QuoteMeta(name) + `( |$)`).MatchString(usage)
}

// Each bench is a subcommand with its own usage listing its own flags and
// no other bench's; bench -h is disk's usage, with the list of benches.
func TestBenchSubcommandUsage(t *testing.T) {
	for name, flags := range benchFlags {
		out, code := run(t, "bench", name, "-h")
		if code != 0 {
			t.Errorf("bench %s -h exited %d, want 0:\n%s", name, code, out)
		}
		if !strings.HasPrefix(out, "usage: saga-supervisor bench "+name+" [flags]\n") {
			t.Errorf("bench %s -h does not start with its usage line:\n%s", name, out)
		}
		for _, f := range append([]string{"dir", "json"}, flags...) {
			if !hasFlag(out, f) {
				t.Errorf("bench %s -h lacks -%s:\n%s", name, f, out)
			}
		}
		for other, oflags := range benchFlags {
			for _, f := range oflags {
				if other != name && !strings.Contains(" "+strings.Join(flags, " ")+" ", " "+f+" ") && hasFlag(out, f) {
					t.Errorf("bench %s -h lists -%s, a flag of bench %s:\n%s", name, f, other, out)
				}
			}
		}
		// The deprecated mode flags are no flags of any bench.
		for _, f := range []string{"mqtt", "journal", "rss"} {
			if hasFlag(out, f) {
				t.Errorf("bench %s -h lists -%s:\n%s", name, f, out)
			}
		}
	}
	out, code := run(t, "bench", "-h")
	if code != 0 || !strings.HasPrefix(out, "usage: saga-supervisor bench disk [flags]\n") {
		t.Errorf("bench -h exited %d, want 0 and disk's usage:\n%s", code, out)
	}
	for name := range benchFlags {
		if !strings.Contains(out, "\n  "+name+" ") {
			t.Errorf("bench -h does not list bench %s:\n%s", name, out)
		}
	}
}

// An unknown bench is exit 2, naming it and the benches there are; a flag
// of another bench is exit 2 too, and so are two deprecated mode flags.
func TestBenchSubcommandErrors(t *testing.T) {
	out, code := run(t, "bench", "frobnicate")
	if code != 2 || !strings.Contains(out, `unknown bench "frobnicate"`) || !strings.Contains(out, "\n  mqtt ") {
		t.Errorf("bench frobnicate exited %d, want 2 naming it and listing the benches:\n%s", code, out)
	}
	for _, args := range [][]string{
		{"disk", "--halts", "3"},
		{"mqtt", "--records", "10"},
		{"--journal", "--mqtt"},
		{"--broker", "tcp://127.0.0.1:1", "--rss"},
	} {
		if out, code := run(t, append([]string{"bench"}, args...)...); code != 2 {
			t.Errorf("bench %v exited %d, want 2:\n%s", args, code, out)
		}
	}
}

// bench with flags first is disk (TestBench runs it so); a deprecated mode
// flag prints one line on stderr naming the new form and then runs that
// bench with the other flags, printing what the new form prints.
func TestBenchDeprecatedModeFlag(t *testing.T) {
	dir := t.TempDir()
	small := []string{"--records", "1000", "--junk-time", "100ms", "--n", "10", "--dir", dir}
	// runSplit: journal_export_test.go.
	out, errOut, code := runSplit(t, append([]string{"bench", "--journal"}, small...)...)
	if code != 0 {
		t.Fatalf("bench --journal exited %d:\n%s%s", code, out, errOut)
	}
	want := "saga-supervisor bench: --journal is deprecated: use saga-supervisor bench journal " + strings.Join(small, " ") + "\n"
	if errOut != want {
		t.Errorf("bench --journal said on stderr\n%q\nwant\n%q", errOut, want)
	}
	newOut, newErr, code := runSplit(t, append([]string{"bench", "journal"}, small...)...)
	if code != 0 || newErr != "" {
		t.Fatalf("bench journal exited %d:\n%s%s", code, newOut, newErr)
	}
	// The same report, but for the figures and the directory's name.
	shape := regexp.MustCompile(`[0-9][0-9.,]*(µs|ms|ns|s|k|M| kB| MB| B)?|saga-bench-[0-9]+`)
	blanks := regexp.MustCompile(`[ \t]+`)
	norm := func(s string) string { return blanks.ReplaceAllString(shape.ReplaceAllString(s, "#"), " ") }
	if got, want := norm(out), norm(newOut); got != want {
		t.Errorf("bench --journal printed\n%s\nbench journal\n%s", out, newOut)
	}
	assertEmptyDir(t, dir)
}
