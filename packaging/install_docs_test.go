package packaging

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The install path's commands, as README.md and docs/HARDWARE.md print
// them. TestInstallPath runs each; what it runs comes from the docs, so a
// documented command that no longer works fails the test.
//
// A fenced block right after a line `<!-- install-path … -->` is on the
// path: every command in a ```sh block, every line of a ```yaml block
// (a config edit). A command printed anywhere else in the two files —
// another fenced block or inline code — that runs saga-supervisor on the
// installed config is on the path too, so a command the docs print
// outside the marked blocks cannot escape the test.

// pathDocs are the files whose install-path commands the test runs.
var pathDocs = []string{"README.md", "docs/HARDWARE.md"}

// installedConfigPath is the config the package installs; a command that
// names it is on the install path.
const installedConfigPath = "/etc/saga-supervisor/config.yaml"

// pathLine is one documented command (or config line) on the install path.
type pathLine struct {
	where string // file:line
	raw   string // as printed, continuation lines and all: what the shell is given
	cmd   string // one line: continuations joined, the comment dropped, spaces collapsed
	yaml  bool   // a line of a config snippet, not a command
	ran   bool   // a step of the test has run it (or applied it)
}

// installPath reads the install path's lines from the docs under repo.
func installPath(t *testing.T, repo string) []*pathLine {
	t.Helper()
	var out []*pathLine
	for _, name := range pathDocs {
		b, err := os.ReadFile(filepath.Join(repo, name))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, docPathLines(t, name, string(b))...)
	}
	return out
}

var (
	pathMarker = regexp.MustCompile(`^<!-- install-path\b.*-->\s*$`)
	fence      = regexp.MustCompile("^```\\s*(\\w*)\\s*$")
	inlineCode = regexp.MustCompile("`([^`]+)`")
	// A backslash at the end of a line continues the command.
	continuation = regexp.MustCompile(`\\[ \t]*\n\s*`)
)

// docPathLines is installPath for one file's text.
func docPathLines(t *testing.T, name, text string) []*pathLine {
	t.Helper()
	lines := strings.Split(text, "\n")
	var out []*pathLine
	var prose strings.Builder // the text outside fenced blocks, for inline code
	marked, inBlock, lang, blockMarked := false, false, "", false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		where := name + ":" + strconv.Itoa(i+1)
		if m := fence.FindStringSubmatch(l); m != nil {
			if !inBlock {
				inBlock, lang, blockMarked, marked = true, m[1], marked, false
				if blockMarked && lang != "sh" && lang != "yaml" {
					t.Fatalf("%s: an install-path block must be ```sh or ```yaml, not %q", where, lang)
				}
			} else {
				inBlock = false
			}
			prose.WriteString("\n")
			continue
		}
		if marked {
			t.Fatalf("%s: the install-path marker is not followed by a fenced block", name+":"+strconv.Itoa(i))
		}
		if !inBlock {
			marked = pathMarker.MatchString(l)
			prose.WriteString(l + "\n")
			continue
		}
		prose.WriteString("\n")
		if lang == "yaml" && blockMarked {
			if strings.TrimSpace(l) != "" && !strings.HasPrefix(strings.TrimSpace(l), "#") {
				out = append(out, &pathLine{where: where, raw: l, cmd: l, yaml: true})
			}
			continue
		}
		if lang != "sh" && lang != "" {
			continue
		}
		// A command, with its continuation lines.
		raw := l
		for strings.HasSuffix(strings.TrimRight(raw, " "), "\\") && i+1 < len(lines) {
			i++
			raw += "\n" + lines[i]
			prose.WriteString("\n")
		}
		cmd := normCommand(raw)
		if cmd == "" || strings.HasPrefix(cmd, "#") || strings.HasPrefix(cmd, "$ ") {
			continue
		}
		if blockMarked || onInstallPath(cmd) {
			out = append(out, &pathLine{where: where, raw: raw, cmd: cmd})
		}
	}
	if marked || inBlock {
		t.Fatalf("%s: an install-path marker or a fenced block is not closed", name)
	}
	// Inline code in the prose, which may run over a line break.
	p := prose.String()
	for _, m := range inlineCode.FindAllStringSubmatchIndex(p, -1) {
		cmd := normCommand(p[m[2]:m[3]])
		if onInstallPath(cmd) {
			line := 1 + strings.Count(p[:m[0]], "\n")
			out = append(out, &pathLine{where: name + ":" + strconv.Itoa(line), raw: cmd, cmd: cmd})
		}
	}
	return out
}

// onInstallPath: a command that runs saga-supervisor on the installed config.
func onInstallPath(cmd string) bool {
	return (strings.HasPrefix(cmd, "sudo ") || strings.HasPrefix(cmd, "saga-supervisor ")) &&
		strings.Contains(cmd, "saga-supervisor ") && strings.Contains(cmd, installedConfigPath)
}

// normCommand is a command on one line: continuations joined, the trailing
// comment (a # after a blank, outside quotes) dropped, blanks collapsed.
func normCommand(s string) string {
	s = continuation.ReplaceAllString(s, " ")
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t' || s[i-1] == '\n'):
			s = s[:i]
		}
	}
	return strings.Join(strings.Fields(s), " ")
}

// steps hands the documented lines to the test's steps and says which
// were never run.
type steps struct {
	t     *testing.T
	lines []*pathLine
}

// take returns the distinct documented commands matching re (on their
// one-line form), marking every line printing them as run. None is a
// failure: the docs no longer print what the step runs.
func (s *steps) take(re string) []*pathLine {
	s.t.Helper()
	rx := regexp.MustCompile(re)
	var out []*pathLine
	seen := map[string]bool{}
	for _, l := range s.lines {
		if l.yaml || !rx.MatchString(l.cmd) {
			continue
		}
		l.ran = true
		if !seen[l.cmd] {
			seen[l.cmd] = true
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		s.t.Fatalf("README.md and docs/HARDWARE.md no longer print a command matching %q on the install path", re)
	}
	return out
}

// one is take for a step that runs exactly one documented command.
func (s *steps) one(re string) *pathLine {
	s.t.Helper()
	l := s.take(re)
	if len(l) != 1 {
		var w []string
		for _, x := range l {
			w = append(w, x.where+": "+x.cmd)
		}
		s.t.Fatalf("the docs print %d different commands matching %q; the test runs one:\n%s", len(l), re, strings.Join(w, "\n"))
	}
	return l[0]
}

// yaml returns the lines of the install path's config snippets, marking
// them applied.
func (s *steps) yaml() []*pathLine {
	var out []*pathLine
	for _, l := range s.lines {
		if l.yaml {
			l.ran = true
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		s.t.Fatal("the docs no longer print the config lines that point the supervisor at mosquitto")
	}
	return out
}

// notRun fails the test for every documented line no step ran.
func (s *steps) notRun() {
	s.t.Helper()
	for _, l := range s.lines {
		if !l.ran {
			s.t.Errorf("%s prints %q on the install path, and TestInstallPath does not run it: add a step", l.where, l.cmd)
		}
	}
}

// The docs' install-path lines are found: marked blocks whole, commands on
// the installed config elsewhere, comments and continuations handled.
func TestInstallPathDocLines(t *testing.T) {
	doc := "intro `sudo saga-supervisor ctl --config /etc/saga-supervisor/config.yaml\nstatus` inline\n" +
		"<!-- install-path: run by the test -->\n```sh\nmake deb        # a comment\n# only a comment\n" +
		"sudo thing --x \\\n     --y 'a # b'   # c\n```\n\n```sh\nls\nsaga-supervisor run --config /etc/saga-supervisor/config.yaml # x\n```\n" +
		"<!-- install-path -->\n```yaml\nmqtt:\n  broker: tcp://x   # y\n```\n"
	got := docPathLines(t, "D", doc)
	want := []struct{ where, cmd string }{
		{"D:5", "make deb"},
		{"D:7", "sudo thing --x --y 'a # b'"},
		{"D:13", "saga-supervisor run --config /etc/saga-supervisor/config.yaml"},
		{"D:17", "mqtt:"},
		{"D:18", "  broker: tcp://x   # y"},
		{"D:1", "sudo saga-supervisor ctl --config /etc/saga-supervisor/config.yaml status"},
	}
	if len(got) != len(want) {
		for _, g := range got {
			t.Logf("%s %q", g.where, g.cmd)
		}
		t.Fatalf("%d lines, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].where != w.where || got[i].cmd != w.cmd {
			t.Errorf("line %d: %s %q, want %s %q", i, got[i].where, got[i].cmd, w.where, w.cmd)
		}
	}
	// Every command of the real docs' marked blocks is found.
	lines := installPath(t, root)
	if len(lines) == 0 {
		t.Fatal("no install-path lines in the docs")
	}
}
