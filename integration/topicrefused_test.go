package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// topicRefusedConfig is the relay's configuration against a broker that
// creates no topic itself, with kafka.topic_creation giving the order
// topic a replication factor of 3, which a one-broker cluster refuses,
// and every other topic 1 (or 3 too, with everywhere).
func topicRefusedConfig(url string, brokers []string, name, deadLetter string, everywhere bool) string {
	section := 1
	if everywhere {
		section = 3
	}
	dl := ""
	if deadLetter != "" {
		dl = "  dead_letter_topic: " + deadLetter + "\n"
	}
	return fmt.Sprintf(`postgres:
  url: %q
kafka:
  brokers: [%s]
%s  topic_creation:
    enabled: true
    replication_factor: %d
    groups:
      - name: orders
        include: ['outbox\.event\.order']
        replication_factor: 3
cdc:
  slot: %s
  publication: %s
log:
  level: info
  format: json
http:
  listen: 127.0.0.1:0
`, url, strings.Join(brokers, ", "), dl, section, name, name)
}

// TestTopicCreationRefused: a topic the broker refuses to create with the
// settings kafka.topic_creation gives it (a replication factor above its
// one broker) is an error of the events routed there, not a restart loop
// that holds up every topic: with a dead letter topic they go there, the
// reason naming the topic and the setting, and the other topics' events
// flow, with no restart; without one the relay stops naming them; and a
// dead letter topic that cannot be created either stops it too, rather
// than restart for ever.
func TestTopicCreationRefused(t *testing.T) {
	const dlt = "outbox.dead-letter"
	insert := func(ctx context.Context, t *testing.T, e *env) {
		t.Helper()
		for _, agg := range []string{"customer", "order", "customer"} {
			if _, err := e.pool.Exec(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ($1, 'a', 'T', '{}')`, agg); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Run("dead letter", func(t *testing.T) {
		ctx := context.Background()
		e := newEnv(t, cdcKind)
		brokers := noAutoCreateKafka(t)
		p := runBinary(t, topicRefusedConfig(e.url, brokers, e.name, dlt, false))
		waitSlotActive(ctx, t, e.pool, e.name)
		insert(ctx, t, e)
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		recs := testenv.Consume(wctx, t, brokers, []string{"outbox.event.customer", dlt}, 3)
		var customers int
		for _, r := range recs {
			switch r.Topic {
			case "outbox.event.customer":
				customers++
			case dlt:
				reason := header(r, connector.HeaderError)
				for _, w := range []string{`create topic "outbox.event.order"`, "replication factor 3", "kafka.topic_creation.groups (orders).replication_factor", "INVALID_REPLICATION_FACTOR"} {
					if !strings.Contains(reason, w) {
						t.Errorf("the dead letter reason %q does not say %q", reason, w)
					}
				}
			}
		}
		if customers != 2 {
			t.Errorf("%d customer records, want 2, around the refused order", customers)
		}
		if n := strings.Count(p.out.String(), "relay interrupted"); n > 0 {
			t.Errorf("the relay restarted %d times:\n%s", n, p.out.String())
		}
		if p.cmd.ProcessState != nil {
			t.Errorf("the relay exited:\n%s", p.out.String())
		}
	})
	for _, tc := range []struct {
		name, deadLetter string
		everywhere       bool
		want             []string
	}{
		{"no dead letter topic", "", false, []string{`create topic "outbox.event.order"`, "kafka.topic_creation.groups (orders).replication_factor"}},
		{"dead letter topic refused too", dlt, true, []string{`create topic "outbox.event.customer"`, "cannot be written to " + dlt, `create topic "` + dlt + `"`, "kafka.topic_creation.replication_factor"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t, cdcKind)
			brokers := noAutoCreateKafka(t)
			p := runBinary(t, topicRefusedConfig(e.url, brokers, e.name, tc.deadLetter, tc.everywhere))
			waitSlotActive(ctx, t, e.pool, e.name)
			insert(ctx, t, e)
			if code := p.exit(t, time.Minute); code != 1 {
				t.Fatalf("exit code %d, want 1", code)
			}
			reason := p.stopReason(t)
			for _, w := range tc.want {
				if !strings.Contains(reason, w) {
					t.Errorf("the relay stopped with %q, which does not say %q", reason, w)
				}
			}
			if n := strings.Count(p.out.String(), "relay interrupted"); n > 0 {
				t.Errorf("the relay restarted %d times before it stopped:\n%s", n, p.out.String())
			}
		})
	}
}
