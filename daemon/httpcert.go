package daemon

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/saga-supervisor/saga-supervisor/internal/secretfile"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// SelfSignedValidity is how long a generated certificate is valid. To
// renew it (or to name new hosts), delete both files and restart: the
// browser then shows a new fingerprint.
const SelfSignedValidity = 5 * 365 * 24 * time.Hour

// selfSignedOrg marks the certificates EnsureHTTPCert generates.
const selfSignedOrg = "saga-supervisor self-signed"

// HTTPCert is the HTTP listener's certificate, as EnsureHTTPCert found or
// made it.
type HTTPCert struct {
	CertFile, KeyFile string
	// Created: generated now (http.tls.self_signed, no files yet).
	Created bool
	// Fingerprint is the SHA-256 of the certificate (DER), in the form
	// `openssl x509 -noout -fingerprint -sha256` prints and browsers show:
	// upper-case hex bytes joined by colons.
	Fingerprint string
	// Names are the certificate's DNS names and IP addresses.
	Names    []string
	NotAfter time.Time
	// Unnamed are names the listener answers to (http.listen's host,
	// http.allowed_hosts) that a generated certificate does not name: a
	// browser reaching it by one warns of a name mismatch.
	Unnamed []string
	// Pair is the certificate and key, for tls.Config.Certificates.
	Pair tls.Certificate
}

// EnsureHTTPCert readies the certificate of an HTTP listener with TLS
// (http.tls): it loads cert_file and key_file or, with self_signed when
// neither exists, first writes a new self-signed pair there — an ECDSA
// P-256 key and a certificate valid SelfSignedValidity naming
// SelfSignedNames, each file mode 0600 (the directory 0700 if new),
// written whole or not at all and never over an existing file. A pair
// that is there is used as it is, so the fingerprint an operator checked
// once stays the same across restarts. It returns nil, nil when the
// listener has no TLS. The key is never printed or logged.
func EnsureHTTPCert(cfg *config.Config) (*HTTPCert, error) {
	t := cfg.HTTP.TLS
	if !t.Enabled() || cfg.HTTP.Listen == "" {
		return nil, nil
	}
	where := func(key string, err error) error {
		return fmt.Errorf("%s: http.tls.%s: %w", cfg.Where("http.tls."+key), key, err)
	}
	c := &HTTPCert{CertFile: t.CertFile, KeyFile: t.KeyFile}
	if t.SelfSigned && absent(t.CertFile) && absent(t.KeyFile) {
		certPEM, keyPEM, err := selfSigned(SelfSignedNames(cfg), time.Now())
		if err != nil {
			return nil, where("self_signed", err)
		}
		// The key first: a certificate without its key is never left.
		if err := secretfile.CreateBytes(t.KeyFile, keyPEM); err != nil {
			return nil, where("key_file", err)
		}
		if err := secretfile.CreateBytes(t.CertFile, certPEM); err != nil {
			os.Remove(t.KeyFile)
			return nil, where("cert_file", err)
		}
		c.Created = true
	}
	if err := secretfile.Check(t.KeyFile); err != nil {
		return nil, where("key_file", err)
	}
	pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		hint := ""
		if t.SelfSigned {
			hint = " (for a new self-signed pair, delete both files and restart)"
		}
		return nil, where("cert_file", fmt.Errorf("%s and %s: %w%s", t.CertFile, t.KeyFile, err, hint))
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, where("cert_file", err)
	}
	c.Pair, c.NotAfter, c.Fingerprint = pair, leaf.NotAfter, Fingerprint(pair.Certificate[0])
	c.Names = append(c.Names, leaf.DNSNames...)
	for _, ip := range leaf.IPAddresses {
		c.Names = append(c.Names, ip.String())
	}
	if slices.Contains(leaf.Subject.Organization, selfSignedOrg) {
		for _, n := range listenerNames(cfg) {
			if leaf.VerifyHostname(n) != nil {
				c.Unnamed = append(c.Unnamed, n)
			}
		}
	}
	return c, nil
}

// absent reports whether nothing at all is at path (not even a dangling
// link).
func absent(path string) bool {
	_, err := os.Lstat(path)
	return errors.Is(err, fs.ErrNotExist)
}

// Fingerprint is the SHA-256 of a certificate's DER bytes as upper-case
// hex bytes joined by colons (AB:CD:…), as openssl and browsers show it.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	var b strings.Builder
	for i, x := range sum {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02X", x)
	}
	return b.String()
}

// listenerNames are the names the HTTP listener answers to besides the
// loopback ones: http.listen's host (unless it is every address) and the
// hosts of http.allowed_hosts, without ports or brackets.
func listenerNames(cfg *config.Config) []string {
	var names []string
	add := func(h string) {
		h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
		if h == "" || slices.Contains(names, h) {
			return
		}
		if ip, err := netip.ParseAddr(h); err == nil && ip.IsUnspecified() {
			return
		}
		names = append(names, h)
	}
	if host, _, err := net.SplitHostPort(cfg.HTTP.Listen); err == nil {
		add(host)
	}
	for _, e := range cfg.HTTP.AllowedHosts {
		if host, _, err := config.NormalizeHost(e); err == nil {
			add(host)
		}
	}
	return names
}

// SelfSignedNames are the names a generated certificate is issued for:
// http.listen's host and http.allowed_hosts (the names the listener
// answers to), this machine's host name and, for mDNS, its first label
// with .local, and localhost, 127.0.0.1 and ::1 (an SSH tunnel, a browser
// on the robot).
func SelfSignedNames(cfg *config.Config) []string {
	names := listenerNames(cfg)
	add := func(n string) {
		if n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if h, err := os.Hostname(); err == nil {
		h = strings.ToLower(strings.TrimSuffix(h, "."))
		if _, _, err := config.NormalizeHost(h); err == nil {
			add(h)
			first, _, _ := strings.Cut(h, ".")
			add(first + ".local")
		}
	}
	for _, n := range []string{"localhost", "127.0.0.1", "::1"} {
		add(n)
	}
	return names
}

// selfSigned returns a new self-signed certificate for names (DNS names
// and IP addresses), valid from an hour before now for
// SelfSignedValidity, and its ECDSA P-256 key (PKCS #8), both PEM.
func selfSigned(names []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: names[0], Organization: []string{selfSignedOrg}},
		NotBefore:    now.Add(-time.Hour), // a robot's clock may lag the browser's
		NotAfter:     now.Add(SelfSignedValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		// Not a CA: it can vouch for nothing but itself.
		BasicConstraintsValid: true,
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), nil
}
