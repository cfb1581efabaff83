package replay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/internal/pgident"
)

// A replay publishes what the table still holds. Rows deleted since they
// were published (cdc.cleanup, the poller's retention or poll.mode
// delete, or the application) left nothing behind, so before it publishes
// anything a replay refuses a selection it can tell reaches rows that are
// gone: ids the table no longer has (it counts them), and a range that
// starts before the oldest row left while the relay deletes rows older
// than its retention. A deleted row leaves no trace, so how many of a
// range went cannot be counted; the refusal says from when the table
// holds rows. --partial publishes what is left.

// deletion is what deletes published rows from a table, by the
// configuration; nil when the relay deletes none.
type deletion struct {
	// what names the setting, in words.
	what string
	// retention: rows are kept at least this long (0: deleted once
	// published).
	retention time.Duration
}

// GoneError is a selection that reaches rows the table no longer holds.
type GoneError struct {
	Table string
	// Missing is how many rows chosen are gone; -1 when it cannot be
	// told.
	Missing int64
	// Why says what is gone, and what deleted it.
	Why string
}

func (e *GoneError) Error() string {
	return fmt.Sprintf("%s: %s; replay what is left with --partial, or choose rows the table still holds", e.Table, e.Why)
}

// checkRange refuses a range that starts before the oldest row the table
// still holds, when d may have deleted the rows before it.
func (r *reader) checkRange(ctx context.Context, conn *pgx.Conn, d *deletion, now time.Time) error {
	if d == nil || !r.sel.byRange() || !r.sel.Since.Before(now.Add(-d.retention)) {
		return nil
	}
	with, from := r.from()
	te := r.timeExpr()
	cond := te + " IS NOT NULL"
	if r.t.poll != nil && r.t.poll.published != "" {
		cond += " AND " + pgident.Quote(r.t.poll.published) + " IS NOT NULL"
	}
	var id string
	var oldest time.Time
	err := conn.QueryRow(ctx, fmt.Sprintf("%sSELECT %s::text, %s FROM %s WHERE %s ORDER BY %s LIMIT 1",
		with, pgident.Quote(r.t.columns.ID), te, from, cond, te)).Scan(&id, &oldest)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return &GoneError{Table: r.t.qualified, Missing: -1, Why: fmt.Sprintf("the table holds no row at all, and %s: every row of the range is gone", d.what)}
	case err != nil:
		return classify(fmt.Sprintf("read the oldest row of %s", r.t.ident), err)
	case !oldest.After(r.sel.Since):
		return nil
	}
	at := oldest.UTC().Format(time.RFC3339Nano)
	why := fmt.Sprintf("the oldest row it still holds, event %s, was committed at %s, after --since %s, and %s: the rows committed between the two are gone, and how many the table cannot tell (a deleted row leaves no trace)",
		id, at, r.sel.Since.UTC().Format(time.RFC3339Nano), d.what)
	if !oldest.Before(r.until) {
		why = fmt.Sprintf("its oldest row, event %s, was committed at %s, after the range ends, and %s: every row of the range is gone", id, at, d.what)
	}
	return &GoneError{Table: r.t.qualified, Missing: -1, Why: why}
}

// missingIDs is the refusal of ids that no table holds (of which some).
func missingIDs(missing int64, total int64, some []string, d *deletion, poll bool) error {
	what := "deleted (by the application"
	if poll {
		what = "not published by the poller yet (it publishes them anyway), or deleted (by the application"
	}
	if d != nil {
		what += ", or because " + d.what
	}
	what += ")"
	if len(some) > 0 {
		what += "; among them " + strings.Join(some, ", ")
	}
	return &GoneError{Table: "the outbox tables", Missing: missing,
		Why: fmt.Sprintf("%d of the %d ids given are in no outbox table, never written or %s", missing, total, what)}
}
