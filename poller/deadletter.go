package poller

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/connector"
)

// fail quarantines the event that cause names, when that is one of the
// claim's events that can never be published: the claim records the
// attempt on its row, or after MaxAttempts (the last one alone) moves the
// row to the dead-letter table, and commits that alone: the other rows
// stay unpublished, to be claimed again. recorded says it did. Any other
// cause just rolls back. Either way the claim's transaction ends.
func (c *claimer) fail(ctx context.Context, events []connector.Event, tids []string, cause error) (recorded bool, err error) {
	s, n := c.src, &c.src.n
	var ee *connector.EventError
	i := -1
	if errors.As(cause, &ee) {
		i = eventIndex(events, ee.EventID)
	}
	if i < 0 {
		return false, c.rollback(ctx)
	}
	// The update writes a new version of the row, at a new ctid: the move
	// must use that one.
	var attempts int
	var tid string
	err = c.conn.QueryRow(ctx, fmt.Sprintf(`UPDATE %s SET %s = %s + 1 WHERE ctid = $1::text::tid RETURNING %s, ctid::text`, n.tbl, n.attempts, n.attempts, n.attempts),
		tids[i]).Scan(&attempts, &tid)
	if err != nil {
		_ = c.rollback(ctx)
		return false, classify(fmt.Sprintf("record a failed attempt of event %s", ee.EventID), err)
	}
	reason := deadLetterReason(ee.Err.Error())
	// Only a failure of the row on its own condemns it: a broker may refuse
	// a whole produce request, and the error then names whichever event
	// came first. A row that failed once is claimed alone after that (see
	// read), so its last attempt is always on its own.
	dead := attempts >= s.cfg.MaxAttempts && len(events) == 1
	if dead {
		if err := c.moveToDeadLetter(ctx, tid, reason); err != nil {
			_ = c.rollback(ctx)
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == pgerrcode.ProgramLimitExceeded {
				return false, connector.Permanent(fmt.Errorf("event %s can never be published (%s), and its row is too large to copy into the dead-letter table %s (PostgreSQL holds at most 256 MB in a jsonb value): %w; "+
					"move the row out of %s by hand, or make it smaller, then start the relay again", ee.EventID, reason, n.dl, err, n.tbl))
			}
			return false, classify(fmt.Sprintf("move event %s to the dead-letter table %s", ee.EventID, n.dl), err)
		}
	}
	if err := c.commit(ctx); err != nil {
		return false, classify(fmt.Sprintf("record a failed attempt of event %s", ee.EventID), err)
	}
	if dead {
		s.deadLettered.Add(1)
		s.log.Error("event can never be published; moved it to the dead-letter table",
			"event_id", ee.EventID, "aggregate_id", connector.Shorten(events[i].AggregateID, maxReasonBytes), "attempts", attempts,
			"dead_letter_table", s.cfg.DeadLetterTable, "reason", reason, "dead_lettered_total", s.deadLettered.Load())
	} else {
		s.log.Warn("event cannot be published; it will be tried again, then moved to the dead-letter table",
			"event_id", ee.EventID, "attempt", attempts, "max_attempts", s.cfg.MaxAttempts, "reason", reason)
	}
	return true, nil
}

// maxReasonBytes bounds the reason a dead-lettered row is stored and
// logged with: an error can quote a value of any size (a 2 MB aggregate
// type in a topic name, say).
const maxReasonBytes = 4096

// deadLetterReason is reason as the dead-letter table stores it: at most
// maxReasonBytes, and text PostgreSQL takes (valid UTF-8, no NUL), so
// that the reason cannot be why the move fails.
func deadLetterReason(reason string) string {
	return connector.Shorten(strings.ReplaceAll(strings.ToValidUTF8(reason, "\ufffd"), "\x00", ""), maxReasonBytes)
}

// moveToDeadLetter moves the row at tid to the dead-letter table, the
// whole row as jsonb in outbox_row. A row with a json column holding
// \u0000, which json takes and jsonb refuses, is kept as the jsonb string
// of its JSON text instead (SQLSTATE 22P05): the row cannot stay in the
// outbox, where every claim would fail on it again.
func (c *claimer) moveToDeadLetter(ctx context.Context, tid, reason string) error {
	n := &c.src.n
	move := func(row string) error {
		tag, err := c.conn.Exec(ctx, fmt.Sprintf(`WITH moved AS (DELETE FROM %s WHERE ctid = $1::text::tid RETURNING *)
			INSERT INTO %s (event_id, aggregatetype, aggregateid, reason, attempts, outbox_row)
			SELECT m.%s::text, m.%s::text, m.%s::text, $2, m.%s, %s FROM moved m`,
			n.tbl, n.dl, n.id, n.aggType, n.aggID, n.attempts, row), tid, reason)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("moved %d rows, not 1", tag.RowsAffected())
		}
		return err
	}
	if _, err := c.conn.Exec(ctx, "SAVEPOINT outboxrelay_move"); err != nil {
		return err
	}
	err := move("to_jsonb(m)")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != pgerrcode.UntranslatableCharacter {
		return err
	}
	if _, err := c.conn.Exec(ctx, "ROLLBACK TO SAVEPOINT outboxrelay_move"); err != nil {
		return err
	}
	return move("to_jsonb(row_to_json(m)::text)")
}

// eventIndex finds the event an EventError names; an event without an id
// (a NULL id column) is the first invalid event without one.
func eventIndex(events []connector.Event, id string) int {
	for i := range events {
		if events[i].ID == id && (id != "" || events[i].Invalid != nil) {
			return i
		}
	}
	return -1
}
