package testenv

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestReadKafkaEnv(t *testing.T) {
	certs := NewCerts(t)
	tests := []struct {
		name   string
		env    map[string]string
		shared bool
		sec    KafkaSecurity
		errs   []string // each must be in the error; none: no error
	}{
		{name: "nothing set: kfake"},
		{name: "kfake by name", env: map[string]string{EnvKafka: "KFAKE"}},
		{name: "brokers", env: map[string]string{EnvKafkaBrokers: " 127.0.0.1:9092, kafka-1:9093 "}, shared: true},
		{name: "a container", env: map[string]string{EnvKafka: "redpanda"}, shared: true},
		{
			name: "brokers with SCRAM and a CA",
			env: map[string]string{EnvKafkaBrokers: "b:9092", EnvKafkaSASLMechanism: "SCRAM-SHA-512",
				EnvKafkaSASLUsername: "relay", EnvKafkaSASLPassword: "pw", EnvKafkaTLSCAFile: certs.CAFile},
			shared: true,
			sec:    KafkaSecurity{TLS: true, TLSCAFile: certs.CAFile, SASLMechanism: "scram-sha-512", SASLUsername: "relay", SASLPassword: "pw"},
		},
		{
			name:   "TLS on by itself",
			env:    map[string]string{EnvKafkaBrokers: "b:9092", EnvKafkaTLSEnabled: "true"},
			shared: true,
			sec:    KafkaSecurity{TLS: true},
		},
		{
			name: "every problem at once",
			env: map[string]string{EnvKafkaBrokers: "nohost,b:9092", EnvKafka: "kafka", EnvKafkaSASLMechanism: "gssapi",
				EnvKafkaTLSEnabled: "yes please", EnvKafkaTLSCAFile: "/nonexistent/ca.pem"},
			errs: []string{`"nohost" is not host:port`, "both set", `"gssapi" is not plain`, "needs " + EnvKafkaSASLUsername,
				`"yes please" is not true or false`, EnvKafkaTLSCAFile},
		},
		{name: "an unknown broker kind", env: map[string]string{EnvKafka: "pulsar"}, errs: []string{`"pulsar" is not kfake, kafka or redpanda`}},
		{name: "security without brokers", env: map[string]string{EnvKafkaSASLMechanism: "plain", EnvKafkaSASLUsername: "u", EnvKafkaSASLPassword: "p"},
			errs: []string{"without " + EnvKafkaBrokers}},
		{name: "credentials without a mechanism", env: map[string]string{EnvKafkaBrokers: "b:9092", EnvKafkaSASLUsername: "u"},
			errs: []string{"without " + EnvKafkaSASLMechanism}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := readKafkaEnv(func(k string) string { return tc.env[k] })
			if len(tc.errs) == 0 && err != nil {
				t.Fatalf("error %v, want none", err)
			}
			for _, want := range tc.errs {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("error %v; want it to say %q", err, want)
				}
			}
			if len(tc.errs) > 0 {
				return
			}
			if e.shared() != tc.shared {
				t.Errorf("shared = %v, want %v", e.shared(), tc.shared)
			}
			if e.security != tc.sec {
				t.Errorf("security = %+v, want %+v", e.security, tc.sec)
			}
		})
	}
}

// withKafkaEnv makes the tests see e as the environment's answer until
// the test ends, and forgets the shared broker before and after.
func withKafkaEnv(t *testing.T, e kafkaEnv) {
	saved := envKafka
	envKafka = func() (kafkaEnv, error) { return e, nil }
	resetShared := func() {
		_ = closeSharedKafka()
		sharedKafka = new(sharedKafkaState)
	}
	resetShared()
	t.Cleanup(func() {
		envKafka = saved
		resetShared()
	})
}

// TestSharedBrokerAuthenticated points the shared broker at a kfake
// cluster with TLS and SCRAM, as OUTBOXRELAY_TEST_KAFKA_BROKERS and its
// security variables would: KafkaBroker returns it, its clients reach it,
// CreateTopics makes the partitions asked for, and the tests that need
// kfake skip.
func TestSharedBrokerAuthenticated(t *testing.T) {
	certs := NewCerts(t)
	cluster := startKfake(t, kfake.TLS(certs.ServerTLS(false)), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "relay", "secret"))
	env := map[string]string{
		EnvKafkaBrokers: strings.Join(cluster.ListenAddrs(), ","), EnvKafkaTLSCAFile: certs.CAFile,
		EnvKafkaSASLMechanism: "scram-sha-256", EnvKafkaSASLUsername: "relay", EnvKafkaSASLPassword: "secret",
	}
	e, err := readKafkaEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	withKafkaEnv(t, e)

	var b *Broker
	t.Run("KafkaBroker", func(t *testing.T) {
		b = KafkaBroker(t)
		prefix := TopicPrefix(t)
		if !strings.HasPrefix(prefix, "test."+runID+".") || !strings.HasSuffix(prefix, ".testsharedbrokerauthenticated-kafkabroker.") {
			t.Errorf("TopicPrefix = %q; want test.<run>.<n>.<test name>.", prefix)
		}
		b.CreateTopics(t, 3, map[string]string{"max.message.bytes": "5000"}, prefix+"events")
		cl, err := kgo.NewClient(b.ClientOpts()...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		details, err := kadm.NewClient(cl).ListTopics(ctx, prefix+"events")
		if err != nil {
			t.Fatal(err)
		}
		if n := len(details[prefix+"events"].Partitions); n != 3 {
			t.Errorf("%d partitions, want 3", n)
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: prefix + "events", Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		if got := Consume(ctx, t, b.Addrs, []string{prefix + "events"}, 1); string(got[0].Value) != "x" {
			t.Errorf("consumed %q, want x", got[0].Value)
		}
	})
	if b == nil || !b.Shared() || b.Security.SASLUsername != "relay" {
		t.Fatalf("KafkaBroker returned %+v; want the shared broker with its security", b)
	}
	for name, f := range map[string]func(t *testing.T){
		"Kafka":        func(t *testing.T) { Kafka(t) },
		"Broker.Kfake": func(t *testing.T) { KafkaBroker(t).Kfake(t, "injects faults") },
	} {
		var inner testing.TB
		t.Run(name, func(t *testing.T) {
			inner = t
			f(t)
			t.Error("not skipped")
		})
		if !inner.Skipped() {
			t.Errorf("%s on a shared broker: not skipped", name)
		}
	}
}

// TestSharedBrokerWrongPassword: a shared broker that refuses the
// credentials fails the test with that, not with a timeout later.
func TestSharedBrokerWrongPassword(t *testing.T) {
	cluster := startKfake(t, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "relay", "secret"))
	env := map[string]string{
		EnvKafkaBrokers:       strings.Join(cluster.ListenAddrs(), ","),
		EnvKafkaSASLMechanism: "scram-sha-256", EnvKafkaSASLUsername: "relay", EnvKafkaSASLPassword: "wrong",
	}
	e, err := readKafkaEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = startSharedBroker(t.Context(), e)
	if err == nil || !strings.Contains(err.Error(), "no broker at "+EnvKafkaBrokers) || !strings.Contains(err.Error(), `SASL scram-sha-256 as "relay"`) {
		t.Errorf("error %v; want it to say the broker at %s did not answer, and with which credentials", err, EnvKafkaBrokers)
	}
}
