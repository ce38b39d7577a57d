package wiring

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// TLSConfig reads the TLS files the mqtt section names: the daemon's own
// connection and the MQTT devices' connection use it alike.
func TLSConfig(c config.TLS) (*tls.Config, error) {
	tc := &tls.Config{InsecureSkipVerify: c.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("mqtt.tls.ca_file %s: no certificate found", c.CAFile)
		}
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// PinnedTLS is the TLS of the supervisor's own connections to the
// embedded broker's TLS listener (mqtt.tls.cert_file and key_file): it
// trusts exactly that certificate, whatever name it was issued for — the
// connection is to this process, on loopback.
func PinnedTLS(c config.TLS) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, err
	}
	want := cert.Certificate[0]
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // replaced by the pin below, not skipped
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || !bytes.Equal(raw[0], want) {
				return errors.New("the broker's certificate is not the embedded broker's own")
			}
			return nil
		},
	}, nil
}
