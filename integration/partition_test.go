package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/poller"
	"github.com/outboxrelay/outboxrelay/sink"
)

// partitionedOutboxDDL is Debezium's outbox table partitioned by
// aggregate type, without a primary key, which would have to include it.
func partitionedOutboxDDL(name string) string {
	return fmt.Sprintf(`CREATE TABLE %s (id uuid NOT NULL DEFAULT gen_random_uuid(), aggregatetype varchar(255) NOT NULL,
		aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb) PARTITION BY LIST (aggregatetype)`, name)
}

// TestCDCPartitionedOutbox: logical replication sends a partition's rows
// under the partition's name unless the publication publishes them via
// the root. The relay creates its publication that way, so every row of a
// partitioned outbox arrives, from partitions made before the relay
// started and after.
func TestCDCPartitionedOutbox(t *testing.T) {
	t.Parallel()
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	_, brokers := testenv.Kafka(t)
	ctx := context.Background()
	name := uniqueName(t)
	execSQL(t, url, partitionedOutboxDDL(name))
	execSQL(t, url, fmt.Sprintf(`CREATE TABLE %[1]s_order PARTITION OF %[1]s FOR VALUES IN ('order')`, name))
	execSQL(t, url, fmt.Sprintf(`CREATE TABLE %[1]s_default PARTITION OF %[1]s DEFAULT`, name))

	r := startRelay(t, openCDC(t, cdc.Config{URL: url, Table: "public." + name, Slot: name, Publication: name}), brokers, connector.RunnerConfig{}, sink.Config{})
	defer r.stop(t)
	waitSlotActive(ctx, t, pool, name)
	execSQL(t, url, fmt.Sprintf(`CREATE TABLE %[1]s_invoice PARTITION OF %[1]s FOR VALUES IN ('invoice')`, name))

	want := map[string]row{}
	for i, typ := range []string{"order", "customer", "invoice", "order", "customer", "invoice"} {
		var id string
		err := pool.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %s (aggregatetype, aggregateid, type, payload) VALUES ($1, $2, 'T', '{}') RETURNING id::text`, name),
			typ, fmt.Sprintf("a%d", i)).Scan(&id)
		if err != nil {
			t.Fatal(err)
		}
		want[id] = row{id: id, aggType: typ, aggID: fmt.Sprintf("a%d", i)}
	}
	c := newCollector(t, brokers, "outbox.event.order", "outbox.event.customer", "outbox.event.invoice")
	c.waitFor(t, want, 30*time.Second)
}

// TestCDCPartitionedOutboxRefusals: a publication that sends partitions
// under their own names, and a table with inheritance children (whose rows
// always come under the children's names), are refused at start with
// what to do, rather than relayed as nothing.
func TestCDCPartitionedOutboxRefusals(t *testing.T) {
	t.Parallel()
	url := testenv.Postgres(t)
	_, brokers := testenv.Kafka(t)
	name := uniqueName(t)
	execSQL(t, url, partitionedOutboxDDL(name+"_p"))
	execSQL(t, url, fmt.Sprintf(`CREATE TABLE %[1]s_p_default PARTITION OF %[1]s_p DEFAULT`, name))
	execSQL(t, url, fmt.Sprintf(`CREATE PUBLICATION %[1]s_leaf FOR TABLE %[1]s_p`, name))
	execSQL(t, url, fmt.Sprintf(outboxDDL, name+"_i"))
	execSQL(t, url, fmt.Sprintf(`CREATE TABLE %[1]s_i_child () INHERITS (%[1]s_i)`, name))

	for _, tc := range []struct {
		name string
		cfg  cdc.Config
		want string
	}{
		{"publication by partition", cdc.Config{Table: "public." + name + "_p", Publication: name + "_leaf"},
			fmt.Sprintf(`ALTER PUBLICATION "%s_leaf" SET (publish_via_partition_root = true)`, name)},
		{"inheritance children", cdc.Config{Table: "public." + name + "_i"}, "has inheritance children"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.URL, tc.cfg.Slot = url, uniqueName(t)
			r := startRelay(t, openCDC(t, tc.cfg), brokers, connector.RunnerConfig{}, sink.Config{})
			err := r.wait(t, 30*time.Second)
			if !connector.IsPermanent(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("relay stopped with %v; want a permanent error saying %q", err, tc.want)
			}
		})
	}
}

// TestCDCRenamedOutboxFollowed: the stream knows the outbox by its oid
// too. Rows written before a rename and replayed after it come under the
// old name (decoding reads the catalog as it was), rows after it under the
// new one, and a rename while the relay runs changes the name mid-stream:
// every row arrives.
func TestCDCRenamedOutboxFollowed(t *testing.T) {
	t.Parallel()
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	_, brokers := testenv.Kafka(t)
	ctx := context.Background()
	name := uniqueName(t)
	execSQL(t, url, fmt.Sprintf(outboxDDL, name))
	want := map[string]row{}
	insert := func(table, aggregate string) map[string]row {
		t.Helper()
		var id string
		err := pool.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %s (aggregatetype, aggregateid, type, payload) VALUES ('order', $1, 'T', '{}') RETURNING id::text`, table),
			aggregate).Scan(&id)
		if err != nil {
			t.Fatal(err)
		}
		want[id] = row{id: id, aggType: "order", aggID: aggregate}
		return map[string]row{id: want[id]}
	}
	cfg := cdc.Config{URL: url, Table: "public." + name, Slot: name, Publication: name}
	r := startRelay(t, openCDC(t, cfg), brokers, connector.RunnerConfig{}, sink.Config{})
	waitSlotActive(ctx, t, pool, name)
	c := newCollector(t, brokers, "outbox.event.order")
	c.waitFor(t, insert(name, "first"), 30*time.Second)
	r.stop(t)

	insert(name, "before-rename")
	execSQL(t, url, fmt.Sprintf(`ALTER TABLE %[1]s RENAME TO %[1]s_new`, name))
	insert(name+"_new", "after-rename")
	cfg.Table = "public." + name + "_new"
	r = startRelay(t, openCDC(t, cfg), brokers, connector.RunnerConfig{}, sink.Config{})
	defer r.stop(t)
	c.waitFor(t, want, 30*time.Second)

	execSQL(t, url, fmt.Sprintf(`ALTER TABLE %[1]s_new RENAME TO %[1]s_newer`, name))
	insert(name+"_newer", "renamed-while-running")
	c.waitFor(t, want, 30*time.Second)
}

// TestPollRefusesPartitionedOutbox: the poller marks rows by ctid, which
// every partition numbers on its own, so it refuses a partitioned table
// (or one with inheritance children) rather than mark rows it never sent.
func TestPollRefusesPartitionedOutbox(t *testing.T) {
	t.Parallel()
	url := testenv.Postgres(t)
	name := uniqueName(t)
	execSQL(t, url, partitionedOutboxDDL(name+"_p"))
	execSQL(t, url, fmt.Sprintf(`CREATE TABLE %[1]s_p_default PARTITION OF %[1]s_p DEFAULT`, name))
	execSQL(t, url, fmt.Sprintf(outboxDDL, name+"_i"))
	execSQL(t, url, fmt.Sprintf(`CREATE TABLE %[1]s_i_child () INHERITS (%[1]s_i)`, name))
	for _, table := range []string{name + "_p", name + "_i"} {
		src, err := poller.New(poller.Config{URL: url, Table: "public." + table}, poller.WithLogger(testLogger(t)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = src.Run(ctx, make(chan connector.Batch))
		cancel()
		if !connector.IsPermanent(err) || !strings.Contains(err.Error(), "is partitioned or has inheritance children") {
			t.Errorf("poller on %s: Run = %v; want a permanent error saying it is partitioned", table, err)
		}
	}
}
