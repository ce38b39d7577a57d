package main

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// systemd-dropin writes the unit's IPAddressAllow= from the config: any
// for a listener on every address, the interface's network for one on an
// address of this machine, what --allow says instead; a config on
// loopback gets none, and a drop-in it wrote before is removed. It never
// replaces or removes a file it did not write, and it refuses a config
// check-config refuses (HTTP beyond loopback without TLS).
func TestSystemdDropin(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "saga-supervisor.service.d", "http.conf")
	cfg := func(name, http string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("device: arm1\nhttp: "+http+"\nactuators:\n  base: {kind: servo, driver: sim, min: 0, max: 1}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	every := cfg("every.yaml", "{listen: 0.0.0.0:8443, tls: {self_signed: true}}")
	msg, code := run(t, "systemd-dropin", "--config", every, "--out", out)
	b, err := os.ReadFile(out)
	if code != 0 || err != nil || !strings.HasPrefix(string(b), "# Written by saga-supervisor systemd-dropin --config "+every) ||
		!strings.HasSuffix(string(b), "\n[Service]\nIPAddressAllow=any\n") || !strings.Contains(string(b), "http.listen 0.0.0.0:8443 (TLS, login): any") {
		t.Fatalf("every address: exit %d %v\n%s\n%s", code, err, msg, b)
	}
	if st, _ := os.Stat(out); st.Mode().Perm() != 0o644 {
		t.Errorf("the drop-in's mode %v, want 0644", st.Mode())
	}
	if !strings.Contains(msg, "sudo systemctl daemon-reload && sudo systemctl restart saga-supervisor") {
		t.Errorf("no next step: %s", msg)
	}
	// --allow instead; a bad one is a usage error.
	if msg, code := run(t, "systemd-dropin", "--config", every, "--out", "-", "--allow", "192.168.1.7/24, fd00::/64"); code != 0 ||
		!strings.Contains(msg, "IPAddressAllow=192.168.1.0/24 fd00::/64\n") {
		t.Errorf("--allow: exit %d\n%s", code, msg)
	}
	if msg, code := run(t, "systemd-dropin", "--config", every, "--out", "-", "--allow", "192.168.1.300/24"); code != 2 {
		t.Errorf("a bad --allow: exit %d\n%s", code, msg)
	}
	// A listener on an address of this machine: that interface's network.
	if lan := lanAddress(); lan != "" {
		want := ""
		addrs, _ := net.InterfaceAddrs()
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().String() == lan {
				want = p.Masked().String()
			}
		}
		one := cfg("one.yaml", "{listen: '"+lan+":8443', tls: {self_signed: true}}")
		if msg, code := run(t, "systemd-dropin", "--config", one, "--out", "-"); code != 0 || !strings.Contains(msg, "IPAddressAllow="+want+"\n") {
			t.Errorf("a listener on %s: exit %d, want IPAddressAllow=%s\n%s", lan, code, want, msg)
		}
	}
	if msg, code := run(t, "systemd-dropin", "--config", cfg("none.yaml", "{listen: '192.0.2.254:8443', tls: {self_signed: true}}"), "--out", "-"); code != 1 ||
		!strings.Contains(msg, "no interface of this machine has the address 192.0.2.254") {
		t.Errorf("an address of no interface: exit %d\n%s", code, msg)
	}
	// Refused as check-config refuses it.
	if msg, code := run(t, "systemd-dropin", "--config", cfg("plain.yaml", "{listen: 0.0.0.0:8080}"), "--out", out); code != 1 || !strings.Contains(msg, "needs TLS and a login") {
		t.Errorf("HTTP beyond loopback without TLS: exit %d\n%s", code, msg)
	}
	// Back on loopback: the drop-in goes.
	loop := cfg("loop.yaml", "{listen: 127.0.0.1:8080}")
	if msg, code := run(t, "systemd-dropin", "--config", loop, "--out", out); code != 0 || !strings.Contains(msg, "Removed "+out) {
		t.Errorf("loopback: exit %d\n%s", code, msg)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("the drop-in is still there: %v", err)
	}
	// Someone else's file is neither replaced nor removed.
	os.WriteFile(out, []byte("[Service]\nIPAddressAllow=10.0.0.0/8\n"), 0o644)
	if msg, code := run(t, "systemd-dropin", "--config", every, "--out", out); code != 1 || !strings.Contains(msg, "is not one this command wrote") {
		t.Errorf("over someone else's file: exit %d\n%s", code, msg)
	}
	if msg, code := run(t, "systemd-dropin", "--config", loop, "--out", out); code != 1 || !strings.Contains(msg, "is not one this command wrote") {
		t.Errorf("removing someone else's file: exit %d\n%s", code, msg)
	}
	if b, _ := os.ReadFile(out); string(b) != "[Service]\nIPAddressAllow=10.0.0.0/8\n" {
		t.Errorf("someone else's file changed: %q", b)
	}
}
