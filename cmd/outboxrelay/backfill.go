package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/app"
)

var backfillUsage = commandUsage{
	text: `Usage: outboxrelay backfill --config FILE (--after-checkpoint | --since TIME | --all)
                            [--timestamp-column COLUMN] [--margin D]
       outboxrelay backfill --debezium-config FILE [--config FILE] ...

After a lost replication slot, publishes again the outbox rows the table
still holds that were committed after the checkpoint (or since TIME, or
all of them), through the relay's routing, with their own id headers so
that consumers drop the ones they already have. Then it leaves the slot
and the checkpoint so that the relay's next start carries on with no gap:
a missing or invalidated slot is created anew with a snapshot the rows are
read in. Stop the relay first; start it again once this exits 0.

Rows are chosen by the commit times the server keeps when it has
track_commit_timestamp on: those committed at or after TIME, and the
second before it, as commit times may be out of commit order by a little.
Else by a column the application sets to the insert time
(--timestamp-column, default routing.timestamp_column): rows at or after
TIME minus --margin. With both, the column chooses among the rows whose
commit time the server does not know. --all publishes every row. The
report says how many rows Kafka may have had already, and why they were
chosen. Rows deleted since they were committed cannot be published again.
The relay's slot-loss error prints the command line that works for its
table.
`,
	docs: "docs/runbooks.md#outboxrelayslotlost; docs/guarantees.md#recovering-the-gap-outboxrelay-backfill",
}

// backfillCmd is `outboxrelay backfill`.
func backfillCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("outboxrelay backfill", backfillUsage)
	cf := addConfigFlags(fs)
	after := fs.Bool("after-checkpoint", false, "rows committed after the checkpoint's last event (its commit time)")
	since := fs.String("since", "", "rows committed at or after this time (RFC 3339, e.g. 2026-11-25T10:00:00Z)")
	all := fs.Bool("all", false, "every row in the table")
	column := fs.String("timestamp-column", "", "column holding each row's insert time (timestamptz, timestamp or bigint milliseconds); default routing.timestamp_column")
	margin := fs.Duration("margin", cdc.DefaultBackfillMargin, "how far before the time --timestamp-column is read from, as a row is inserted before it commits; 0s for none (unused for rows whose commit time the server keeps)")
	if err := parseFlags(fs, args, 0, stdout, stderr); err != nil {
		return err
	}
	misuse := func(format string, args ...any) error {
		printUsage(fs, stderr)
		return usageError{fmt.Errorf("%s: "+format, append([]any{fs.Name()}, args...)...)}
	}
	b := cdc.Backfill{All: *all, Margin: margin}
	chosen := 0
	for _, set := range []bool{*after, *since != "", *all} {
		if set {
			chosen++
		}
	}
	if chosen != 1 {
		return misuse("give exactly one of --after-checkpoint, --since TIME and --all")
	}
	if *since != "" {
		t, err := time.Parse(time.RFC3339Nano, *since)
		if err != nil {
			return misuse("--since %q is not an RFC 3339 time such as 2026-11-25T10:00:00Z", *since)
		}
		b.Since = t
	}
	if *margin < 0 {
		return misuse("--margin %s is negative", *margin)
	}
	cfg, notes, err := cf.load(os.Environ())
	if err != nil {
		return configProblems(err)
	}
	b.TimestampColumn = cfg.Routing.Debezium.TimestampColumn
	if *column != "" {
		b.TimestampColumn = *column
	}
	log := app.NewLogger(stderr, cfg.Log.Level, cfg.Log.Format)
	logDebeziumNotes(log, notes)
	if err := app.LimitMemory(); err != nil {
		return err
	}
	res, err := app.Backfill(ctx, cfg, log, b)
	if err != nil {
		return err
	}
	if res.NothingMissed {
		fmt.Fprintln(stdout, "outboxrelay backfill: the slot carries on from the checkpoint, so no event was missed; nothing published. Start the relay.")
		return nil
	}
	slot := "the slot carries on from where it is"
	if res.CreatedSlot {
		slot = "created the slot anew, with the snapshot the rows were read in"
	}
	cause := ""
	if res.Cause != "" {
		cause = fmt.Sprintf(" (the slot was %s)", res.Cause)
	}
	repeats := ""
	if !res.Since.IsZero() {
		// How much of it consumers get twice, and why the backfill could
		// not leave those rows out.
		// And what the stopped relay had on its way: those records reach
		// Kafka unacknowledged (connector/runner.go drops only what is
		// not yet sent), so no checkpoint holds them and nothing here can
		// count them.
		repeats = fmt.Sprintf(" Of them, %d may have been in Kafka already (consumers drop them by id): %s; so may the events the stopped relay had on their way to Kafka when it stopped (its log's in_flight).", res.RepeatedRows(), res.RepeatsWords())
	}
	fmt.Fprintf(stdout, "outboxrelay backfill: published %d outbox rows%s: %s.%s Kafka has them all; %s, and the checkpoint is there. Start the relay: it carries on with no gap.\n",
		res.Rows, cause, res.Selection, repeats, slot)
	return nil
}
