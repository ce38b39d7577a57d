package config_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// httpConfig is a config whose http section is body (indented under
// http:), the operator token in a file of dir.
func httpConfig(t *testing.T, dir, body string) []byte {
	t.Helper()
	token := filepath.Join(dir, "operator-token")
	if _, err := os.Stat(token); err != nil {
		writeFile(t, token, longToken+"\n", 0o600)
	}
	return []byte("device: arm1\nhttp:\n  reset_token_file: " + token + "\n" + body +
		"actuators:\n  base: {kind: servo, driver: sim, min: 0, max: 1}\n")
}

// An HTTP listener other machines can reach is refused, located at its
// line, unless it has TLS and a login; the error says what to add (TLS,
// the unit's drop-in) and the other way in (the SSH tunnel). With TLS the
// login is on by default, login: false is refused, and so is a login with
// no token to log in with. On loopback nothing is needed and the login is
// off, as before.
func TestHTTPBeyondLoopbackNeedsTLSAndLogin(t *testing.T) {
	dir := t.TempDir()
	parse := func(body string) (*config.Config, error) {
		return config.Parse(httpConfig(t, dir, body), "arm.yaml")
	}
	_, err := parse("  listen: 0.0.0.0:8080\n")
	for _, want := range []string{
		"arm.yaml:4:11: http.listen: 0.0.0.0:8080 is reachable from other machines",
		"needs TLS and a login", "add http.tls.self_signed: true",
		"IPAddressDeny=any and IPAddressAllow=localhost", "sudo saga-supervisor systemd-dropin --config arm.yaml",
		"ssh -N -L 8080:127.0.0.1:8080 USER@ROBOT",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("0.0.0.0:8080 without TLS: %v\nwant %q", err, want)
		}
	}
	if _, err := parse("  listen: 192.168.1.20:8080\n  tls: {cert_file: c.pem}\n"); err == nil ||
		!strings.Contains(err.Error(), "arm.yaml:5:20: http.tls.cert_file: cert_file and key_file go together") {
		t.Errorf("a cert without its key: %v", err)
	}

	c, err := parse("  listen: 0.0.0.0:8443\n  tls: {self_signed: true}\n")
	if err != nil {
		t.Fatalf("0.0.0.0 with a self-signed certificate: %v", err)
	}
	if !c.HTTP.Login || !c.HTTP.TLS.Enabled() || c.HTTP.TLS.CertFile != config.DefaultHTTPCertFile || c.HTTP.TLS.KeyFile != config.DefaultHTTPKeyFile {
		t.Errorf("beyond loopback with TLS: login %v, tls %+v", c.HTTP.Login, c.HTTP.TLS)
	}
	w := strings.Join(c.Warnings(), "\n")
	for _, want := range []string{"arm.yaml:4:11: http.listen: 0.0.0.0:8443 is reachable from other machines", "IPAddressDeny=any and IPAddressAllow=localhost drop their packets",
		"sudo saga-supervisor systemd-dropin --config arm.yaml", "ssh -N -L 8443:127.0.0.1:8443 USER@ROBOT"} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings lack %q:\n%s", want, w)
		}
	}
	if _, err := parse("  listen: 0.0.0.0:8443\n  tls: {self_signed: true}\n  login: false\n"); err == nil ||
		!strings.Contains(err.Error(), "arm.yaml:6:10: http.login: off on 0.0.0.0:8443, which other machines can reach") {
		t.Errorf("login: false beyond loopback: %v", err)
	}
	if _, err := config.Parse([]byte("device: arm1\nhttp:\n  listen: 0.0.0.0:8443\n  tls: {self_signed: true}\n  reset_token_file: \"\"\n"+
		"actuators:\n  base: {kind: servo, driver: sim, min: 0, max: 1}\n"), "arm.yaml"); err == nil ||
		!strings.Contains(err.Error(), "arm.yaml:3:11: http.listen: the login needs a token to log in with") {
		t.Errorf("a login with no token: %v", err)
	}

	c, err = parse("")
	if err != nil || c.HTTP.Login || c.HTTP.TLS.Enabled() || len(c.Warnings()) != 0 {
		t.Errorf("loopback: login %v, tls %+v, %v, warnings %v", c.HTTP.Login, c.HTTP.TLS, err, c.Warnings())
	}
	if c.HTTP.SessionTTL != 12*time.Hour {
		t.Errorf("session_ttl %v, want 12h", c.HTTP.SessionTTL)
	}
	if c, err := parse("  login: true\n"); err != nil || !c.HTTP.Login {
		t.Errorf("login on loopback: %v", err)
	}
	if _, err := parse("  tls: {hsts: true}\n"); err == nil || !strings.Contains(err.Error(), "arm.yaml:4:15: http.tls.hsts: Strict-Transport-Security needs TLS") {
		t.Errorf("hsts without TLS: %v", err)
	}
	if c, err := parse("  tls: {self_signed: true, hsts: true}\n"); err != nil ||
		!strings.Contains(strings.Join(c.Warnings(), "\n"), "arm.yaml:4:34: http.tls.hsts: with a self-signed certificate") {
		t.Errorf("hsts on a self-signed certificate: %v %v", err, c.Warnings())
	}
	for _, ttl := range []string{"0s", "200ms", "8d", "169h"} {
		if _, err := parse("  session_ttl: " + ttl + "\n"); err == nil || !strings.Contains(err.Error(), "http.session_ttl: ") {
			t.Errorf("session_ttl %s: %v", ttl, err)
		}
	}
}

// The viewer token is read like the operator's: a private file of 32
// bytes or more, generated when asked to be; the same token as the
// operator's is refused (a viewer could then reset).
func TestViewerToken(t *testing.T) {
	dir := t.TempDir()
	parse := func(body string) (*config.Config, error) {
		return config.Parse(httpConfig(t, dir, body), "arm.yaml")
	}
	viewer := filepath.Join(dir, "viewer")
	writeFile(t, viewer, "viewer-token-0123456789abcdef-0123456789\n", 0o600)
	c, err := parse("  viewer_token_file: " + viewer + "\n")
	if err != nil || c.HTTP.ViewerToken.Reveal() != "viewer-token-0123456789abcdef-0123456789" {
		t.Errorf("a viewer token: %v", err)
	}
	for _, tc := range []struct{ content, want string }{
		{"short\n", "the viewer token is 5 bytes: it must be at least 32"},
		{longToken + "\n", "holds the operator token: the viewer token must be another"},
	} {
		writeFile(t, viewer, tc.content, 0o600)
		if _, err := parse("  viewer_token_file: " + viewer + "\n"); err == nil || !strings.Contains(err.Error(), "arm.yaml:4:22: http.viewer_token_file: ") ||
			!strings.Contains(err.Error(), tc.want) {
			t.Errorf("viewer token %q: %v, want %s", tc.content, err, tc.want)
		}
	}
	writeFile(t, viewer, "viewer-token-0123456789abcdef-0123456789\n", 0o644)
	if _, err := parse("  viewer_token_file: " + viewer + "\n"); err == nil || !strings.Contains(err.Error(), "has mode 0644") {
		t.Errorf("a viewer token others may read: %v", err)
	}
	missing := filepath.Join(dir, "new-viewer")
	if c, err := parse("  viewer_token_file: " + missing + "\n  generate_viewer_token: true\n"); err != nil || c.HTTP.ViewerToken != "" {
		t.Errorf("a viewer token to generate: %v", err)
	}
	if _, err := parse("  viewer_token_file: " + missing + "\n"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("a missing viewer token not to generate: %v", err)
	}
	if _, err := parse("  generate_viewer_token: true\n"); err == nil ||
		!strings.Contains(err.Error(), "arm.yaml:4:26: http.generate_viewer_token: needs viewer_token_file") {
		t.Errorf("generating a viewer token into no file: %v", err)
	}
}

// The listener's certificate and key are checked at load when they are
// there: the key private, the pair one that loads; a self-signed pair not
// written yet is the daemon's to create. Relative paths are under
// state_dir.
func TestHTTPTLSFiles(t *testing.T) {
	dir := t.TempDir()
	parse := func(body string) (*config.Config, error) {
		return config.Parse(httpConfig(t, dir, body), "arm.yaml")
	}
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writePair(t, cert, key)
	tlsKeys := "  tls: {cert_file: " + cert + ", key_file: " + key + "}\n"
	if c, err := parse("  listen: 192.168.1.20:8443\n" + tlsKeys); err != nil || !c.HTTP.Login {
		t.Errorf("a certificate of the operator's: %v", err)
	}
	os.Chmod(key, 0o640)
	if _, err := parse(tlsKeys); err == nil || !strings.Contains(err.Error(), "http.tls.key_file: "+key+" has mode 0640") {
		t.Errorf("a key others may read: %v", err)
	}
	os.Chmod(key, 0o600)
	other := filepath.Join(dir, "other.key")
	writePair(t, filepath.Join(dir, "other.crt"), other)
	if _, err := parse("  tls: {cert_file: " + cert + ", key_file: " + other + "}\n"); err == nil ||
		!strings.Contains(err.Error(), "http.tls.cert_file: ") || !strings.Contains(err.Error(), "private key does not match public key") {
		t.Errorf("a key of another certificate: %v", err)
	}
	if _, err := parse("  tls: {cert_file: " + filepath.Join(dir, "none.crt") + ", key_file: " + key + "}\n"); err == nil ||
		!strings.Contains(err.Error(), "no such file") {
		t.Errorf("a missing certificate: %v", err)
	}
	// Self-signed: missing files are generated later; existing ones are
	// checked like any.
	if c, err := parse("  tls: {self_signed: true, cert_file: " + filepath.Join(dir, "gen.crt") + ", key_file: " + filepath.Join(dir, "gen.key") + "}\n"); err != nil ||
		c.HTTP.TLS.CertFile != filepath.Join(dir, "gen.crt") {
		t.Errorf("a self-signed pair to generate: %v", err)
	}
	if _, err := parse("  tls: {self_signed: true, cert_file: " + cert + ", key_file: " + other + "}\n"); err == nil ||
		!strings.Contains(err.Error(), "delete both files and restart") {
		t.Errorf("a broken self-signed pair: %v", err)
	}
	c, err := config.Parse([]byte("device: arm1\nstate_dir: /var/lib/saga-supervisor\nhttp:\n  tls: {self_signed: true}\n  viewer_token_file: viewer\n  generate_viewer_token: true\n"+
		"actuators:\n  base: {kind: servo, driver: sim, min: 0, max: 1}\n"), "arm.yaml")
	if err != nil || c.HTTP.TLS.CertFile != "/var/lib/saga-supervisor/saga-data/http/tls.crt" || c.HTTP.TLS.KeyFile != "/var/lib/saga-supervisor/saga-data/http/tls.key" ||
		c.HTTP.ViewerTokenFile != "/var/lib/saga-supervisor/viewer" {
		t.Errorf("paths under state_dir: %+v %v", c.HTTP, err)
	}
}

// writePair writes a self-signed certificate and its key (0600).
func writePair(t *testing.T, certPath, keyPath string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "robot.local"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"robot.local"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, certPath, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), 0o644)
	writeFile(t, keyPath, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})), 0o600)
}
