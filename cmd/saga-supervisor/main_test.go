package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// The tests run the real binary, built once, as a user would.
var binary string

// testBinaryEnv, set, is the binary a child of a test runs (built by its
// parent).
const testBinaryEnv = "SAGA_TEST_BINARY"

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		// Fuzzing runs only a fuzz target, in this process and in fuzz
		// workers: none needs the binary, and building the race binary in
		// every worker would eat the whole fuzzing budget.
		os.Exit(m.Run())
	}
	if b := os.Getenv(testBinaryEnv); b != "" {
		// A child of a test (inOwnNetns): the parent built the binary.
		binary = b
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "saga-bin-")
	if err != nil {
		panic(err)
	}
	// Tests that run as root also run the binary as another user (nobody),
	// as a controller's user would: the directory must let them in.
	if err := os.Chmod(dir, 0o755); err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "saga-supervisor")
	// The race detector is on unless SAGA_TEST_NO_RACE is set, for
	// measuring latency figures on an optimised binary.
	args := []string{"build", "-race", "-o", binary, "."}
	if os.Getenv("SAGA_TEST_NO_RACE") != "" {
		args = []string{"build", "-o", binary, "."}
	}
	build := exec.Command("go", args...)
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the binary:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// run runs the binary and returns its combined output and exit code.
func run(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode()
	}
	t.Fatalf("running %v: %v", args, err)
	return "", -1
}

// demoJournal runs the demo once per test binary and returns its directory.
func demoDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	out, code := run(t, "demo", "--dir", dir)
	if code != 0 {
		t.Fatalf("demo exited %d:\n%s", code, out)
	}
	return dir
}

func TestDemo(t *testing.T) {
	dir := t.TempDir()
	out, code := run(t, "demo", "--dir", dir)
	if code != 0 {
		t.Fatalf("demo exited %d:\n%s", code, out)
	}
	// The acts, in order, each saying what it must.
	want := []string{
		"Act I", "FAILED", "elbow     servo   90.0°", // left half-moved
		"Act II", "REFUSED, nothing moved — LIMIT_MAX", "unwind clean",
		"step 3 elbow", "step 2 shoulder", "step 1 base",
		"Act III", "unwind partial", "fallback_safe", "unresolved", "halted: true",
		"Act IV", "kill -9", "unwind clean — retrace, finished by recovery", "step 4 gripper    in_doubt",
		"back at home",
		"Act V", "holding the arm mid-saga", "kill -9", "unwound clean", "step 1 base      45 → 0  compensated",
		"back where the controller found it", "OK:", "saga-supervisor graph --wal",
	}
	rest := out
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("demo output lacks %q (in order); output:\n%s", w, out)
		}
		rest = rest[i+len(w):]
	}
	// Act III must never call its report clean.
	act3 := out[strings.Index(out, "Act III"):strings.Index(out, "Act IV")]
	if strings.Contains(act3, "unwind clean") {
		t.Errorf("Act III calls a partial unwind clean:\n%s", act3)
	}
	// After Act IV the arm is home: the last world table shows the initial pose.
	home := out[strings.LastIndex(out, "back at home"):]
	for _, line := range []string{"base      servo   0.0°", "elbow     servo   20.0°", "gripper   servo   0.0°", "shoulder  servo   10.0°"} {
		if !strings.Contains(home, line) {
			t.Errorf("after recovery the world lacks %q:\n%s", line, home)
		}
	}
	// The journal draws with every non-clean state named.
	g, code := run(t, "graph", "--wal", filepath.Join(dir, "journal"))
	if code != 0 {
		t.Fatalf("graph exited %d:\n%s", code, g)
	}
	for _, w := range []string{"flowchart LR", "unwound PARTIAL", "FALLBACK SAFE", "UNRESOLVED", "IN DOUBT", ":::indoubt", ":::compfailed", "committed"} {
		if w == ":::compfailed" {
			continue // no step of the demo lands there; its style is still defined
		}
		if !strings.Contains(g, w) {
			t.Errorf("graph lacks %q", w)
		}
	}
	if one, code := run(t, "graph", "--wal", filepath.Join(dir, "journal"), "--saga", "2"); code != 0 || strings.Contains(one, "saga 1 ") {
		t.Errorf("graph --saga 2 exited %d or drew other sagas:\n%s", code, one)
	}
}

// frameOffsets returns the byte offset of each record in a one-segment
// journal, from the documented frame layout (64-byte header, 49+L a frame).
func frameOffsets(t *testing.T, dir string) (string, []int64, []int) {
	t.Helper()
	segs, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	if len(segs) != 1 {
		t.Fatalf("want one segment, have %v", segs)
	}
	var offs []int64
	var lens []int
	off := int64(64)
	err := wal.Scan(dir, wal.Options{}, 1, func(r wal.Record) error {
		offs = append(offs, off)
		lens = append(lens, len(r.Payload))
		off += int64(49 + len(r.Payload))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return segs[0], offs, lens
}

func TestVerifyAndRecoverRefuseAFlippedByte(t *testing.T) {
	dir := demoDir(t)
	journal := filepath.Join(dir, "journal")
	seg, offs, lens := frameOffsets(t, journal)
	k := len(offs) / 2 // a record in the middle
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	at := offs[k] + 17 + int64(lens[k]/2) // inside its payload
	b := make([]byte, 1)
	f.ReadAt(b, at)
	b[0] ^= 0x10
	f.WriteAt(b, at)
	f.Close()

	out, code := run(t, "verify", "--wal", journal)
	if code != 1 {
		t.Fatalf("verify exit %d, want 1:\n%s", code, out)
	}
	if want := fmt.Sprintf("record seq %d ", k+1); !strings.Contains(out, want) {
		t.Errorf("verify does not name the flipped record (%q):\n%s", want, out)
	}
	out, code = run(t, "recover", "--wal", journal, "--world", filepath.Join(dir, "arm.world"))
	if code == 0 || !strings.Contains(out, "corrupt") {
		t.Errorf("recover started on a corrupt journal (exit %d):\n%s", code, out)
	}
}

func TestVerifyTornTail(t *testing.T) {
	dir := demoDir(t)
	journal := filepath.Join(dir, "journal")
	seg, offs, lens := frameOffsets(t, journal)
	last := len(offs) - 1
	end := offs[last] + 49 + int64(lens[last])
	// A batch torn by a power cut after the last record: the first half of
	// a frame, never acknowledged. (Tearing the last record itself is no
	// longer a torn tail: the anchor names it as durable, and verify says
	// LOST — wal's TestFlipBitLastRecord.)
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, end-offs[last])
	f.ReadAt(frame, offs[last])
	f.WriteAt(frame[:len(frame)/2], end)
	f.Close()
	out, code := run(t, "verify", "--wal", journal)
	if code != 0 || !strings.Contains(out, "torn tail") {
		t.Fatalf("verify on a torn tail: exit %d, want 0 and a note:\n%s", code, out)
	}
	if want := fmt.Sprintf("OK: %d records", last+1); !strings.Contains(out, want) {
		t.Errorf("want %q:\n%s", want, out)
	}
	out, code = run(t, "recover", "--wal", journal, "--world", filepath.Join(dir, "arm.world"))
	if code != 0 || !strings.Contains(out, "torn tail cut") {
		t.Fatalf("recover on a torn tail: exit %d:\n%s", code, out)
	}
	if m := regexp.MustCompile(`kept in (\S+)`).FindStringSubmatch(out); m == nil {
		t.Errorf("recover does not say where the cut bytes are kept:\n%s", out)
	} else if _, err := os.Stat(filepath.Join(journal, filepath.Base(m[1]))); err != nil {
		t.Errorf("broken file: %v", err)
	}
	if out, code := run(t, "verify", "--wal", journal); code != 0 || strings.Contains(out, "torn") {
		t.Errorf("after the cut verify says (exit %d):\n%s", code, out)
	}
}

func TestVerifyUnreadable(t *testing.T) {
	if out, code := run(t, "verify", "--wal", filepath.Join(t.TempDir(), "nope")); code != 2 {
		t.Errorf("missing journal: exit %d, want 2:\n%s", code, out)
	}
	if out, code := run(t, "verify"); code != 2 {
		t.Errorf("no --wal: exit %d, want 2:\n%s", code, out)
	}
}

func TestSecondProcessIsRefused(t *testing.T) {
	dir := demoDir(t)
	journal := filepath.Join(dir, "journal")
	// Hold the lock from this process the way a running supervisor does.
	holder := exec.Command(binary, "demo-child", "--wal", journal, "--world", filepath.Join(dir, "arm.world"))
	stdout, _ := holder.StdoutPipe()
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { holder.Process.Kill(); holder.Wait() }()
	buf := make([]byte, 1)
	stdout.Read(buf) // the child prints once it owns the journal
	// A world of its own (recover needs one that exists), so that only the
	// journal is contended.
	other := filepath.Join(dir, "other.world")
	if b, err := os.ReadFile(filepath.Join(dir, "arm.world")); err != nil || os.WriteFile(other, b, 0o600) != nil {
		t.Fatalf("copying the world: %v", err)
	}
	out, code := run(t, "recover", "--wal", journal, "--world", other)
	if code == 0 || !strings.Contains(out, "owned by another process") {
		t.Errorf("a second process took the journal (exit %d):\n%s", code, out)
	}
}

// certify fails a journal with a partial unwind (the demo's Act III) and an
// unrecovered open saga, and passes one where everything ended clean.
func TestCertify(t *testing.T) {
	dir := demoDir(t)
	out, code := run(t, "certify", "--wal", filepath.Join(dir, "journal"))
	if code != 1 || !strings.Contains(out, "unwound PARTIAL") {
		t.Fatalf("certify on the demo journal (Act III is partial): exit %d\n%s", code, out)
	}
	// Act V's journal: one saga, unwound clean by the controller's will.
	out, code = run(t, "certify", "--wal", filepath.Join(dir, "act5", "journal"))
	if code != 0 || !strings.Contains(out, "PASS") {
		t.Fatalf("certify on a clean journal: exit %d\n%s", code, out)
	}
	// A saga left open by a crash nobody recovered never passes.
	child := exec.Command(binary, "demo-child", "--wal", filepath.Join(dir, "open"), "--world", filepath.Join(dir, "open.world"))
	stdout, _ := child.StdoutPipe()
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for seen := ""; !strings.Contains(seen, "driver hung"); {
		n, err := stdout.Read(buf)
		if err != nil {
			t.Fatalf("demo-child ended early: %v (%s)", err, seen)
		}
		seen += string(buf[:n])
	}
	child.Process.Kill()
	child.Wait()
	out, code = run(t, "certify", "--wal", filepath.Join(dir, "open"))
	if code != 1 || !strings.Contains(out, "OPEN (not recovered)") || !strings.Contains(out, "1 in doubt") {
		t.Fatalf("certify on an unrecovered crash: exit %d\n%s", code, out)
	}
	if _, code := run(t, "certify", "--wal", filepath.Join(dir, "nope")); code != 2 {
		t.Fatalf("certify on a missing journal: exit %d, want 2", code)
	}
}

func TestGuarantees(t *testing.T) {
	out, code := run(t, "guarantees")
	var g map[string][]string
	if code != 0 || json.Unmarshal([]byte(out), &g) != nil {
		t.Fatalf("guarantees: exit %d\n%s", code, out)
	}
	for _, k := range []string{"enforced_before_effect", "guaranteed_after", "not_claimed"} {
		if len(g[k]) == 0 {
			t.Errorf("guarantees has no %s", k)
		}
	}
}

// defaultYAMLForTests is the embedded default configuration as the tests
// that are not about access control start from: agents.allow is removed,
// so agents of any name may act, and the embedded broker takes anonymous
// clients. The security table (security_test.go)
// starts from the default as shipped.
func defaultYAMLForTests(t testing.TB) string {
	t.Helper()
	const allow = "  allow:\n    planner: {}      # the demo's controller: everything but reset\n    ctl:             # saga-supervisor ctl\n      ops: [hello, heartbeat, bye, begin, step, commit, abort, status]\n"
	text := string(config.DefaultYAML)
	if !strings.Contains(text, allow) {
		t.Fatal("the default config's agents.allow changed; adapt defaultYAMLForTests")
	}
	text = strings.Replace(text, allow, "", 1)
	// Anonymous clients on the embedded broker (loopback only): the agents
	// of these tests log in as nobody. Ignored, with a warning, when a
	// test points the daemon at mosquitto.
	const anon = "    anonymous: false\n"
	if !strings.Contains(text, anon) {
		t.Fatal("the default config's mqtt.auth.anonymous changed; adapt defaultYAMLForTests")
	}
	text = strings.Replace(text, anon, "    anonymous: true\n", 1)
	// No operator token unless a test names its file (replacing this
	// line): a generated one would land in the package's directory, the
	// daemon's working directory.
	const token, generate = "  reset_token_file: ./saga-data/operator-token\n", "  generate_reset_token: true\n"
	if !strings.Contains(text, token) || !strings.Contains(text, generate) {
		t.Fatal("the default config's http.reset_token_file or generate_reset_token changed; adapt defaultYAMLForTests")
	}
	text = strings.Replace(text, token, "  reset_token_file: \"\"\n", 1)
	return strings.Replace(text, generate, "  generate_reset_token: false\n", 1)
}
