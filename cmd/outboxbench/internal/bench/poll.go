package bench

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/poller"
)

// pollDrain is the poller relaying its own copy of the backlog with n
// relay processes sharing the table.
func pollDrain(n int) drainKind {
	table := fmt.Sprintf("outbox_poll%d", n)
	return drainKind{
		name:      "poll",
		instances: n,
		prepare: func(ctx context.Context, r *run) (string, error) {
			return table, r.copyBacklog(ctx, table)
		},
		source: func(r *run, _ int) string { return r.pollSource(table) },
	}
}

// pollEOSDrain is pollDrain publishing in Kafka transactions
// (kafka.delivery exactly_once), each instance in its own.
func pollEOSDrain(n int) drainKind {
	k := pollDrain(n)
	table := fmt.Sprintf("outbox_poll_eos%d", n)
	k.name, k.delivery = "poll-eos", "exactly_once"
	k.prepare = func(ctx context.Context, r *run) (string, error) { return table, r.copyBacklog(ctx, table) }
	k.source = func(r *run, _ int) string { return r.pollSource(table) }
	return k
}

// pollSource is the relay configuration of a poller with default settings
// but for poll.mode (Config.PollMode) and the table's own notification
// channel.
func (r *run) pollSource(table string) string {
	return fmt.Sprintf("source: poll\npoll:\n  notify_channel: %s\n  mode: %s\n", table, r.cfg.PollMode)
}

// createPollTable makes an outbox table readied for the poller the way a
// user does it: the Debezium table, then what `outboxrelay poll-ddl`
// prints (ordering, published and attempts columns, the claim index, the
// dead-letter table and the notifying trigger).
func (r *run) createPollTable(ctx context.Context, table string) error {
	if err := r.db.createOutbox(ctx, table); err != nil {
		return err
	}
	ddl := poller.DDL(poller.Config{Table: "public." + table, NotifyChannel: table, Mode: poller.Mode(r.cfg.PollMode)})
	if _, err := r.db.conn.PgConn().Exec(ctx, ddl).ReadAll(); err != nil {
		return fmt.Errorf("ready %s for the poller: %w", table, err)
	}
	return nil
}

// copyBacklog gives the poller the backlog's events in a table of its own,
// since it marks the rows it publishes.
func (r *run) copyBacklog(ctx context.Context, table string) error {
	if err := r.createPollTable(ctx, table); err != nil {
		return err
	}
	r.say("drain: copying the backlog into %s for the poller ...", table)
	cols := "id, aggregatetype, aggregateid, type, payload"
	sql := fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s", pgx.Identifier{table}.Sanitize(), cols, cols, pgx.Identifier{backlogTable}.Sanitize())
	if _, err := r.db.conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("copy the backlog into %s: %w", table, err)
	}
	// As autovacuum would have by the time a real backlog is drained: the
	// claim query's plan should not come from an empty table's statistics.
	if _, err := r.db.conn.Exec(ctx, "VACUUM ANALYZE "+pgx.Identifier{table}.Sanitize()); err != nil {
		return fmt.Errorf("analyze %s: %w", table, err)
	}
	return nil
}
