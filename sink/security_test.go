package sink_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/sink"
)

const testPassword = "s3cret-Pa55word"

// publishOne publishes one event through a sink built from cfg and waits
// for its acknowledgement; it returns the first error on the way.
func publishOne(t *testing.T, cfg sink.Config, topic string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	s, err := sink.New(cfg)
	if err != nil {
		t.Fatalf("new sink: %v", err)
	}
	defer s.Close()
	acked := make(chan error, 1)
	m := &connector.Message{Topic: topic, Key: []byte("agg-1"), Value: []byte(`{"n":1}`), EventID: "ev-1"}
	if err := s.Publish(ctx, m, func(err error) { acked <- err }); err != nil {
		return err
	}
	select {
	case err := <-acked:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// consumeOne reads topic back with the same connection settings.
func consumeOne(t *testing.T, cfg sink.Config, topic string) *kgo.Record {
	t.Helper()
	opts, err := sink.ClientOptions(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		if recs := fs.Records(); len(recs) > 0 {
			return recs[0]
		}
	}
	t.Fatalf("no record on %s", topic)
	return nil
}

// TestSecureBrokers publishes through TLS (with and without a client
// certificate) and every SASL mechanism to a kfake broker that demands
// them, and reads the record back.
func TestSecureBrokers(t *testing.T) {
	certs := testenv.NewCerts(t)
	for _, tc := range []struct {
		name      string
		broker    []kfake.Opt
		tls       sink.TLS
		sasl      sink.SASL
		plaintext bool
	}{
		{
			name:   "tls",
			broker: []kfake.Opt{kfake.TLS(certs.ServerTLS(false))},
			tls:    sink.TLS{Enabled: true, CAFile: certs.CAFile},
		},
		{
			name:   "mutual tls",
			broker: []kfake.Opt{kfake.TLS(certs.ServerTLS(true))},
			tls:    sink.TLS{Enabled: true, CAFile: certs.CAFile, CertFile: certs.ClientCert, KeyFile: certs.ClientKey, ServerName: "localhost"},
		},
		{
			name:   "scram-sha-256 over tls",
			broker: []kfake.Opt{kfake.TLS(certs.ServerTLS(false)), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "relay", testPassword)},
			tls:    sink.TLS{Enabled: true, CAFile: certs.CAFile},
			sasl:   sink.SASL{Mechanism: "scram-sha-256", Username: "relay", Password: testPassword},
		},
		{
			name:   "scram-sha-512",
			broker: []kfake.Opt{kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "relay", testPassword)},
			sasl:   sink.SASL{Mechanism: "SCRAM-SHA-512", Username: "relay", Password: testPassword},
		},
		{
			name:   "plain over tls",
			broker: []kfake.Opt{kfake.TLS(certs.ServerTLS(false)), kfake.EnableSASL(), kfake.Superuser("PLAIN", "relay", testPassword)},
			tls:    sink.TLS{Enabled: true, CAFile: certs.CAFile},
			sasl:   sink.SASL{Mechanism: "plain", Username: "relay", Password: testPassword},
		},
		{
			name:      "plain without tls, explicitly allowed",
			broker:    []kfake.Opt{kfake.EnableSASL(), kfake.Superuser("PLAIN", "relay", testPassword)},
			sasl:      sink.SASL{Mechanism: "plain", Username: "relay", Password: testPassword},
			plaintext: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, brokers := testenv.Kafka(t, tc.broker...)
			cfg := sink.Config{Brokers: brokers, TLS: tc.tls, SASL: tc.sasl, AllowPlaintextSASL: tc.plaintext}
			if err := publishOne(t, cfg, "secure"); err != nil {
				t.Fatalf("publish: %v", err)
			}
			if r := consumeOne(t, cfg, "secure"); string(r.Key) != "agg-1" || string(r.Value) != `{"n":1}` {
				t.Fatalf("read back key %q value %q", r.Key, r.Value)
			}
		})
	}
}

// TestSecureBrokersRefuse checks that a wrong password, an untrusted or
// misnamed certificate and a missing client certificate each fail with an
// error that says what to fix and never shows the password. A certificate
// problem is permanent (no retry loop); kfake answers a wrong password by
// hanging up, which a restarting broker also does, so that stays
// retryable (Kafka's own SASL_AUTHENTICATION_FAILED is permanent).
func TestSecureBrokersRefuse(t *testing.T) {
	certs := testenv.NewCerts(t)
	other := testenv.NewCerts(t) // a CA that did not sign the broker's certificate
	for _, tc := range []struct {
		name      string
		broker    []kfake.Opt
		tls       sink.TLS
		sasl      sink.SASL
		want      string
		permanent bool
	}{
		{
			name:   "wrong scram password",
			broker: []kfake.Opt{kfake.TLS(certs.ServerTLS(false)), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "relay", "the-right-one")},
			tls:    sink.TLS{Enabled: true, CAFile: certs.CAFile},
			sasl:   sink.SASL{Mechanism: "scram-sha-256", Username: "relay", Password: testPassword},
			want:   `wrong SASL credentials (SCRAM-SHA-256 as "relay")`,
		},
		{
			name:   "wrong plain password",
			broker: []kfake.Opt{kfake.TLS(certs.ServerTLS(false)), kfake.EnableSASL(), kfake.Superuser("PLAIN", "relay", "the-right-one")},
			tls:    sink.TLS{Enabled: true, CAFile: certs.CAFile},
			sasl:   sink.SASL{Mechanism: "plain", Username: "relay", Password: testPassword},
			want:   `wrong SASL credentials (PLAIN as "relay")`,
		},
		{
			name:      "untrusted certificate",
			broker:    []kfake.Opt{kfake.TLS(certs.ServerTLS(false))},
			tls:       sink.TLS{Enabled: true, CAFile: other.CAFile},
			want:      "set kafka.tls.ca_file to the CA that signed it",
			permanent: true,
		},
		{
			name:      "certificate for another name",
			broker:    []kfake.Opt{kfake.TLS(certs.ServerTLS(false))},
			tls:       sink.TLS{Enabled: true, CAFile: certs.CAFile, ServerName: "kafka.example.com"},
			want:      "kafka.tls.server_name",
			permanent: true,
		},
		{
			name:      "no client certificate for mutual tls",
			broker:    []kfake.Opt{kfake.TLS(certs.ServerTLS(true))},
			tls:       sink.TLS{Enabled: true, CAFile: certs.CAFile},
			want:      "client certificate",
			permanent: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, brokers := testenv.Kafka(t, tc.broker...)
			err := publishOne(t, sink.Config{Brokers: brokers, TLS: tc.tls, SASL: tc.sasl}, "secure")
			if err == nil {
				t.Fatal("published; want a refusal")
			}
			t.Logf("error: %v", err)
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if connector.IsPermanent(err) != tc.permanent {
				t.Errorf("error %q: permanent %v, want %v", err, connector.IsPermanent(err), tc.permanent)
			}
			if strings.Contains(err.Error(), testPassword) {
				t.Errorf("error shows the password: %q", err)
			}
		})
	}
}

func TestSecurityValidate(t *testing.T) {
	certs := testenv.NewCerts(t)
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  sink.Config
		want []string // each must appear; none means valid
	}{
		{name: "plaintext, no auth"},
		{name: "scram without tls", cfg: sink.Config{SASL: sink.SASL{Mechanism: "scram-sha-256", Username: "u", Password: "p"}}},
		{name: "plain with tls", cfg: sink.Config{TLS: sink.TLS{Enabled: true}, SASL: sink.SASL{Mechanism: "PLAIN", Username: "u", Password: "p"}}},
		{name: "plain allowed without tls", cfg: sink.Config{AllowPlaintextSASL: true, SASL: sink.SASL{Mechanism: "plain", Username: "u", Password: "p"}}},
		{
			name: "plain without tls",
			cfg:  sink.Config{SASL: sink.SASL{Mechanism: "plain", Username: "u", Password: "p"}},
			want: []string{"anyone on the network can read it", "kafka.allow_plaintext_sasl: true"},
		},
		{
			name: "unknown mechanism",
			cfg:  sink.Config{SASL: sink.SASL{Mechanism: "gssapi", Username: "u", Password: "p"}},
			want: []string{`"gssapi" is not plain, scram-sha-256 or scram-sha-512`},
		},
		{
			name: "no credentials",
			cfg:  sink.Config{SASL: sink.SASL{Mechanism: "scram-sha-512"}},
			want: []string{"kafka.sasl.username is required", "kafka.sasl.password (or kafka.sasl.password_file) is required"},
		},
		{
			name: "credentials without mechanism",
			cfg:  sink.Config{SASL: sink.SASL{Username: "u"}},
			want: []string{"no kafka.sasl.mechanism"},
		},
		{
			name: "certificate settings without tls",
			cfg:  sink.Config{TLS: sink.TLS{CAFile: certs.CAFile}},
			want: []string{"kafka.tls.enabled is false"},
		},
		{
			name: "bad files",
			cfg:  sink.Config{TLS: sink.TLS{Enabled: true, CAFile: garbage, CertFile: certs.ClientCert}},
			want: []string{"holds no PEM certificate", "kafka.tls.cert_file and kafka.tls.key_file go together"},
		},
		{
			name: "missing ca file",
			cfg:  sink.Config{TLS: sink.TLS{Enabled: true, CAFile: "/nonexistent/ca.pem"}},
			want: []string{"kafka.tls.ca_file: open /nonexistent/ca.pem"},
		},
		{
			name: "client certificate",
			cfg:  sink.Config{TLS: sink.TLS{Enabled: true, CAFile: certs.CAFile, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Brokers = []string{"localhost:9092"}
			cfg.SetDefaults()
			err := cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("valid configuration refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted; want errors saying %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "\"p\"") {
				t.Errorf("error shows the password: %q", err)
			}
		})
	}
}
