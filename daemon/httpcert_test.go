package daemon

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// The first start with http.tls.self_signed writes an ECDSA P-256
// certificate and key, mode 0600 in a 0700 directory, naming the
// listener's host, allowed_hosts, this machine's name (and NAME.local) and
// the loopback names; later starts use the same pair (the same
// fingerprint); a half pair, or a broken one, is an error and is never
// replaced; a listener without TLS needs nothing.
func TestEnsureHTTPCert(t *testing.T) {
	dir := t.TempDir()
	cfgAt := func() *config.Config {
		c := config.Default()
		c.HTTP.Listen = "192.0.2.10:8443"
		c.HTTP.AllowedHosts = []string{"robot.lan", "[fd00::7]:8443"}
		c.HTTP.TLS = config.HTTPTLS{SelfSigned: true, CertFile: filepath.Join(dir, "http", "tls.crt"), KeyFile: filepath.Join(dir, "http", "tls.key")}
		return c
	}
	first, err := EnsureHTTPCert(cfgAt())
	if err != nil || first == nil || !first.Created {
		t.Fatalf("first start: %+v %v", first, err)
	}
	for _, p := range []string{first.CertFile, first.KeyFile} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want 0600", p, st.Mode(), err)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "http")); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("the directory: %v %v, want 0700", st.Mode(), err)
	}
	leaf, err := x509.ParseCertificate(first.Pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("key %T, want ECDSA P-256", leaf.PublicKey)
	}
	host, _ := os.Hostname()
	host = strings.ToLower(host)
	first4, _, _ := strings.Cut(host, ".")
	for _, n := range []string{"192.0.2.10", "robot.lan", "fd00::7", "localhost", "127.0.0.1", "::1", host, first4 + ".local"} {
		if err := leaf.VerifyHostname(n); err != nil {
			t.Errorf("the certificate does not name %s: %v (names %v)", n, err, first.Names)
		}
	}
	if leaf.IsCA || leaf.NotAfter.Before(time.Now().Add(4*365*24*time.Hour)) || len(first.Unnamed) != 0 {
		t.Errorf("CA %v, not after %v, unnamed %v", leaf.IsCA, leaf.NotAfter, first.Unnamed)
	}
	if len(first.Fingerprint) != 95 || strings.ToUpper(first.Fingerprint) != first.Fingerprint || first.Fingerprint != Fingerprint(leaf.Raw) {
		t.Errorf("fingerprint %q", first.Fingerprint)
	}

	// Restarted: the same pair. A new name the listener answers to is
	// reported, not fixed by a new certificate.
	c := cfgAt()
	c.HTTP.AllowedHosts = append(c.HTTP.AllowedHosts, "arm.example")
	again, err := EnsureHTTPCert(c)
	if err != nil || again.Created || again.Fingerprint != first.Fingerprint {
		t.Fatalf("restart: %+v %v", again, err)
	}
	if !slices.Equal(again.Unnamed, []string{"arm.example"}) {
		t.Errorf("unnamed %v, want [arm.example]", again.Unnamed)
	}

	// A lone key (its certificate deleted) is not replaced.
	os.Remove(first.CertFile)
	if _, err := EnsureHTTPCert(cfgAt()); err == nil || !strings.Contains(err.Error(), "http.tls.cert_file") || !strings.Contains(err.Error(), "delete both files") {
		t.Errorf("a key without its certificate: %v", err)
	}
	if _, err := os.Stat(first.KeyFile); err != nil {
		t.Errorf("the key was removed: %v", err)
	}
	// A key others may read is refused.
	os.Remove(first.KeyFile)
	if _, err := EnsureHTTPCert(cfgAt()); err != nil {
		t.Fatal(err)
	}
	os.Chmod(first.KeyFile, 0o644)
	if _, err := EnsureHTTPCert(cfgAt()); err == nil || !strings.Contains(err.Error(), "has mode 0644") {
		t.Errorf("a key others may read: %v", err)
	}
	// No TLS: nothing.
	if c, err := EnsureHTTPCert(config.Default()); c != nil || err != nil {
		t.Errorf("no TLS: %+v %v", c, err)
	}
}
