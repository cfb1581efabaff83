package sink

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/tlsfiles"
)

// TLS is the client side of TLS to the brokers.
type TLS struct {
	// Enabled turns TLS on. Default false: plaintext.
	Enabled bool
	// CAFile is a PEM file of the certificate authorities that sign the
	// brokers' certificates. Default: the system's roots.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// brokers that authenticate clients by certificate (mTLS). Both or
	// neither. Default none.
	CertFile, KeyFile string
	// ServerName is the name the brokers' certificates must carry. Default:
	// the host of the broker being dialed.
	ServerName string
	// InsecureSkipVerify accepts any certificate: encryption without
	// authentication of the broker. For tests only. Default false.
	InsecureSkipVerify bool
}

// SASL is how the client authenticates to the brokers.
type SASL struct {
	// Mechanism is plain, scram-sha-256 or scram-sha-512, in any case.
	// Default none: no SASL.
	Mechanism string
	// Username and Password are the credentials; both are required with a
	// mechanism.
	Username, Password string
}

// SASL mechanisms, as configured (lower case) and as Kafka names them.
const (
	mechPlain     = "plain"
	mechScram256  = "scram-sha-256"
	mechScram512  = "scram-sha-512"
	redactedValue = "xxxxx"
)

// validateSecurity reports the problems with c's TLS and SASL settings,
// reading the certificate files so that a wrong path or a bad PEM file is
// reported with the rest of the configuration, not at the first connect.
func (c *Config) validateSecurity() []error {
	var errs []error
	if _, err := c.TLS.config(); err != nil {
		errs = append(errs, err)
	}
	if !c.TLS.Enabled && (c.TLS.CAFile != "" || c.TLS.CertFile != "" || c.TLS.KeyFile != "" || c.TLS.ServerName != "" || c.TLS.InsecureSkipVerify) {
		errs = append(errs, errors.New("kafka.tls: certificate settings are given but kafka.tls.enabled is false; set kafka.tls.enabled: true to use them"))
	}
	switch m := strings.ToLower(c.SASL.Mechanism); m {
	case "":
		if c.SASL.Username != "" || c.SASL.Password != "" {
			errs = append(errs, errors.New("kafka.sasl: a username or password is given but no kafka.sasl.mechanism; set it to plain, scram-sha-256 or scram-sha-512"))
		}
	case mechPlain, mechScram256, mechScram512:
		if c.SASL.Username == "" {
			errs = append(errs, fmt.Errorf("kafka.sasl.username is required with mechanism %s", m))
		}
		if c.SASL.Password == "" {
			errs = append(errs, fmt.Errorf("kafka.sasl.password (or kafka.sasl.password_file) is required with mechanism %s", m))
		}
		if m == mechPlain && !c.TLS.Enabled && !c.AllowPlaintextSASL {
			errs = append(errs, errors.New("kafka.sasl.mechanism: plain sends the password as it is, and without TLS anyone on the network can read it; "+
				"enable kafka.tls, use scram-sha-256 or scram-sha-512, or (on a network you trust) set kafka.allow_plaintext_sasl: true"))
		}
	default:
		errs = append(errs, fmt.Errorf("kafka.sasl.mechanism: %q is not plain, scram-sha-256 or scram-sha-512", c.SASL.Mechanism))
	}
	return errs
}

// config builds the client's tls.Config, or nil when TLS is off.
func (t TLS) config() (*tls.Config, error) {
	if !t.Enabled {
		return nil, nil
	}
	return tlsfiles.Files{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile,
		ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}.Config("kafka.tls")
}

// mechanism builds the SASL mechanism, or nil without one.
func (s SASL) mechanism() sasl.Mechanism {
	switch strings.ToLower(s.Mechanism) {
	case mechPlain:
		return plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism()
	case mechScram256:
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism()
	case mechScram512:
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism()
	}
	return nil
}

// String describes s without its password.
func (s SASL) String() string {
	if s.Mechanism == "" {
		return "none"
	}
	return fmt.Sprintf("%s as %q", strings.ToUpper(s.Mechanism), s.Username)
}

// ClientOptions are the franz-go options for reaching c's brokers: seed
// brokers, client id, TLS and SASL. The sink adds its producer options to
// them; `outboxrelay check` uses them alone, so both connect the same way.
// c must be valid.
func ClientOptions(c Config) ([]kgo.Opt, error) {
	c.SetDefaults()
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...), kgo.ClientID(c.ClientID)}
	tc, err := c.TLS.config()
	if err != nil {
		return nil, err
	}
	if tc != nil {
		// kgo fills in ServerName per broker when it is empty.
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if m := c.SASL.mechanism(); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// ExplainConnError says in words what a failure to talk to the brokers
// means when TLS or SASL caused it. When the cause is certain (the broker
// said the credentials are wrong, the certificate does not verify) the
// error is marked permanent: it stays wrong until someone changes the
// configuration. A guess from a closed connection only adds the hint, since
// a broker restarting closes connections too. Other errors are returned
// unchanged.
func ExplainConnError(c Config, err error) error {
	p := DiagnoseConnError(c, err)
	switch {
	case p.Hint == "":
		return err
	case p.Certain:
		return connector.Permanent(fmt.Errorf("%w (%s)", err, p.Hint))
	}
	return fmt.Errorf("%w (%s)", err, p.Hint)
}

// Areas of a connection problem that [DiagnoseConnError] recognises.
const (
	AreaTLS  = "tls"
	AreaSASL = "sasl"
)

// ConnProblem is what [DiagnoseConnError] makes of an error.
type ConnProblem struct {
	// Area is AreaTLS or AreaSASL; empty when the cause may be either or
	// is not recognised.
	Area string
	// Hint says what to change; empty when the error is not recognised.
	Hint string
	// Certain is true when the broker or the certificate said so, false
	// for a guess from a closed connection.
	Certain bool
}

// DiagnoseConnError says whether err, from talking to c's brokers, comes
// from TLS or SASL, and what to change.
func DiagnoseConnError(c Config, err error) ConnProblem {
	if err == nil {
		return ConnProblem{}
	}
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
		header    tls.RecordHeaderError
		op        *net.OpError
		firstEOF  *kgo.ErrFirstReadEOF
	)
	certain := func(area, hint string) ConnProblem { return ConnProblem{Area: area, Hint: hint, Certain: true} }
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return certain(AreaSASL, fmt.Sprintf("the broker rejected the SASL credentials (%s): check kafka.sasl.username and the password", c.SASL))
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		return certain(AreaSASL, fmt.Sprintf("the broker does not offer SASL mechanism %s: set kafka.sasl.mechanism to one it enables (sasl.enabled.mechanisms)", strings.ToUpper(c.SASL.Mechanism)))
	case errors.Is(err, kerr.IllegalSaslState):
		return certain(AreaSASL, "the broker refused the SASL exchange: check kafka.sasl.mechanism against the listener's configuration")
	case errors.As(err, &unknownCA):
		return certain(AreaTLS, "the broker's certificate is not signed by a trusted authority: set kafka.tls.ca_file to the CA that signed it")
	case errors.As(err, &hostname):
		return certain(AreaTLS, fmt.Sprintf("the broker's certificate is not valid for %q: connect by a name it carries, or set kafka.tls.server_name", hostname.Host))
	case errors.As(err, &invalid):
		return certain(AreaTLS, "the broker's certificate is invalid (expired, or not for serving TLS): renew it")
	case errors.As(err, &verify):
		return certain(AreaTLS, "the broker's certificate could not be verified: check kafka.tls.ca_file and kafka.tls.server_name")
	case errors.As(err, &header):
		return certain(AreaTLS, "the broker did not answer with TLS: its listener is plaintext, so turn kafka.tls.enabled off or use the broker's TLS port")
	case errors.As(err, &op) && op.Op == "remote error":
		// A TLS alert: the broker refused the handshake.
		return certain(AreaTLS, "the broker ended the TLS handshake: it may require a client certificate (kafka.tls.cert_file, kafka.tls.key_file) or reject the one given")
	case errors.As(err, &firstEOF):
		// kgo's guess: the broker hung up at once. After a TLS dial that
		// is a plaintext listener; without TLS, one that wants TLS or SASL.
		if c.TLS.Enabled {
			return ConnProblem{Area: AreaTLS, Hint: "the broker closed the connection during the TLS handshake: if this persists, its listener is plaintext, so turn kafka.tls.enabled off or use the broker's TLS port"}
		}
		return ConnProblem{Hint: "the broker closed the connection at once: if this persists, its listener requires TLS (kafka.tls) or SASL (kafka.sasl)"}
	case isEOF(err) && c.SASL.Mechanism != "":
		// Kafka answers wrong credentials with SASL_AUTHENTICATION_FAILED
		// (above); other brokers, kfake among them, just hang up.
		return ConnProblem{Area: AreaSASL, Hint: fmt.Sprintf("the broker closed the connection during authentication, as some brokers do on wrong SASL credentials (%s): if this persists, check kafka.sasl.username, the password and the mechanism", c.SASL)}
	}
	return ConnProblem{}
}

// isEOF reports a connection the broker closed.
func isEOF(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}
