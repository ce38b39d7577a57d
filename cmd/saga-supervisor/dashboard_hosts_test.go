package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// The dashboard in a real browser behind the listener's guard (issue 28):
// loaded from http://127.0.0.1:PORT and from http://localhost:PORT, its
// E-STOP halts and its reset form resets (both POST with the page's
// Origin). A page at evil.example:PORT — the name resolved to 127.0.0.1
// by the browser, as a DNS rebinding attack makes it — gets no dashboard,
// reads no status and halts nothing, neither on its own origin nor by
// posting to the supervisor's.
func TestDashboardHostsInChromium(t *testing.T) {
	chrome := chromium(t)
	dir := t.TempDir()
	ports := stablePorts(t, 2)
	port := fmt.Sprint(ports[0])
	httpAddr, mqttAddr := "127.0.0.1:"+port, fmt.Sprintf("127.0.0.1:%d", ports[1])
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(dashToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	text := string(config.DefaultYAML)
	for old, new := range map[string]string{
		"  listen: 127.0.0.1:1883":                       "  listen: " + mqttAddr,
		"  listen: 127.0.0.1:8080":                       "  listen: " + httpAddr,
		"  reset_token_file: ./saga-data/operator-token": "  reset_token_file: ./token",
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
		// The rebinding attacker's name, resolved to this machine.
		chromedp.Flag("host-resolver-rules", "MAP evil.example 127.0.0.1"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.CombinedOutput(&chromeOut),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	defer cancelCtx()
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
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
	waitJS := func(what, expr string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(15*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
			text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("waiting for %s (%s): %v\npage:\n%s", what, expr, err, text)
		}
	}
	// js runs an async expression in the page and returns its string.
	js := func(what, expr string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return s
	}
	halted := func() bool {
		t.Helper()
		h, _ := d.status()["halted"].(bool)
		return h
	}

	for _, base := range []string{"http://127.0.0.1:" + port, "http://localhost:" + port} {
		do("loading the page from "+base, chromedp.Navigate(base+"/"))
		waitJS("live data from "+base, `document.getElementById("conn").textContent === "live" && document.getElementById("state").textContent === "READY"`)
		do("pressing E-STOP on "+base, chromedp.Click(chromedp.ID("estop")))
		waitJS("the halt from "+base, `document.getElementById("state").textContent === "HALTED" && document.getElementById("halt-reason").textContent.includes("dashboard E-STOP")`)
		if code, body := d.get("/readyz"); code != 503 || !strings.Contains(body, "dashboard E-STOP") {
			t.Fatalf("readyz after the E-STOP on %s: %d %q", base, code, body)
		}
		do("resetting on "+base, chromedp.SendKeys(chromedp.ID("token"), dashToken), chromedp.Click(chromedp.ID("reset")))
		waitJS("the reset from "+base, `document.getElementById("state").textContent === "READY"`)
		if code, _ := d.get("/readyz"); code != 200 {
			t.Fatalf("readyz after the reset on %s: %d", base, code)
		}
	}

	// The rebinding page: no dashboard, and from its own origin (same-origin
	// for the browser) no status, no events and no halt.
	evil := "http://evil.example:" + port
	do("loading the rebinding page", chromedp.Navigate(evil+"/"))
	waitJS("the refusal instead of the dashboard", `document.body.innerText.includes("HOST_NOT_ALLOWED") && !document.getElementById("estop")`)
	for _, probe := range []struct{ what, expr, want string }{
		{"status", `fetch("/api/v1/status").then(r => r.status + " " + r.headers.get("content-type"))`, "421 application/json"},
		{"metrics", `fetch("/metrics").then(r => String(r.status))`, "421"},
		{"events", `fetch("/api/v1/events").then(r => r.status + " " + r.headers.get("content-type"))`, "421 application/json"},
		{"halt", `fetch("/api/v1/halt", {method: "POST", headers: {"Content-Type": "application/json"}, body: '{"reason":"rebound"}'}).then(r => r.text())`, `"code":"HOST_NOT_ALLOWED"`},
		{"reset", `fetch("/api/v1/reset", {method: "POST", headers: {"Content-Type": "application/json", "Authorization": "Bearer ` + dashToken + `"}, body: "{}"}).then(r => String(r.status))`, "421"},
	} {
		if got := js("the rebinding page's "+probe.what, probe.expr); !strings.Contains(got, probe.want) {
			t.Errorf("the rebinding page's %s: %q, want %q", probe.what, got, probe.want)
		}
	}
	// From the same page, to the supervisor's own origin: the JSON halt
	// needs a preflight, which is refused; the text/plain one, which does
	// not, is refused for its Origin. Neither is readable or halts.
	for _, probe := range []struct{ what, expr string }{
		{"json", `fetch("http://127.0.0.1:` + port + `/api/v1/halt", {method: "POST", headers: {"Content-Type": "application/json"}, body: "{}"}).then(r => "read " + r.status, e => "blocked " + e.name)`},
		{"text/plain", `fetch("http://127.0.0.1:` + port + `/api/v1/halt", {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"}, body: "{}"}).then(r => "opaque " + r.type, e => "blocked " + e.name)`},
		{"status", `fetch("http://127.0.0.1:` + port + `/api/v1/status").then(r => "read " + r.status, e => "blocked " + e.name)`},
	} {
		got := js("a cross-origin "+probe.what, probe.expr)
		if strings.HasPrefix(got, "read") {
			t.Errorf("a cross-origin %s was readable: %s", probe.what, got)
		}
		t.Logf("cross-origin %s from the rebinding page: %s", probe.what, got)
	}
	time.Sleep(300 * time.Millisecond) // a halt would have latched by now
	if halted() {
		t.Fatalf("halted by the rebinding page: %v", d.status()["halt_reason"])
	}
}
