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

	"github.com/outboxrelay/outboxrelay/internal/secret"
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
// once; key names the settings in errors ("kafka.tls": kafka.tls.ca_file
// and so on).
func (f Files) Config(key string) (*tls.Config, error) {
	return f.ConfigNamed(Names{CA: key + ".ca_file", Cert: key + ".cert_file", Key: key + ".key_file"})
}

// Names are what errors call the settings that name the three files: an
// environment variable, say, where they come from no configuration key.
type Names struct{ CA, Cert, Key string }

// ConfigNamed is Config, with errors naming each file's setting as n does.
func (f Files) ConfigNamed(n Names) (*tls.Config, error) {
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         f.ServerName,
		InsecureSkipVerify: f.InsecureSkipVerify, //nolint:gosec // opt-in, documented as for tests only
	}
	var errs []error
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n.CA, err))
		} else {
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				errs = append(errs, fmt.Errorf("%s: %s holds no PEM certificate", n.CA, f.CAFile))
			}
		}
	}
	switch {
	case f.CertFile != "" && f.KeyFile != "":
		// The key is a secret file: read with secret.ReadFile's bound,
		// and only from a regular file.
		certPEM, err := os.ReadFile(f.CertFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n.Cert, err))
			break
		}
		keyPEM, err := secret.ReadFile(n.Key, f.KeyFile)
		if err != nil {
			errs = append(errs, err)
			break
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s and %s: not a certificate and its key in PEM: %w", n.Cert, n.Key, err))
		} else {
			tc.Certificates = []tls.Certificate{cert}
		}
	case f.CertFile != "" || f.KeyFile != "":
		errs = append(errs, fmt.Errorf("%s and %s go together; set both for a client certificate, or neither", n.Cert, n.Key))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return tc, nil
}
