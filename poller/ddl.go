package poller

import (
	"fmt"
	"strings"

	"github.com/outboxrelay/outboxrelay/internal/pgident"
)

// sqlNames are the quoted names the poller's SQL uses, worked out once from
// a defaulted Config.
type sqlNames struct {
	schema, table string // as written, for catalog lookups and messages
	tbl           string // quoted schema.table
	id, aggType   string
	aggID         string
	order         string
	published     string // empty in ModeDelete
	attempts      string

	dlSchema, dlTable string
	dl                string

	channel    string // quoted, for LISTEN
	channelLit string // as an SQL string literal, for the trigger
	unpubIndex string
	pubIndex   string
	notifyFunc string
	trigger    string
	triggerRaw string

	// unpublished is the predicate for rows still to publish.
	unpublished string
	// bucket is the bucket of a row: a hash of its aggregate id, masked.
	// A NULL aggregate id falls in bucket 0, so its row is still claimed
	// (and reported as invalid) rather than never seen.
	bucket string
}

// quote writes a name for the poller's SQL and for the comments of its
// DDL: a name that passed [Config.ValidateTable] as pgx writes it, and
// any other in an escape form that cannot end a -- comment's line.
func quote(parts ...string) string { return pgident.Quote(parts...) }

func newSQLNames(c *Config) sqlNames {
	schema, table, _ := splitTable(c.Table)
	dlSchema, dlTable, _ := c.deadLetterName()
	n := sqlNames{
		schema: schema, table: table,
		tbl:      quote(schema, table),
		id:       quote(c.Columns.ID),
		aggType:  quote(c.Columns.AggregateType),
		aggID:    quote(c.Columns.AggregateID),
		order:    quote(c.OrderColumn),
		attempts: quote(c.AttemptsColumn),
		dlSchema: dlSchema, dlTable: dlTable,
		dl:          quote(dlSchema, dlTable),
		channel:     quote(c.NotifyChannel),
		channelLit:  pgident.Literal(c.NotifyChannel),
		unpubIndex:  quote(pgident.WithSuffix(table, "_outboxrelay_unpublished")),
		pubIndex:    quote(pgident.WithSuffix(table, "_outboxrelay_published")),
		notifyFunc:  quote(schema, "outboxrelay_notify"),
		trigger:     quote("outboxrelay_notify"),
		triggerRaw:  "outboxrelay_notify",
		unpublished: "true",
	}
	if c.Mode == ModeMark {
		n.published = quote(c.PublishedColumn)
		n.unpublished = n.published + " IS NULL"
	}
	n.bucket = fmt.Sprintf("(coalesce(hashtext(%s::text), 0) & %d)", n.aggID, c.Buckets-1)
	return n
}

// DDL returns the SQL that readies a Debezium-style outbox table for the
// poller configured by cfg: the ordering, published and attempts columns,
// the index the claim query reads, the dead-letter table, and the trigger
// that notifies the relay of new rows. Every statement is idempotent, so
// it can be run again after a configuration change. It does not validate
// cfg; call [Config.ValidateTable] first.
func DDL(cfg Config) string {
	cfg.SetDefaults()
	n := newSQLNames(&cfg)
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("-- What `source: poll` needs on %s (poll.mode %s). Run it once as the", n.tbl, cfg.Mode)
	p("-- table's owner; every statement can be run again. Adding an identity column")
	p("-- rewrites the table under an ACCESS EXCLUSIVE lock: on a large, busy table,")
	p("-- run this in a quiet moment (and create the index CONCURRENTLY beforehand).")
	p("")
	p("-- Orders each aggregate's events: it must grow in the order the application")
	p("-- inserts them, which an identity column does. A timestamp is a poor choice:")
	p("-- rows inserted in the same microsecond tie, and clocks step back. Skipped")
	p("-- when the column exists. Rows already in the table are numbered in their")
	p("-- physical order, which is not always the order they were inserted in: add")
	p("-- the column while no row waits to be published (say, Debezium has drained).")
	p("ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s bigint GENERATED ALWAYS AS IDENTITY;", n.tbl, n.order)
	if n.published != "" {
		p("-- NULL until Kafka has the row, then when the relay learnt it.")
		p("ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s timestamptz;", n.tbl, n.published)
	}
	p("-- Failed attempts to publish a row that Kafka can never take (poll.max_attempts).")
	p("ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s integer NOT NULL DEFAULT 0;", n.tbl, n.attempts)
	p("")
	p("-- Each claim reads the oldest unpublished rows in this order: the index keeps")
	p("-- that a short range scan however many rows the table holds.")
	if n.published != "" {
		p("CREATE INDEX IF NOT EXISTS %s ON %s (%s, %s) WHERE %s;", n.unpubIndex, n.tbl, n.order, n.id, n.unpublished)
		p("-- The retention job deletes rows published more than poll.retention ago.")
		p("CREATE INDEX IF NOT EXISTS %s ON %s (%s) WHERE %s IS NOT NULL;", n.pubIndex, n.tbl, n.published, n.published)
	} else {
		p("CREATE INDEX IF NOT EXISTS %s ON %s (%s, %s);", n.unpubIndex, n.tbl, n.order, n.id)
	}
	p("")
	p("-- Rows that failed poll.max_attempts times, moved out of the outbox with why.")
	p("-- outbox_row is the whole row; to publish one again once its cause is fixed:")
	p("--   INSERT INTO %s (%s, %s, %s, %s, %s)", n.tbl, n.id, n.aggType, n.aggID, quote(cfg.Columns.Type), quote(cfg.Columns.Payload))
	p("--   SELECT r.%s, r.%s, r.%s, r.%s, r.%s", n.id, n.aggType, n.aggID, quote(cfg.Columns.Type), quote(cfg.Columns.Payload))
	p("--   FROM %s d, jsonb_populate_record(NULL::%s, d.outbox_row) r WHERE d.event_id = '...';", n.dl, n.tbl)
	p("CREATE TABLE IF NOT EXISTS %s (", n.dl)
	p("  event_id      text,")
	p("  aggregatetype text,")
	p("  aggregateid   text,")
	p("  reason        text        NOT NULL,")
	p("  attempts      integer     NOT NULL,")
	p("  dead_at       timestamptz NOT NULL DEFAULT now(),")
	p("  outbox_row    jsonb       NOT NULL")
	p(");")
	p("")
	p("-- Optional: wakes the relay when a transaction that inserted events commits.")
	p("-- Without it the relay looks every poll.interval, backing off to")
	p("-- poll.max_interval while the table is idle. One notification per statement;")
	p("-- PostgreSQL queues notifications at commit under a lock shared by every")
	p("-- notifying transaction, so drop the trigger if commits queue behind it.")
	p("CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$", n.notifyFunc)
	p("BEGIN")
	p("  PERFORM pg_notify(TG_ARGV[0], '');")
	p("  RETURN NULL;")
	p("END")
	p("$$;")
	p("DROP TRIGGER IF EXISTS %s ON %s;", n.trigger, n.tbl)
	p("CREATE TRIGGER %s AFTER INSERT ON %s", n.trigger, n.tbl)
	p("  FOR EACH STATEMENT EXECUTE FUNCTION %s(%s);", n.notifyFunc, n.channelLit)
	return b.String()
}
