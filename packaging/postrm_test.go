package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// postrm purge, run chrootless (DPKG_ROOT, as dpkg --root does): the
// drop-in `saga-supervisor systemd-dropin` wrote goes with the package, a
// drop-in an admin wrote by hand stays, and so does its directory. The
// system tools it calls are stubs that only note their calls.
func TestPostrmPurgeRemovesOnlyItsDropin(t *testing.T) {
	script, err := filepath.Abs(filepath.Join(root, "packaging", "scripts", "postrm"))
	if err != nil {
		t.Fatal(err)
	}
	stubs := t.TempDir()
	calls := filepath.Join(stubs, "calls")
	for _, name := range []string{"deb-systemd-helper", "systemctl", "udevadm"} {
		stub := "#!/bin/sh\necho " + name + " \"$@\" >> " + calls + "\n"
		if err := os.WriteFile(filepath.Join(stubs, name), []byte(stub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	purge := func(files map[string]string) string {
		t.Helper()
		dpkgRoot := t.TempDir()
		for path, text := range files {
			p := filepath.Join(dpkgRoot, path)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		c := exec.Command("sh", script, "purge")
		c.Env = append(os.Environ(), "DPKG_ROOT="+dpkgRoot, "PATH="+stubs+":/usr/bin:/bin")
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("postrm purge: %v\n%s", err, out)
		}
		return dpkgRoot
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	const dir = "etc/systemd/system/saga-supervisor.service.d"

	ours := purge(map[string]string{
		dir + "/http.conf":                    "# Written by saga-supervisor systemd-dropin --config /etc/saga-supervisor/config.yaml.\n[Service]\nIPAddressAllow=any\n",
		"var/lib/saga-supervisor/journal/seg": "x",
	})
	if exists(filepath.Join(ours, dir)) {
		t.Errorf("purge left %s (systemd-dropin's drop-in, or its directory)", dir)
	}
	if exists(filepath.Join(ours, "var/lib/saga-supervisor")) {
		t.Error("purge left /var/lib/saga-supervisor")
	}

	theirs := purge(map[string]string{
		dir + "/http.conf":   "[Service]\nIPAddressAllow=10.0.0.0/8\n",
		dir + "/limits.conf": "[Service]\nCPUQuota=50%\n",
	})
	for _, f := range []string{"http.conf", "limits.conf"} {
		if !exists(filepath.Join(theirs, dir, f)) {
			t.Errorf("purge removed %s/%s, a drop-in written by hand", dir, f)
		}
	}

	mixed := purge(map[string]string{
		dir + "/http.conf":   "# Written by saga-supervisor systemd-dropin --config x.\n[Service]\nIPAddressAllow=any\n",
		dir + "/limits.conf": "[Service]\nCPUQuota=50%\n",
	})
	if exists(filepath.Join(mixed, dir, "http.conf")) || !exists(filepath.Join(mixed, dir, "limits.conf")) {
		t.Errorf("purge beside an admin's drop-in: want systemd-dropin's removed, the admin's kept")
	}
	b, _ := os.ReadFile(calls)
	if !strings.Contains(string(b), "deb-systemd-helper purge saga-supervisor.service") {
		t.Errorf("postrm purge did not forget the unit's state; its calls:\n%s", b)
	}
}
