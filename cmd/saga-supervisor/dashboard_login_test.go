package main

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// The dashboard beyond loopback in a real browser (issue 28): the daemon
// serves HTTPS on 0.0.0.0 with the self-signed certificate it generated
// and a login. Chromium trusts exactly that certificate — its public key
// pinned with --ignore-certificate-errors-spki-list, in this test only —
// and: is sent to the login page; logs in with the viewer token and sees
// the live status; halts; is refused the reset (FORBIDDEN, still halted);
// holds a session cookie no script can read, HttpOnly, Secure,
// SameSite=Strict; logs out and is sent back to the login; logs in as the
// operator and resets without typing the token again.
func TestDashboardLoginInChromium(t *testing.T) {
	chrome := chromium(t)
	shots := screenshots(t)
	dir := t.TempDir()
	ports := stablePorts(t, 2)
	port := fmt.Sprint(ports[0])
	cfgPath := loginConfig(t, dir, "0.0.0.0:"+port, fmt.Sprintf("127.0.0.1:%d", ports[1]), "", 12*time.Hour)
	d := &daemonProc{t: t, cfgPath: cfgPath, http: "127.0.0.1:" + port}
	d.start()
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			d.cmd.Process.Kill()
			d.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("daemon log (last 8 KiB):\n%s", lastBytes(d.out.String(), 8<<10))
		}
	})
	banner := regexp.MustCompile(`(?m)^  TLS      (\S+)  \(SHA-256 ([0-9A-F:]{95})`)
	daemontestWait(t, "the banner's TLS line", 20*time.Second, func() bool { return banner.MatchString(d.out.String()) })
	b, err := os.ReadFile(banner.FindStringSubmatch(d.out.String())[1])
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	spki := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	vb, err := os.ReadFile(filepath.Join(dir, "viewer-token"))
	if err != nil {
		t.Fatal(err)
	}
	viewer := strings.TrimSpace(string(vb))
	base := "https://127.0.0.1:" + port

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
		// This certificate only, as an operator who compared its
		// fingerprint accepts it; never --ignore-certificate-errors.
		chromedp.Flag("ignore-certificate-errors-spki-list", base64.StdEncoding.EncodeToString(spki[:])),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1400),
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
	// waitJS waits until the page's expression is true; the page may
	// navigate meanwhile (to the login, back to the dashboard), which ends
	// one evaluation: the next one asks the new page.
	waitJS := func(what, expr string) {
		t.Helper()
		var err error
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			var ok bool
			if ok, err = chromedp.Run(ctx, chromedp.Evaluate[bool](expr)); err == nil && ok {
				return
			}
		}
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.location.href + "\n" + document.body.innerText`))
		t.Fatalf("waiting for %s (%s): %v\npage:\n%s", what, expr, err, text)
	}
	shoot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		path := filepath.Join(shots, "dashboard-login-"+name+".png")
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d bytes)", path, len(png))
	}
	logIn := func(token string) {
		t.Helper()
		do("the login page", chromedp.Navigate(base+"/"))
		waitJS("the login page", `location.pathname === "/login" && !!document.getElementById("login-form")`)
		do("logging in", chromedp.SendKeys(chromedp.ID("login-token"), token), chromedp.Click(chromedp.ID("login-submit")))
		waitJS("the dashboard, live", `location.pathname === "/" && document.getElementById("conn").textContent === "live"`)
	}

	// No session: the dashboard sends the browser to the login page.
	do("loading the dashboard", chromedp.Navigate(base+"/"))
	waitJS("the login page", `location.pathname === "/login" && !!document.getElementById("login-form")`)
	shoot("login")
	// A wrong token: the refusal, still on the login page, no cookie.
	do("a wrong token", chromedp.SendKeys(chromedp.ID("login-token"), "not-the-token-0123456789abcdef0123456789"), chromedp.Click(chromedp.ID("login-submit")))
	waitJS("the refusal", `document.getElementById("login-msg").textContent.includes("UNAUTHORIZED") && location.pathname === "/login"`)

	// The viewer: live status, a halt, a refused reset.
	logIn(viewer)
	waitJS("the arm's rows", `document.querySelectorAll("#actuators tbody tr[data-actuator]").length === 4`)
	waitJS("who", `document.getElementById("who-text").textContent.startsWith("logged in as viewer")`)
	if s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("state").textContent`)); s != "READY" {
		t.Errorf("state %q, want READY", s)
	}
	shoot("viewer")
	if got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.cookie`)); err != nil || got != "" {
		t.Errorf("the page reads a cookie: %q %v", got, err)
	}
	cs, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{base + "/"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(cs.Cookies) != 1 {
		t.Fatalf("cookies %+v, want the session's", cs.Cookies)
	}
	if c := cs.Cookies[0]; c.Name != "__Host-saga-session" || !c.HTTPOnly || !c.Secure || c.SameSite != network.CookieSameSiteStrict || c.Path != "/" || c.Value == viewer {
		t.Errorf("the session cookie: %+v", c)
	}

	do("pressing E-STOP", chromedp.Click(chromedp.ID("estop")))
	waitJS("the halt banner", `document.getElementById("state").textContent === "HALTED" && document.getElementById("halt-reason").textContent.includes("viewer: dashboard E-STOP")`)
	do("the viewer resets", chromedp.Click(chromedp.ID("reset")))
	waitJS("the refusal", `document.getElementById("action-msg").textContent.includes("FORBIDDEN")`)
	time.Sleep(300 * time.Millisecond)
	if s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("state").textContent`)); s != "HALTED" {
		t.Fatalf("after the viewer's reset: %q, want HALTED", s)
	}
	shoot("viewer-reset-refused")

	// Log out: back to the login page, and the dashboard asks again.
	do("logging out", chromedp.Click(chromedp.ID("logout")))
	waitJS("the login page", `location.pathname === "/login"`)
	do("the dashboard again", chromedp.Navigate(base+"/"))
	waitJS("the login page again", `location.pathname === "/login"`)

	// The operator resets without the token typed again.
	logIn(operatorTokenIn(t, dir))
	waitJS("who", `document.getElementById("who-text").textContent.startsWith("logged in as operator")`)
	waitJS("halted", `document.getElementById("state").textContent === "HALTED"`)
	do("the operator resets", chromedp.SendKeys(chromedp.ID("operator"), "dash-login-test"), chromedp.Click(chromedp.ID("reset")))
	waitJS("ready", `document.getElementById("state").textContent === "READY"`)
	shoot("operator-reset")
}

// operatorTokenIn is the operator token of loginConfig's daemon.
func operatorTokenIn(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "operator-token"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
