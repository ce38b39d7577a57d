package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// writeSelfSigned writes a self-signed certificate for 127.0.0.1 and its
// key (mode 0600) into dir, and returns their paths and a pool trusting it.
func writeSelfSigned(t *testing.T, dir string) (certPath, keyPath string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "robot.local"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"robot.local"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath = filepath.Join(dir, "broker.crt"), filepath.Join(dir, "broker.key")
	os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certPath, keyPath, pool
}

// The embedded broker on an address other machines can reach: without TLS
// the daemon refuses to start (non-zero exit, before it is ready, with the
// reason); with TLS and logins it serves MQTT over TLS only — an agent
// with its generated password gets in over ssl://, plain MQTT on the same
// port does not — and its own connections trust exactly its certificate.
func TestEmbeddedBrokerBeyondLoopbackNeedsTLS(t *testing.T) {
	dir := t.TempDir()
	port := testtool.FreePort(t)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", testtool.FreePort(t))
	text := strings.NewReplacer(
		"  dir: ./saga-data/journal", "  dir: "+filepath.Join(dir, "journal"),
		"  world: ./saga-data/world", "  world: "+filepath.Join(dir, "world"),
		"  listen: 127.0.0.1:1883", fmt.Sprintf("  listen: 0.0.0.0:%d", port),
		"  listen: 127.0.0.1:8080", "  listen: "+httpAddr,
		"    password_file: ./saga-data/mqtt/passwd", "    password_file: "+filepath.Join(dir, "mqtt", "passwd"),
		"    credentials_dir: ./saga-data/mqtt/credentials", "    credentials_dir: "+filepath.Join(dir, "mqtt", "credentials"),
		"  reset_token_file: ./saga-data/operator-token", "  reset_token_file: "+filepath.Join(dir, "operator-token"),
	).Replace(string(config.DefaultYAML))
	path := filepath.Join(dir, "arm.yaml")
	os.WriteFile(path, []byte(text), 0o600)
	out, code := run(t, "run", "--config", path)
	if code == 0 || !strings.Contains(out, "mqtt.listen: 0.0.0.0") || !strings.Contains(out, "needs TLS") {
		t.Fatalf("an exposed broker without TLS: exit %d\n%s", code, out)
	}

	certPath, keyPath, pool := writeSelfSigned(t, dir)
	text = strings.Replace(text, "  # tls:\n", fmt.Sprintf("  tls:\n    cert_file: %s\n    key_file: %s\n", certPath, keyPath), 1)
	os.WriteFile(path, []byte(text), 0o600)
	d := &daemonProc{t: t, cfgPath: path, http: httpAddr}
	d.start()
	defer func() { d.cmd.Process.Kill(); d.cmd.Wait() }()
	d.waitReady() // the supervisor's own connections reached its TLS listener

	pw, err := os.ReadFile(filepath.Join(dir, "mqtt", "credentials", "planner"))
	if err != nil {
		t.Fatal(err)
	}
	password := strings.TrimSpace(string(pw))
	connect := func(url string, tc *tls.Config) error {
		o := paho.NewClientOptions().AddBroker(url).SetClientID("planner").SetUsername("planner").
			SetPassword(password).SetConnectTimeout(3 * time.Second)
		if tc != nil {
			o.SetTLSConfig(tc)
		}
		c := paho.NewClient(o)
		tok := c.Connect()
		if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			return fmt.Errorf("connect: %v", tok.Error())
		}
		c.Disconnect(0)
		return nil
	}
	if err := connect(fmt.Sprintf("ssl://127.0.0.1:%d", port), &tls.Config{RootCAs: pool}); err != nil {
		t.Errorf("planner over TLS: %v", err)
	}
	if err := connect(fmt.Sprintf("tcp://127.0.0.1:%d", port), nil); err == nil {
		t.Error("plain MQTT reached the TLS listener")
	}
	if err := connect(fmt.Sprintf("ssl://127.0.0.1:%d", port), &tls.Config{RootCAs: x509.NewCertPool()}); err == nil {
		t.Error("a client that does not trust the certificate got in")
	}
	// A wrong password over TLS is refused, and counted where an operator
	// looks.
	password = "guess"
	if err := connect(fmt.Sprintf("ssl://127.0.0.1:%d", port), &tls.Config{RootCAs: pool}); err == nil {
		t.Error("a wrong password got in")
	}
	// (paho tries MQTT 3.1.1, then 3.1: one or two refusals.)
	if _, body := d.get("/metrics"); !strings.Contains(body, `saga_mqtt_refused_total{what="connect"} 1`) &&
		!strings.Contains(body, `saga_mqtt_refused_total{what="connect"} 2`) {
		t.Errorf("the refused login is not in /metrics:\n%s", grepLines(body, "saga_mqtt_refused"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
