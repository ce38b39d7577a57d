package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
)

// logDaemon runs `run` on the default config (free ports, temporary
// paths, an inline reset token so that start-up logs a warning), with
// stderr on its own pipe; journalStream: JOURNAL_STREAM names that pipe,
// as systemd names the journal's socket. It halts the daemon over HTTP (an
// error is logged), stops it with SIGTERM and returns its stderr lines.
func logDaemon(t *testing.T, journalStream bool, args ...string) []string {
	t.Helper()
	httpAddr := fmt.Sprintf("127.0.0.1:%d", testtool.FreePort(t))
	path := daemonConfig(t, httpAddr)
	b, _ := os.ReadFile(path)
	os.WriteFile(path, []byte(strings.Replace(string(b), "  reset_token_file: "+filepath.Join(filepath.Dir(path), "operator-token"),
		"  reset_token: inline-0123456789abcdef0123456789abcdef", 1)), 0o600)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command(binary, append([]string{"run", "--config", path}, args...)...)
	cmd.Env = os.Environ()
	if journalStream {
		var st syscall.Stat_t
		if err := syscall.Fstat(int(w.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		cmd.Env = append(cmd.Env, fmt.Sprintf("JOURNAL_STREAM=%d:%d", st.Dev, st.Ino))
	}
	stdout := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = stdout, w // stderr is the pipe itself, as journald's socket would be
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan []string, 1)
	go func() {
		var got []string
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			got = append(got, sc.Text())
		}
		lines <- got
	}()
	d := &daemonProc{t: t, http: httpAddr, out: stdout}
	d.waitReady()
	req, _ := http.NewRequest(http.MethodPost, "http://"+httpAddr+"/api/v1/halt", strings.NewReader(`{"reason":"log\ntest"}`))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	daemontest.WaitFor(t, "the halt", 10*time.Second, func() bool { return d.status()["halted"] == true })
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, stdout.String())
	}
	select {
	case got := <-lines:
		return got
	case <-time.After(10 * time.Second):
		t.Fatal("stderr never closed")
	}
	return nil
}

// --log-format json: every line the daemon writes on stderr, from start to
// stop, is one JSON object with slog's time, level and msg.
func TestRunLogFormatJSON(t *testing.T) {
	lines := logDaemon(t, true, "--log-format", "json")
	levels := map[string]int{}
	for i, line := range lines {
		var rec struct {
			Time  time.Time `json:"time"`
			Level string    `json:"level"`
			Msg   string    `json:"msg"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Time.IsZero() || rec.Level == "" || rec.Msg == "" {
			t.Fatalf("stderr line %d is not a JSON log record (%v): %s\nall:\n%s", i+1, err, line, strings.Join(lines, "\n"))
		}
		levels[rec.Level]++
	}
	if levels["WARN"] == 0 || levels["INFO"] == 0 || !strings.Contains(strings.Join(lines, "\n"), `"msg":"stopped"`) {
		t.Fatalf("want warnings, infos and the stop among:\n%s", strings.Join(lines, "\n"))
	}
}

// Under systemd, stderr is the journal's stream and JOURNAL_STREAM names
// it: the default format (auto) leads every line with its syslog priority,
// so that journalctl -p filters by level, and leaves the time to journald.
func TestRunLogFormatAutoJournal(t *testing.T) {
	lines := logDaemon(t, true)
	prio := map[string]int{}
	for i, line := range lines {
		p, rest, ok := strings.Cut(line, ">")
		want := map[string]string{"<3": "level=ERROR ", "<4": "level=WARN ", "<6": "level=INFO ", "<7": "level=DEBUG "}[p]
		if !ok || want == "" || !strings.HasPrefix(rest, want) {
			t.Fatalf("stderr line %d has no priority of its level: %q\nall:\n%s", i+1, line, strings.Join(lines, "\n"))
		}
		prio[p]++
	}
	if prio["<3"] == 0 || prio["<4"] == 0 || prio["<6"] == 0 {
		t.Fatalf("want errors (the halt), warnings (the inline token) and infos among:\n%s", strings.Join(lines, "\n"))
	}
	// Text, without the journal: the time leads.
	text := logDaemon(t, false, "--log-level", "warn")
	if len(text) == 0 {
		t.Fatal("no warning outside the journal")
	}
	for i, line := range text {
		if !strings.HasPrefix(line, "time=") {
			t.Fatalf("stderr line %d outside the journal: %q", i+1, line)
		}
	}
}

func TestRunLogFormatInvalid(t *testing.T) {
	out, code := run(t, "run", "--log-format", "syslog")
	if code != 2 || !strings.Contains(out, `--log-format: "syslog" is not a log format: give auto, text, json or journal`) {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}
