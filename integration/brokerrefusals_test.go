package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// What a broker the relay did not set up refuses, and what the relay then
// says: a topic that does not exist where topics are not created on first
// use, a write or a config lookup its principal is not granted. Each holds
// publishing up until someone acts on the Kafka side: the relay restarts
// from its checkpoint with backoff, its WARN at each step names the topic
// (or the cluster) and what to do, /readyz fails with the same words, and
// once the topic or the grant is there the event arrives and /readyz
// passes. docs/brokers.md.

const refusalTopic = "outbox.event.order"

// refusalAdmin is an admin client of the cluster at brokers, as its
// superuser when sasl is set.
func refusalAdmin(t *testing.T, brokers []string, sasl bool) *kadm.Client {
	t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	if sasl {
		opts = append(opts, kgo.SASL(plain.Auth{User: "admin", Pass: refusalPassword}.AsMechanism()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

const refusalPassword = "relay-pass-1"

// refusalACLs runs kfake with ACLs, a superuser admin and the relay's
// principal User:relay, granted acls and nothing else.
func refusalACLs(t *testing.T, acls ...kfake.ACL) []string {
	t.Helper()
	_, brokers := testenv.Kafka(t, kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("PLAIN", "admin", refusalPassword), kfake.User("PLAIN", "relay", refusalPassword, acls...))
	return brokers
}

func topicGrant(op kmsg.ACLOperation) kfake.ACL {
	return kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: refusalTopic, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
}

func clusterGrant(op kmsg.ACLOperation) kfake.ACL {
	return kfake.ACL{Resource: kmsg.ACLResourceTypeCluster, Name: "kafka-cluster", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
}

// TestKafkaRefusalsHoldPublishingUp runs the poller's binary (it needs no
// topic of its own) against each refusal and lifts it once the relay has
// said what it needs.
func TestKafkaRefusalsHoldPublishingUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// brokers starts the cluster; sasl: the relay authenticates.
		brokers func(t *testing.T) []string
		sasl    bool
		// want is in the WARN of each restart and in /readyz.
		want []string
		// lift makes the Kafka side what the relay asked for.
		lift func(ctx context.Context, adm *kadm.Client) error
	}{
		{
			name:    "topic missing, no auto-creation",
			brokers: noAutoCreateKafka,
			want:    []string{"publishing to topic " + refusalTopic, `topic \"` + refusalTopic + `\" does not exist`, "kafka-topics.sh --create --topic " + refusalTopic, "kafka.topic_creation"},
			lift: func(ctx context.Context, adm *kadm.Client) error {
				_, err := adm.CreateTopic(ctx, 1, 1, nil, refusalTopic)
				return err
			},
		},
		{
			name: "write not granted",
			brokers: func(t *testing.T) []string {
				return refusalACLs(t, topicGrant(kmsg.ACLOperationDescribe), topicGrant(kmsg.ACLOperationDescribeConfigs),
					clusterGrant(kmsg.ACLOperationIdempotentWrite), clusterGrant(kmsg.ACLOperationDescribeConfigs))
			},
			sasl: true,
			want: []string{"publishing to topic " + refusalTopic, "TOPIC_AUTHORIZATION_FAILED", "WRITE and DESCRIBE on the topic"},
			lift: grant(kadm.NewACLs().Allow("User:relay").Topics(refusalTopic).Operations(kadm.OpWrite)),
		},
		{
			name: "DescribeConfigs not granted on the cluster",
			brokers: func(t *testing.T) []string {
				return refusalACLs(t, topicGrant(kmsg.ACLOperationWrite), topicGrant(kmsg.ACLOperationDescribeConfigs),
					clusterGrant(kmsg.ACLOperationIdempotentWrite))
			},
			sasl: true,
			want: []string{"publishing to every topic", "CLUSTER_AUTHORIZATION_FAILED", "DescribeConfigs on the cluster", "kafka.max_record_bytes"},
			lift: grant(kadm.NewACLs().Allow("User:relay").Clusters().Operations(kadm.OpDescribeConfigs)),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			url := testenv.Postgres(t)
			pool := connectPool(t, url)
			createOutbox(t, pool, "outbox")
			pollKind.prepare(t, url)
			brokers := tc.brokers(t)
			cfg := pollKind.binaryConfig(url, brokers, "")
			cfg = strings.Replace(cfg, "format: text", "format: json", 1)
			if tc.sasl {
				cfg = strings.Replace(cfg, "kafka:\n", fmt.Sprintf("kafka:\n  allow_plaintext_sasl: true\n  sasl: {mechanism: plain, username: relay, password: %s}\n", refusalPassword), 1)
			}
			p := runBinary(t, cfg)
			ep := binaryEndpoint(t, p)
			if _, err := pool.Exec(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', 'a', 'T', '{}')`); err != nil {
				t.Fatal(err)
			}
			ep.waitStatus(t, "/readyz", http.StatusServiceUnavailable, time.Minute, unescape(tc.want)...)
			waitLogged(t, p, time.Minute, append([]string{`"level":"WARN"`, "relay interrupted"}, tc.want[1:]...)...)
			for deadline := time.Now().Add(time.Minute); restarts(t, ep) < 2; time.Sleep(100 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("outboxrelay_source_restarts_total is %d after a minute; want the restarts counted", restarts(t, ep))
				}
			}
			if lines, n := countLines(p, tc.want[1]), restarts(t, ep); lines > n+1 {
				t.Errorf("%d log lines say %q for %d restarts; want one a backoff step:\n%s", lines, tc.want[1], n, p.out.String())
			}
			ep.waitStatus(t, "/readyz", http.StatusServiceUnavailable, time.Second, unescape(tc.want)...)

			lctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := tc.lift(lctx, refusalAdmin(t, brokers, tc.sasl)); err != nil {
				t.Fatalf("lift the refusal: %v", err)
			}
			ep.waitStatus(t, "/readyz", http.StatusOK, 2*time.Minute)
			if n := countRows(t, pool, `SELECT count(*) FROM outbox WHERE published_at IS NULL`); n != 0 {
				t.Errorf("%d events unpublished once /readyz passes", n)
			}
		})
	}
}

// grant is a lift that creates acls as the superuser.
func grant(acls *kadm.ACLBuilder) func(context.Context, *kadm.Client) error {
	return func(ctx context.Context, adm *kadm.Client) error {
		acls.ResourcePatternType(kadm.ACLPatternLiteral)
		res, err := adm.CreateACLs(ctx, acls)
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Err != nil {
				return r.Err
			}
		}
		return nil
	}
}

// unescape is want as /readyz says it: without the JSON log's escapes.
func unescape(want []string) []string {
	out := make([]string, len(want))
	for i, w := range want {
		out[i] = strings.ReplaceAll(w, `\"`, `"`)
	}
	return out
}

// waitLogged waits until one line of p's output holds every one of want.
func waitLogged(t *testing.T, p *proc, timeout time.Duration, want ...string) {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(100 * time.Millisecond) {
		for _, line := range strings.Split(p.out.String(), "\n") {
			if allIn(line, want) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line says all of %q within %s", want, timeout)
		}
	}
}

func allIn(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// countLines counts the lines of p's output that say s.
func countLines(p *proc, s string) int {
	n := 0
	for _, line := range strings.Split(p.out.String(), "\n") {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

func restarts(t *testing.T, ep *endpoint) int {
	t.Helper()
	n, _ := value(ep.scrape(t), "outboxrelay_source_restarts_total")
	return int(n)
}
