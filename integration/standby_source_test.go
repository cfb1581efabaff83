package integration

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// standbySourceConfig is the relay's configuration file for reading from
// the standby, with extra YAML under cdc.
func standbySourceConfig(t *testing.T, pair *replicaPair, brokers []string, cdcExtra string) string {
	t.Helper()
	return writeTemp(t, "outboxrelay.yaml", yamlConfig(pair.standby.URL(replicaDB), brokers,
		"cdc:\n  slot: relay\n  publication: relay\n  status_interval: 100ms\n"+cdcExtra))
}

// logStandbySnapshots has the primary log the transactions running, over
// and over, until the relay p streams from its slot on the standby: creating
// a slot on a standby waits for that record, which an idle primary writes
// only every 15 s (docs/database.md#a-standby-as-the-source).
func logStandbySnapshots(ctx context.Context, t *testing.T, pair *replicaPair, p *proc, slot string) {
	t.Helper()
	primary := connectPool(t, pair.primary.URL(replicaDB))
	standby := connectPool(t, pair.standby.URL(replicaDB))
	for deadline := time.Now().Add(time.Minute); ; {
		if _, err := primary.Exec(ctx, `SELECT pg_log_standby_snapshot()`); err != nil {
			t.Fatal(err)
		}
		// Streaming, not the slot's active flag: a slot is active while
		// it is being created, before its consistent point, and a row
		// committed before that point is not the slot's to decode.
		var active bool
		err := standby.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
		if err == nil && active && strings.Contains(p.out.String(), "replication started") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the relay does not stream from slot %s on the standby after a minute (%v)", slot, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestStandbySourceStreams points the relay at a hot standby (PostgreSQL
// 16 and later decode there), the publication made on the primary. The
// relay creates its slot on the standby and relays what commits on the
// primary: nothing lost, each aggregate in order. Then the standby is
// promoted: its slot is its own, so the relay carries on there. `check`
// says it reads a hot standby and what that needs.
func TestStandbySourceStreams(t *testing.T) {
	ctx := context.Background()
	pair := startReplicaPair(t, 16, "logical decoding on a standby", func(ctx context.Context, pool *pgxpool.Pool) {
		createOutbox(t, pool, "outbox")
		if _, err := pool.Exec(ctx, `CREATE PUBLICATION relay FOR TABLE outbox WITH (publish = 'insert')`); err != nil {
			t.Fatal(err)
		}
	})
	_, brokers := testenv.Kafka(t, kfake.DefaultNumPartitions(partitions))
	cfg := standbySourceConfig(t, pair, brokers, "")
	p := startBinary(t, []string{"run", "--config", cfg})
	logStandbySnapshots(ctx, t, pair, p, "relay")

	out, _ := exec.Command(binary(t), "check", "--config", cfg).CombinedOutput()
	for _, want := range []string{"PASS    postgres connection", "a hot standby", "hot_standby_feedback", "a slot of this standby"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("check does not say %q:\n%s", want, out)
		}
	}

	primary := connectPool(t, pair.primary.URL(replicaDB))
	c := newCollector(t, brokers, "outbox.event.order")
	w := workload{table: "outbox", writers: 2, aggregates: 10, events: 300}
	w.write(ctx, t, primary)
	c.waitFor(t, readRows(ctx, t, primary, "outbox"), time.Minute)

	// The standby becomes the primary, with its slot.
	pair.failover(ctx, t)
	newPrimary := connectPool(t, pair.standby.URL(replicaDB))
	w.seqBase = 300 / 10
	w.write(ctx, t, newPrimary)
	rows := readRows(ctx, t, newPrimary, "outbox")
	c.waitFor(t, rows, 2*time.Minute)
	if code := p.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
	logs := p.out.String()
	if !strings.Contains(logs, "the server is a hot standby") {
		t.Errorf("the relay does not say it reads from a hot standby")
	}
	for _, bad := range []string{"level=WARN", "level=ERROR"} {
		for _, l := range strings.Split(logs, "\n") {
			// The lost connection at the promotion is expected, and
			// so are reconnects while the server restarts.
			if strings.Contains(l, bad) && !strings.Contains(l, "relay interrupted") && !strings.Contains(l, "cannot connect to PostgreSQL; retrying") {
				t.Errorf("unexpected: %s", l)
			}
		}
	}
	c.settle(500 * time.Millisecond)
	rep := c.check(t, rows, partitions)
	t.Logf("%d events, %d records, %d repeated", len(rows), rep.records, rep.duplicates)
}

// TestStandbySourceRefusals points the relay at a hot standby with what a
// standby cannot do: create the publication, or write the heartbeat. The
// relay exits at start with an error saying so and what to do, rather
// than retry writes the standby refuses forever, and creates no slot.
func TestStandbySourceRefusals(t *testing.T) {
	ctx := context.Background()
	pair := startReplicaPair(t, 16, "logical decoding on a standby", func(ctx context.Context, pool *pgxpool.Pool) {
		createOutbox(t, pool, "outbox")
	})
	_, brokers := testenv.Kafka(t, kfake.DefaultNumPartitions(partitions))
	for _, tc := range []struct {
		name, cdcExtra string
		before         func(t *testing.T)
		want           []string
	}{
		{
			name: "publication missing",
			want: []string{`publication "relay" does not exist`, "standby, which takes no writes", "run on the primary CREATE PUBLICATION"},
		},
		{
			name:     "heartbeat",
			cdcExtra: "  heartbeat_interval: 1s\n",
			before: func(t *testing.T) {
				execOn(ctx, t, pair.primary.URL(replicaDB), `CREATE PUBLICATION relay FOR TABLE outbox`)
				standby := connectPool(t, pair.standby.URL(replicaDB))
				for deadline := time.Now().Add(time.Minute); ; {
					var n int
					if err := standby.QueryRow(ctx, `SELECT count(*) FROM pg_publication WHERE pubname = 'relay'`).Scan(&n); err != nil {
						t.Fatal(err)
					}
					if n == 1 {
						return
					}
					if time.Now().After(deadline) {
						t.Fatal("the publication has not reached the standby after a minute")
					}
					time.Sleep(50 * time.Millisecond)
				}
			},
			want: []string{"cdc.heartbeat_interval is 1s", "standby, which takes no writes", "set cdc.heartbeat_interval to 0"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.before != nil {
				tc.before(t)
			}
			p := startBinary(t, []string{"run", "--config", standbySourceConfig(t, pair, brokers, tc.cdcExtra)})
			if code := p.exit(t, time.Minute); code != 1 {
				t.Errorf("exit code %d of the relay that refused the standby, want 1", code)
			}
			out, reason := p.out.String(), p.stopReason(t)
			for _, want := range tc.want {
				if !strings.Contains(reason, want) {
					t.Errorf("the error the relay stopped with does not say %q: %s\n%s", want, reason, out)
				}
			}
			var slots int
			if err := connectPool(t, pair.standby.URL(replicaDB)).QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'relay'`).Scan(&slots); err != nil {
				t.Fatal(err)
			}
			if slots != 0 {
				t.Errorf("the relay created its slot on the standby before it refused")
			}
		})
	}
}

// TestStandbySourceSnapshotInitial has the relay create its slot on a hot
// standby with cdc.snapshot initial: the snapshot the slot exports there
// holds the rows the primary committed before, which the relay publishes
// before it streams what commits after.
func TestStandbySourceSnapshotInitial(t *testing.T) {
	ctx := context.Background()
	w := workload{table: "outbox", writers: 2, aggregates: 10, events: 100}
	pair := startReplicaPair(t, 16, "logical decoding on a standby", func(ctx context.Context, pool *pgxpool.Pool) {
		createOutbox(t, pool, "outbox")
		if _, err := pool.Exec(ctx, `CREATE PUBLICATION relay FOR TABLE outbox WITH (publish = 'insert')`); err != nil {
			t.Fatal(err)
		}
		w.write(ctx, t, pool)
	})
	_, brokers := testenv.Kafka(t, kfake.DefaultNumPartitions(partitions))
	p := startBinary(t, []string{"run", "--config", standbySourceConfig(t, pair, brokers, "  snapshot: initial\n")})
	logStandbySnapshots(ctx, t, pair, p, "relay")
	primary := connectPool(t, pair.primary.URL(replicaDB))
	c := newCollector(t, brokers, "outbox.event.order")
	w.seqBase = 100 / 10
	w.write(ctx, t, primary)
	rows := readRows(ctx, t, primary, "outbox")
	c.waitFor(t, rows, time.Minute)
	if code := p.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
	c.settle(500 * time.Millisecond)
	rep := c.check(t, rows, partitions)
	if rep.duplicates != 0 {
		t.Errorf("%d events arrived twice; the snapshot and the stream should meet without overlap", rep.duplicates)
	}
}
