// Package tlsfiles builds the client side of TLS from PEM files, as the
// relay's settings name them: the Kafka sink's kafka.tls and the Schema
// Registry's schema_registry.tls share it.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/outboxrelay/outboxrelay/secret"
)

// Files are a client's TLS settings.
type Files struct {
	// CAFile is a PEM file of the authorities that sign the server's
	// certificate. Empty: the system's roots.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key. Both
	// or neither.
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must carry. Empty:
	// the host dialed.
	ServerName string
	// InsecureSkipVerify accepts any certificate; for tests only.
	InsecureSkipVerify bool
}

// Config reads the files and returns the tls.Config, or every problem at
// once; key names the settings in errors ("kafka.tls").
func (f Files) Config(key string) (*tls.Config, error) {
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         f.ServerName,
		InsecureSkipVerify: f.InsecureSkipVerify, //nolint:gosec // opt-in, documented as for tests only
	}
	var errs []error
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.ca_file: %w", key, err))
		} else {
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				errs = append(errs, fmt.Errorf("%s.ca_file: %s holds no PEM certificate", key, f.CAFile))
			}
		}
	}
	switch {
	case f.CertFile != "" && f.KeyFile != "":
		// The key is a secret file: read with secret.ReadFile's bound,
		// and only from a regular file.
		certPEM, err := os.ReadFile(f.CertFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.cert_file: %w", key, err))
			break
		}
		keyPEM, err := secret.ReadFile(key+".key_file", f.KeyFile)
		if err != nil {
			errs = append(errs, err)
			break
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.cert_file and key_file: %w", key, err))
		} else {
			tc.Certificates = []tls.Certificate{cert}
		}
	case f.CertFile != "" || f.KeyFile != "":
		errs = append(errs, fmt.Errorf("%s: cert_file and key_file go together; set both for a client certificate, or neither", key))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return tc, nil
}
