package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Certs is a throwaway certificate authority with a server certificate for
// localhost and 127.0.0.1 and a client certificate, made for one test. The
// PEM files live in the test's temporary directory.
type Certs struct {
	// CAFile is the authority's certificate; ServerCert and ServerKey, and
	// ClientCert and ClientKey, are the certificates it signed and their keys.
	CAFile                 string
	ServerCert, ServerKey  string
	ClientCert, ClientKey  string
	ca                     *x509.Certificate
	pool                   *x509.CertPool
	serverPair, clientPair tls.Certificate
}

// NewCerts makes a CA and the certificates it signs.
func NewCerts(t testing.TB) *Certs {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()

	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "outboxrelay test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("testenv: create CA: %v", err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	c := &Certs{ca: ca, pool: x509.NewCertPool()}
	c.pool.AddCert(ca)
	c.CAFile = writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)

	leaf := func(name string, serial int64, usage x509.ExtKeyUsage, hosts bool) (certFile, keyFile string, pair tls.Certificate) {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if hosts {
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatalf("testenv: create %s certificate: %v", name, err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatalf("testenv: marshal key: %v", err)
		}
		certFile = writePEM(t, dir, name+".pem", "CERTIFICATE", der)
		keyFile = writePEM(t, dir, name+"-key.pem", "PRIVATE KEY", keyDER)
		pair, err = tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatalf("testenv: load %s key pair: %v", name, err)
		}
		return certFile, keyFile, pair
	}
	c.ServerCert, c.ServerKey, c.serverPair = leaf("server", 2, x509.ExtKeyUsageServerAuth, true)
	c.ClientCert, c.ClientKey, c.clientPair = leaf("client", 3, x509.ExtKeyUsageClientAuth, false)
	return c
}

// ServerTLS is a server configuration presenting the server certificate;
// with requireClientCert it also demands a client certificate signed by
// the CA (mutual TLS).
func (c *Certs) ServerTLS(requireClientCert bool) *tls.Config {
	tc := &tls.Config{Certificates: []tls.Certificate{c.serverPair}, MinVersion: tls.VersionTLS12}
	if requireClientCert {
		tc.ClientAuth = tls.RequireAndVerifyClientCert
		tc.ClientCAs = c.pool
	}
	return tc
}

// ClientTLS is a client configuration trusting the CA and presenting the
// client certificate.
func (c *Certs) ClientTLS() *tls.Config {
	return &tls.Config{RootCAs: c.pool, Certificates: []tls.Certificate{c.clientPair}, MinVersion: tls.VersionTLS12}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testenv: generate key: %v", err)
	}
	return key
}

func writePEM(t testing.TB, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatalf("testenv: write %s: %v", name, err)
	}
	return path
}
