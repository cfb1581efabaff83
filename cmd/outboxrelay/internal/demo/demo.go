// Package demo runs outboxrelay end to end on this machine alone: a
// throwaway PostgreSQL from the local binaries, an in-process Kafka-protocol
// broker, a few committed outbox events, the CDC relay, and the records it
// produced, printed as a consumer reads them.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/app"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/internal/localpg"
)

// Schema is two Debezium-style outbox tables, one per module, which one
// relay reads from one slot (outbox.tables).
const Schema = `CREATE TABLE public.outbox (
	id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	aggregatetype varchar(255) NOT NULL,
	aggregateid   varchar(255) NOT NULL,
	type          varchar(255) NOT NULL,
	payload       jsonb
);
CREATE SCHEMA billing;
CREATE TABLE billing.outbox (LIKE public.outbox INCLUDING ALL)`

// tables are the demo's outbox tables.
var tables = []string{"public.outbox", "billing.outbox"}

type sample struct{ table, aggType, aggID, typ, payload string }

// The samples, one slice a transaction.
var samples = [][]sample{
	{{"public.outbox", "order", "1001", "OrderCreated", `{"order": 1001, "customer": 42, "total": 99.5}`}},
	{{"public.outbox", "customer", "42", "CustomerUpdated", `{"customer": 42, "email": "ada@example.com"}`}},
	{ // one transaction, several events sharing its commit LSN, in both tables
		{"public.outbox", "order", "1001", "OrderPaid", `{"order": 1001, "amount": 99.5}`},
		{"billing.outbox", "invoice", "5001", "InvoicePaid", `{"invoice": 5001, "order": 1001, "amount": 99.5}`},
		{"public.outbox", "order", "1002", "OrderCreated", `{"order": 1002, "customer": 7, "total": 12}`},
		{"public.outbox", "order", "1001", "OrderShipped", `{"order": 1001, "carrier": "DHL"}`},
	},
	{{"public.outbox", "customer", "7", "CustomerCreated", `{"customer": 7, "name": "Grace"}`}},
}

// Run runs the demo, printing what it does and the records to out, and
// the relay's warnings and errors, if any, to logw: a demo that works
// shows its records and a few lines of its own, not the relay's log.
func Run(ctx context.Context, out, logw io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	log := app.NewLogger(logw, "warn", "text")

	fmt.Fprintln(out, "starting a throwaway PostgreSQL (wal_level=logical) ...")
	pg, err := localpg.Start(ctx, localpg.Options{Logger: log})
	if err != nil {
		if errors.Is(err, localpg.ErrNotInstalled) {
			return fmt.Errorf("the demo needs a local PostgreSQL: %w", err)
		}
		return fmt.Errorf("start PostgreSQL: %w", err)
	}
	defer pg.Close()
	dbURL, err := pg.CreateDatabase(ctx, "demo")
	if err != nil {
		return err
	}

	fmt.Fprintln(out, "starting an in-process Kafka-protocol broker (kfake) ...")
	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(3), kfake.AllowAutoTopicCreation())
	if err != nil {
		return fmt.Errorf("start broker: %w", err)
	}
	defer broker.Close()

	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, Schema); err != nil {
		return fmt.Errorf("create the outbox tables: %w", err)
	}

	cfg, err := config.Load("", []string{
		config.EnvName("postgres.url") + "=" + dbURL,
		config.EnvName("kafka.brokers") + "=" + strings.Join(broker.ListenAddrs(), ","),
		config.EnvName("outbox.tables") + "=" + strings.Join(tables, ","),
		// Any free port: the demo must not fail because 8080 is taken.
		config.EnvName("http.listen") + "=127.0.0.1:0",
	})
	if err != nil {
		return err
	}
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayed := make(chan error, 1)
	go func() { relayed <- app.Run(relayCtx, cfg, log) }()

	// The slot captures what commits after its consistent point; wait
	// until the relay streams from it before writing.
	if err := waitForSlot(ctx, conn, "outboxrelay"); err != nil {
		stopRelay()
		return errors.Join(err, <-relayed)
	}
	n, err := commitSamples(ctx, conn)
	if err != nil {
		stopRelay()
		return errors.Join(err, <-relayed)
	}
	fmt.Fprintf(out, "committed %d outbox events in %d transactions, to %s; relayed records:\n\n", n, len(samples), strings.Join(tables, " and "))

	readErr := printRecords(ctx, out, broker.ListenAddrs(), n)
	stopRelay()
	if err := <-relayed; err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	if readErr != nil {
		return readErr
	}
	fmt.Fprintln(out, "\nevery committed event reached Kafka: keyed by aggregate id, in commit order per aggregate.")
	fmt.Fprintln(out, "next: point outboxrelay at your database with docs/getting-started.md (outboxrelay init, check, run).")
	return nil
}

func waitForSlot(ctx context.Context, conn *pgx.Conn, slot string) error {
	for {
		var exists bool
		// A slot is listed from the start of its creation, before its
		// consistent point; a walsender streams from it only after.
		err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots s JOIN pg_stat_replication r ON r.pid = s.active_pid WHERE s.slot_name = $1)`, slot).Scan(&exists)
		if err != nil || exists {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the relay to stream from slot %q: %w", slot, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func commitSamples(ctx context.Context, conn *pgx.Conn) (int, error) {
	n := 0
	for _, txn := range samples {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			for _, s := range txn {
				schema, table, _ := strings.Cut(s.table, ".")
				if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (aggregatetype, aggregateid, type, payload) VALUES ($1, $2, $3, $4)`, pgx.Identifier{schema, table}.Sanitize()),
					s.aggType, s.aggID, s.typ, s.payload); err != nil {
					return err
				}
				n++
			}
			return nil
		})
		if err != nil {
			return n, fmt.Errorf("commit sample events: %w", err)
		}
	}
	return n, nil
}

func printRecords(ctx context.Context, out io.Writer, brokers []string, n int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics("outbox.event.order", "outbox.event.customer", "outbox.event.invoice"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.WithLogger(nil))
	if err != nil {
		return err
	}
	defer cl.Close()
	for got := 0; got < n; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("read back the records: %d of %d arrived: %w", got, n, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			got++
			var hs []string
			for _, h := range r.Headers {
				hs = append(hs, h.Key+"="+string(h.Value))
			}
			fmt.Fprintf(out, "topic=%s partition=%d offset=%d key=%s headers=[%s] timestamp=%s\n  value=%s\n",
				r.Topic, r.Partition, r.Offset, r.Key, strings.Join(hs, " "), r.Timestamp.UTC().Format(time.RFC3339Nano), r.Value)
		})
	}
	return nil
}
