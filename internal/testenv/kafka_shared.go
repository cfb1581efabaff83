package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/outboxrelay/outboxrelay/internal/tlsfiles"
)

// The variables that point the tests at a broker they did not start. The
// security settings are named as the relay's own kafka.tls and kafka.sasl
// keys are in its environment, with TEST_ after OUTBOXRELAY_.
const (
	// EnvKafkaBrokers names a Kafka cluster, host:port comma-separated,
	// that every test able to share one runs against (KafkaBroker); the
	// tests that need kfake skip.
	EnvKafkaBrokers = "OUTBOXRELAY_TEST_KAFKA_BROKERS"
	// EnvKafka chooses the broker when EnvKafkaBrokers is not set: kfake,
	// the default, or kafka (Apache Kafka) or redpanda, which testenv
	// starts in Docker once per test binary.
	EnvKafka = "OUTBOXRELAY_TEST_KAFKA"

	// EnvKafkaTLSEnabled turns TLS on; any of the TLS files or the server
	// name does too.
	EnvKafkaTLSEnabled    = "OUTBOXRELAY_TEST_KAFKA_TLS_ENABLED"
	EnvKafkaTLSCAFile     = "OUTBOXRELAY_TEST_KAFKA_TLS_CA_FILE"
	EnvKafkaTLSCertFile   = "OUTBOXRELAY_TEST_KAFKA_TLS_CERT_FILE"
	EnvKafkaTLSKeyFile    = "OUTBOXRELAY_TEST_KAFKA_TLS_KEY_FILE"
	EnvKafkaTLSServerName = "OUTBOXRELAY_TEST_KAFKA_TLS_SERVER_NAME"
	// EnvKafkaSASLMechanism is plain, scram-sha-256 or scram-sha-512.
	EnvKafkaSASLMechanism = "OUTBOXRELAY_TEST_KAFKA_SASL_MECHANISM"
	EnvKafkaSASLUsername  = "OUTBOXRELAY_TEST_KAFKA_SASL_USERNAME"
	EnvKafkaSASLPassword  = "OUTBOXRELAY_TEST_KAFKA_SASL_PASSWORD"
)

// The brokers EnvKafka chooses among.
const (
	flavourKfake    = "kfake"
	flavourKafka    = "kafka"
	flavourRedpanda = "redpanda"
)

// KafkaSecurity is how clients authenticate to the shared broker, for a
// test to hand on to the relay it runs (kafka.tls, kafka.sasl).
type KafkaSecurity struct {
	// TLS is on when EnvKafkaTLSEnabled says so or a TLS file or the
	// server name is given.
	TLS                                               bool
	TLSCAFile, TLSCertFile, TLSKeyFile, TLSServerName string
	// SASLMechanism is plain, scram-sha-256 or scram-sha-512, in lower
	// case; empty for none.
	SASLMechanism, SASLUsername, SASLPassword string
}

// kafkaEnv is what the environment asks of Kafka.
type kafkaEnv struct {
	brokers  []string
	flavour  string
	security KafkaSecurity
	opts     []kgo.Opt // security, as client options
}

// shared reports whether e asks for a broker the tests do not start
// themselves.
func (e kafkaEnv) shared() bool { return len(e.brokers) > 0 || e.flavour != flavourKfake }

// describe says which shared broker e asks for, completing a skip.
func (e kafkaEnv) describe() string {
	if len(e.brokers) > 0 {
		return fmt.Sprintf("%s names a broker it did not start (%s)", EnvKafkaBrokers, strings.Join(e.brokers, ","))
	}
	return fmt.Sprintf("%s=%s gives it the broker the test binary shares", EnvKafka, e.flavour)
}

// readKafkaEnv reads the variables through getenv and checks them,
// reporting every problem at once.
func readKafkaEnv(getenv func(string) string) (kafkaEnv, error) {
	var errs []error
	e := kafkaEnv{flavour: strings.ToLower(strings.TrimSpace(getenv(EnvKafka)))}
	for _, b := range strings.Split(getenv(EnvKafkaBrokers), ",") {
		if b = strings.TrimSpace(b); b == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(b); err != nil || port == "" {
			errs = append(errs, fmt.Errorf("%s: %q is not host:port", EnvKafkaBrokers, b))
		}
		e.brokers = append(e.brokers, b)
	}
	switch e.flavour {
	case "":
		e.flavour = flavourKfake
	case flavourKfake, flavourKafka, flavourRedpanda:
	default:
		errs = append(errs, fmt.Errorf("%s: %q is not kfake, kafka or redpanda", EnvKafka, e.flavour))
	}
	if len(e.brokers) > 0 && e.flavour != flavourKfake {
		errs = append(errs, fmt.Errorf("%s and %s=%s are both set; set one", EnvKafkaBrokers, EnvKafka, e.flavour))
	}
	sec, opts, secErrs := readKafkaSecurity(getenv)
	errs = append(errs, secErrs...)
	if (sec != KafkaSecurity{}) && len(e.brokers) == 0 {
		errs = append(errs, fmt.Errorf("TLS or SASL settings are given without %s, the broker they are for", EnvKafkaBrokers))
	}
	e.security, e.opts = sec, opts
	return e, errors.Join(errs...)
}

// readKafkaSecurity reads the TLS and SASL variables and builds the
// client options they make.
func readKafkaSecurity(getenv func(string) string) (KafkaSecurity, []kgo.Opt, []error) {
	var errs []error
	s := KafkaSecurity{
		TLSCAFile: getenv(EnvKafkaTLSCAFile), TLSCertFile: getenv(EnvKafkaTLSCertFile),
		TLSKeyFile: getenv(EnvKafkaTLSKeyFile), TLSServerName: getenv(EnvKafkaTLSServerName),
		SASLMechanism: strings.ToLower(getenv(EnvKafkaSASLMechanism)),
		SASLUsername:  getenv(EnvKafkaSASLUsername), SASLPassword: getenv(EnvKafkaSASLPassword),
	}
	if v := getenv(EnvKafkaTLSEnabled); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not true or false", EnvKafkaTLSEnabled, v))
		}
		s.TLS = on
	}
	s.TLS = s.TLS || s.TLSCAFile != "" || s.TLSCertFile != "" || s.TLSKeyFile != "" || s.TLSServerName != ""
	var opts []kgo.Opt
	if s.TLS {
		tc, err := tlsfiles.Files{CAFile: s.TLSCAFile, CertFile: s.TLSCertFile, KeyFile: s.TLSKeyFile, ServerName: s.TLSServerName}.
			ConfigNamed(tlsfiles.Names{CA: EnvKafkaTLSCAFile, Cert: EnvKafkaTLSCertFile, Key: EnvKafkaTLSKeyFile})
		if err != nil {
			errs = append(errs, err)
		} else {
			opts = append(opts, kgo.DialTLSConfig(tc))
		}
	}
	if s.SASLMechanism == "" {
		if s.SASLUsername != "" || s.SASLPassword != "" {
			errs = append(errs, fmt.Errorf("a SASL username or password is given without %s", EnvKafkaSASLMechanism))
		}
		return s, opts, errs
	}
	if s.SASLUsername == "" || s.SASLPassword == "" {
		errs = append(errs, fmt.Errorf("%s %s needs %s and %s", EnvKafkaSASLMechanism, s.SASLMechanism, EnvKafkaSASLUsername, EnvKafkaSASLPassword))
	}
	switch s.SASLMechanism {
	case "plain":
		opts = append(opts, kgo.SASL(plain.Auth{User: s.SASLUsername, Pass: s.SASLPassword}.AsMechanism()))
	case "scram-sha-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: s.SASLUsername, Pass: s.SASLPassword}.AsSha256Mechanism()))
	case "scram-sha-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: s.SASLUsername, Pass: s.SASLPassword}.AsSha512Mechanism()))
	default:
		errs = append(errs, fmt.Errorf("%s: %q is not plain, scram-sha-256 or scram-sha-512", EnvKafkaSASLMechanism, s.SASLMechanism))
	}
	return s, opts, errs
}

// envKafka is the environment's answer, read once per test binary.
var envKafka = sync.OnceValues(func() (kafkaEnv, error) { return readKafkaEnv(os.Getenv) })

// kafkaSettings returns the environment's answer, failing the test if the
// variables are wrong: a run meant for another broker must not pass on
// kfake.
func kafkaSettings(t testing.TB) kafkaEnv {
	t.Helper()
	e, err := envKafka()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return e
}

// errNoDocker is why a container cannot start: no daemon answers.
var errNoDocker = errors.New("no Docker daemon answers")

// sharedKafkaState is the shared broker, reached or started on first use.
type sharedKafkaState struct {
	once   sync.Once
	broker *Broker
	close  func() error // nil when the broker is not ours to stop
	err    error
	ready  atomic.Pointer[Broker]
}

var sharedKafka = new(sharedKafkaState)

// probeTimeout bounds the first request to the shared broker.
const probeTimeout = 15 * time.Second

func sharedBroker(e kafkaEnv) (*Broker, error) {
	s := sharedKafka
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		s.broker, s.close, s.err = startSharedBroker(ctx, e)
		if s.err == nil {
			s.ready.Store(s.broker)
		}
	})
	return s.broker, s.err
}

// sharedIfStarted returns the shared broker once it answered, else nil.
func sharedIfStarted() *Broker { return sharedKafka.ready.Load() }

func startSharedBroker(ctx context.Context, e kafkaEnv) (*Broker, func() error, error) {
	b := &Broker{Addrs: e.brokers, Security: e.security, opts: e.opts,
		Origin: fmt.Sprintf("%s (%s)", EnvKafkaBrokers, strings.Join(e.brokers, ","))}
	var stop func() error
	if len(e.brokers) == 0 {
		if os.Getenv(EnvDocker) == "0" || !dockerAvailable(ctx) {
			return nil, nil, fmt.Errorf("%w, and %s=%s asks for a broker in Docker", errNoDocker, EnvKafka, e.flavour)
		}
		var err error
		if b.Addrs, b.Origin, stop, err = startDockerKafka(ctx, e.flavour); err != nil {
			return nil, nil, err
		}
	}
	if err := probe(ctx, b); err != nil {
		if stop != nil {
			_ = stop()
		}
		return nil, nil, err
	}
	return b, stop, nil
}

// probe asks b for its metadata, so that a broker that is not there fails
// the first test that needs it with that, not with a timeout further on.
func probe(ctx context.Context, b *Broker) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	cl, err := kgo.NewClient(b.ClientOpts()...)
	if err != nil {
		return fmt.Errorf("client for %s: %w", b.Origin, err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).BrokerMetadata(ctx); err != nil {
		// A broker refusing the credentials or the TLS handshake often
		// just closes the connection, so say what was presented.
		return fmt.Errorf("no broker at %s answers (%s): %w", b.Origin, b.Security, err)
	}
	return nil
}

// String describes s without its password, for errors.
func (s KafkaSecurity) String() string {
	tls := "TLS off"
	if s.TLS {
		tls = "TLS on"
	}
	if s.SASLMechanism == "" {
		return tls + ", no SASL"
	}
	return fmt.Sprintf("%s, SASL %s as %q", tls, s.SASLMechanism, s.SASLUsername)
}

// closeSharedKafka stops the shared broker if this binary started one.
func closeSharedKafka() error {
	s := sharedKafka
	// A later KafkaBroker call fails rather than start a container no one
	// would stop.
	s.once.Do(func() { s.err = errors.New("testenv: KafkaBroker called after Main finished") })
	s.ready.Store(nil)
	if s.close == nil {
		return nil
	}
	return s.close()
}
