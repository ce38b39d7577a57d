package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// dashToken is the operator token of the dashboard test's daemon.
const dashToken = "dashboard-operator-0123456789abcdef-test"

// chromium finds Debian's chromium: the test fails without it in CI, and
// skips elsewhere.
func chromium(t *testing.T) string {
	t.Helper()
	return testtool.Need(t, "chromium", "chromium", "chromium-browser", "google-chrome")
}

// screenshots is where the test leaves its PNGs: $SAGA_SCREENSHOTS, or
// the test's temporary directory.
func screenshots(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("SAGA_SCREENSHOTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The live dashboard in a real browser against the real daemon, on the
// embedded default config (its relative paths in a temporary working
// directory; only the ports and the operator token file changed): the page
// shows the arm, follows a step made over MQTT without a reload (SSE),
// latches the E-STOP pressed on it (as /readyz does), shows the coded
// refusal of a wrong token and clears the halt with the right one, never
// keeping the token, and says DISCONNECTED when the daemon goes.
func TestDashboardInChromium(t *testing.T) {
	chrome := chromium(t)
	shots := screenshots(t)
	dir := t.TempDir()
	ports := stablePorts(t, 2)
	httpAddr, mqttAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(dashToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	text := string(config.DefaultYAML)
	for old, new := range map[string]string{
		"  listen: 127.0.0.1:1883":                       "  listen: " + mqttAddr,
		"  listen: 127.0.0.1:8080":                       "  listen: " + httpAddr,
		`  reset_token_file: ./saga-data/operator-token`: "  reset_token_file: ./token",
	} {
		if !strings.Contains(text, old) {
			t.Fatalf("the default config no longer has %q; adapt the dashboard test", old)
		}
		text = strings.Replace(text, old, new, 1)
	}
	if err := os.WriteFile(filepath.Join(dir, "arm.yaml"), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	d := &daemonProc{t: t, http: httpAddr, cfgPath: "arm.yaml"}
	d.out = &syncBuffer{}
	d.cmd = exec.Command(binary, "run", "--config", "arm.yaml")
	d.cmd.Dir = dir
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			d.cmd.Process.Kill()
			d.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("daemon log (last 8 KiB):\n%s", lastBytes(d.out.String(), 8<<10))
		}
	})
	d.waitReady()

	// The browser: headless, and quiet — this machine's network is
	// closed, and Chromium's own background connections would be refused.
	var chromeOut syncBuffer
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1400),
		chromedp.CombinedOutput(&chromeOut),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	defer cancelCtx()
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	defer cancelTimeout()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("chromium's output (last 4 KiB):\n%s", lastBytes(chromeOut.String(), 4<<10))
		}
	})

	do := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// waitJS waits until the page's expression is true.
	waitJS := func(what, expr string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(15*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
			text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("waiting for %s (%s): %v\npage:\n%s", what, expr, err, text)
		}
	}
	shoot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		path := filepath.Join(shots, "dashboard-"+name+".png")
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d bytes)", path, len(png))
	}
	text1 := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector(`+jsString(sel)+`) || {}).textContent || ""`))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	do("loading the page", chromedp.Navigate("http://"+httpAddr+"/"))
	waitJS("live data", `document.getElementById("conn").textContent === "live" && !document.body.classList.contains("stale")`)
	waitJS("the arm's rows", `document.querySelectorAll("#actuators tbody tr[data-actuator]").length === 4`)
	waitJS("elbow at 20", `document.querySelector('tr[data-actuator="elbow"] .commanded').textContent === "20.00"`)
	if s := text1("#state"); s != "READY" {
		t.Errorf("state %q, want READY", s)
	}
	// A mark the page loses if it reloads.
	do("marking the page", chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`))
	shoot("ready")

	// A controller moves the base over MQTT: the page follows.
	password, err := os.ReadFile(filepath.Join(dir, "saga-data", "mqtt", "credentials", "planner"))
	if err != nil {
		t.Fatal(err)
	}
	agent := daemontest.NewAgentLogin(t, "tcp://"+mqttAddr, arm1, "planner", strings.TrimSpace(string(password)))
	agent.Hello(30 * time.Second)
	saga := agent.Must(map[string]any{"op": "begin"}).Saga
	agent.Must(map[string]any{"op": "step", "saga": saga, "actuator": "base", "value": 45})
	waitJS("base at 45 without a reload", `window.notReloaded === true && document.querySelector('tr[data-actuator="base"] .commanded').textContent === "45.00"`)
	waitJS("the open saga and its step", fmt.Sprintf(`(document.querySelector('[data-saga="%d"]') || {}).textContent?.includes("base → 45.00")`, saga))
	waitJS("the step in the journal's tail", `[...document.querySelectorAll("#journal tbody tr")].some(r => r.cells[1].textContent === "INTENT" && r.cells[3].textContent === "base" && r.cells[4].textContent === "45.00")`)
	shoot("moved")

	// The E-STOP: the page shows the latch, and so does /readyz.
	do("pressing E-STOP", chromedp.Click(chromedp.ID("estop")))
	waitJS("the halt banner", `document.getElementById("state").textContent === "HALTED" && document.getElementById("halt-reason").textContent.includes("dashboard E-STOP")`)
	if code, body := d.get("/readyz"); code != 503 || !strings.Contains(body, "halted: http 127.0.0.1: dashboard E-STOP") {
		t.Fatalf("readyz after the E-STOP: %d %q", code, body)
	}
	shoot("halted")

	// A wrong token: refused with its code, the field cleared, still halted.
	do("a wrong token", chromedp.SendKeys(chromedp.ID("token"), "not-the-token"), chromedp.Click(chromedp.ID("reset")))
	waitJS("the refusal", `document.getElementById("action-msg").textContent.includes("UNAUTHORIZED")`)
	if v := text1("#state"); v != "HALTED" {
		t.Errorf("after a wrong token: %q", v)
	}
	// The right one clears the halt.
	do("the token", chromedp.SendKeys(chromedp.ID("token"), dashToken), chromedp.SendKeys(chromedp.ID("operator"), "dash-test"), chromedp.Click(chromedp.ID("reset")))
	waitJS("the halt cleared", `document.getElementById("state").textContent === "READY"`)
	if code, body := d.get("/readyz"); code != 200 {
		t.Fatalf("readyz after the reset: %d %q", code, body)
	}
	kept, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("token").value + "|" + localStorage.length + "|" + sessionStorage.length`))
	if err != nil || kept != "|0|0" {
		t.Errorf("the token field and storage after the reset: %q (%v), want empty", kept, err)
	}
	shoot("reset")

	// The daemon goes: the page says so and stops showing data as live.
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.cmd.Wait()
	waitJS("DISCONNECTED", `document.getElementById("conn").textContent.startsWith("DISCONNECTED") && document.body.classList.contains("stale")`)
	shoot("disconnected")
}

// jsString quotes s for a JavaScript expression.
func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
