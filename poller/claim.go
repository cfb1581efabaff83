package poller

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/connector"
)

// claimer runs the claims of one Run on its connection.
type claimer struct {
	src  *Source
	conn *pgx.Conn
	// sess is conn's session on the server, to end it if conn dies.
	sess session
	meta *tableMeta
	out  chan<- connector.Batch
	// wake is shared by the instance's claim loops: a notification, or a
	// claim that left rows waiting, wakes one idle loop.
	wake chan struct{}

	instances int
	countedAt time.Time
}

// poke wakes one idle claim loop, unless a wake-up is already pending.
func (c *claimer) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// claimResult is what one claim did.
type claimResult struct {
	delivered int
	// busy: rows wait, but in buckets other instances hold.
	busy bool
	// failed: the runner failed the batch, and will restart the source.
	failed bool
}

// instancesEvery is how often a claimer counts the running instances. Until
// it first sees a newly started one, it takes that one's share too.
const instancesEvery = time.Second

// claim runs one claim: in one transaction it takes the advisory locks of
// a share of the buckets that have rows waiting, locks the oldest
// unpublished rows of those buckets, hands them to the runner, waits until
// Kafka has them, then marks or deletes them and commits. Any failure
// before the commit rolls back, leaving the rows to be claimed again.
//
// A bucket's lock is exclusive and held until the transaction ends, and
// the claim reads a bucket's rows in order from its oldest unpublished
// one, so while a claim has events of an aggregate in flight no other
// claim, of this instance or another, can hand out a later one.
func (c *claimer) claim(ctx context.Context) (res claimResult, err error) {
	s := c.src
	// Every round trip until the batch is handed on shares one deadline:
	// a connection that died without a word fails the claim here, pgx
	// closes it, and the source starts again on a fresh one.
	qctx, cancel := s.cfg.Network.Query(ctx)
	defer cancel()
	if time.Since(c.countedAt) > instancesEvery {
		if err := c.countInstances(qctx); err != nil {
			return res, err
		}
	}
	// The transaction is the claim's connection's own: BEGIN goes out in
	// one round trip with the statement that locks the buckets, and the
	// mark with COMMIT, so that a claim that finds rows costs three round
	// trips (docs/poller.md).
	finished := false
	defer func() {
		if !finished {
			rbCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			// A claim that found nothing ends here too. Its connection
			// may have died after the answer came: the rollback then
			// times out and pgx closes the connection. That is the
			// claim's error, so that the loop says the connection is
			// dead and its session is ended; dropped, the next claim
			// would only find the connection closed, without a word of
			// why, and the session would keep its locks until the
			// server ended it.
			if rbErr := c.rollback(rbCtx); rbErr != nil && err == nil {
				err = classify("roll back a claim that found nothing to hand on", rbErr)
			}
		}
	}()

	// Take a fair share of the buckets that have rows waiting, so that
	// every instance gets work (meta.lockSQL). What waits beyond one claim
	// is shared among this instance's claims too; less is taken whole, by
	// one claim.
	var (
		nBuckets, nWaiting int
		held               []int32
	)
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(c.meta.lockSQL, 2*s.cfg.BatchSize, s.bucketKey, s.cfg.BatchSize, c.instances*s.cfg.Claims, c.instances).
		QueryRow(func(row pgx.Row) error { return row.Scan(&nBuckets, &nWaiting, &held) })
	if err := c.conn.SendBatch(qctx, b).Close(); err != nil {
		return res, classify("find waiting rows and lock their buckets", err)
	}
	if nBuckets == 0 {
		return res, nil
	}
	if len(held) == 0 {
		return claimResult{busy: true}, nil
	}
	if len(held) < nBuckets {
		// More waits: wake another of this instance's claims, if one is
		// idle, to take it while this one publishes.
		c.poke()
	}

	events, tids, err := c.read(qctx, held, min(nWaiting, s.cfg.BatchSize))
	if isLockTimeout(err) {
		s.log.Warn("another session holds a lock on the outbox table or on unpublished rows; their buckets wait for it, since a later event of the same aggregate must not go first",
			"table", s.cfg.Table, "err", err)
		return claimResult{busy: true}, nil
	}
	if err != nil {
		return res, err
	}
	if len(events) == 0 {
		// Published by an instance that held the buckets a moment ago.
		return claimResult{busy: true}, nil
	}

	// done is buffered: Done must not block, and is called once.
	done := make(chan error, 1)
	// In a Kafka transaction (kafka.delivery exactly_once), the runner asks
	// for the mark just before it commits (Batch.Prepare); this goroutine
	// runs it on the claim's connection, which only it uses.
	prepare := make(chan chan error)
	// Without a dead letter topic, the runner asks for a failed event's
	// quarantine (Batch.Quarantine) after Done; this goroutine records it
	// on the claim's connection, in the claim's transaction, which still
	// holds the event's row.
	quarantine := make(chan quarantineRequest)
	gone := make(chan struct{})
	defer close(gone)
	batch := connector.Batch{Events: events, Done: func(err error) { done <- err },
		Quarantine: func(qctx context.Context, cause *connector.EventError) error {
			reply := make(chan error, 1)
			select {
			case quarantine <- quarantineRequest{cause: cause, reply: reply}:
			case <-gone:
				return errClaimGone
			case <-qctx.Done():
				return qctx.Err()
			}
			select {
			case err := <-reply:
				return err
			case <-qctx.Done():
				return qctx.Err()
			}
		},
		Prepare: func(pctx context.Context) error {
			reply := make(chan error, 1)
			select {
			case prepare <- reply:
			case <-gone:
				return errClaimGone
			case <-pctx.Done():
				return pctx.Err()
			}
			select {
			case err := <-reply:
				return err
			case <-pctx.Done():
				return pctx.Err()
			}
		}}
	select {
	case c.out <- batch:
	case <-ctx.Done():
		// Not received: the rows go back with the rollback.
		return res, ctx.Err()
	}

	// From here on, the claim finishes even if ctx is cancelled, so that a
	// graceful stop records what was published; each step gets its own
	// query timeout, however long Kafka took.
	finish := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Network.QueryTimeout)
	}
	var result error
	marked := false
wait:
	for {
		select {
		case reply := <-prepare:
			mctx, mcancel := finish()
			err := c.markBeforeCommit(mctx, tids)
			mcancel()
			marked = err == nil
			reply <- err
		case result = <-done:
			break wait
		case <-ctx.Done():
			// The runner calls Done before it stops the source; take it if
			// it came at the same moment, else the batch is abandoned.
			select {
			case result = <-done:
				break wait
			default:
			}
			if !marked {
				return res, ctx.Err()
			}
			// The mark told the runner it may commit the Kafka transaction
			// (another claim loop failed, say, and ended this one's
			// context): wait for its outcome, so that the rows are
			// committed as published if and only if it committed, but no
			// longer than the broker keeps a transaction open.
			timer := time.NewTimer(MaxTransactionTimeout(s.cfg.Network))
			select {
			case result = <-done:
				timer.Stop()
				break wait
			case <-timer.C:
				return res, ctx.Err()
			}
		}
	}

	// Kafka has the batch (or will not).
	fctx, fcancel := finish()
	defer fcancel()
	if result != nil {
		if marked {
			// The Kafka transaction aborted after the mark: undo the mark,
			// so that the failure is recorded on the rows as they were.
			if _, err := c.conn.Exec(fctx, "ROLLBACK TO SAVEPOINT "+markSavepoint); err != nil {
				finished = true
				_ = c.rollback(fctx)
				return claimResult{failed: true}, classify("undo the mark of an aborted Kafka transaction", err)
			}
		}
		// The runner stops this Run after a failed batch. Before that it
		// may ask to quarantine the event that failed; otherwise (a dead
		// letter topic takes the event, or the failure was no event's)
		// the claim rolls back, and its rows are claimed again.
		select {
		case req := <-quarantine:
			finished = true
			qctx, qcancel := finish()
			recorded, err := c.fail(qctx, events, tids, req.cause)
			qcancel()
			if err == nil && !recorded {
				err = fmt.Errorf("event %s is not in the batch of rows %s claimed", req.cause.EventID, s.cfg.Table)
			}
			req.reply <- err
		case <-ctx.Done():
		}
		return claimResult{failed: true}, nil
	}
	if !marked {
		// The mark and COMMIT in one round trip. A failed mark skips the
		// COMMIT, and the deferred ROLLBACK ends the transaction.
		b := &pgx.Batch{}
		b.Queue(c.markSQL(), tids)
		b.Queue("COMMIT")
		br := c.conn.SendBatch(fctx, b)
		_, err := br.Exec()
		if err != nil {
			_ = br.Close()
			return res, classify(fmt.Sprintf("%s %d published rows (they will be published again)", markVerb(s.cfg.Mode), len(tids)), err)
		}
		finished = true
		tag, err := br.Exec()
		err = errors.Join(err, br.Close())
		if err == nil && tag.String() != "COMMIT" {
			err = fmt.Errorf("the server ended the transaction with %s", tag)
		}
		if err != nil {
			return res, classify(fmt.Sprintf("commit %d published rows (they will be published again)", len(tids)), err)
		}
	} else {
		finished = true
		if err := c.commit(fctx); err != nil {
			// The one window exactly_once leaves open: the Kafka
			// transaction committed, PostgreSQL's did not.
			s.log.Warn("Kafka committed these events but PostgreSQL did not commit their mark: they will be published again, and read_committed consumers will see them twice (docs/exactly-once.md#the-poller)",
				"table", s.cfg.Table, "events", len(events), "first_event_id", events[0].ID, "err", err)
			return res, classify(fmt.Sprintf("commit %d published rows (they will be published again)", len(tids)), err)
		}
	}
	s.delivered.Add(int64(len(events)))
	return claimResult{delivered: len(events)}, nil
}

// quarantineRequest asks the claim to quarantine the event cause names.
type quarantineRequest struct {
	cause *connector.EventError
	reply chan<- error
}

// errClaimGone is Prepare's and Quarantine's answer when its claim has
// already ended.
var errClaimGone = errors.New("the claim ended before the Kafka transaction could commit; its rows are claimed again")

// markSavepoint is where a mark made before a Kafka commit is undone when
// that commit fails.
const markSavepoint = "outboxrelay_mark"

// markSQL marks or deletes the rows whose ctids are $1.
func (c *claimer) markSQL() string {
	n := &c.src.n
	if c.src.cfg.Mode == ModeDelete {
		return fmt.Sprintf(`DELETE FROM %s WHERE ctid = ANY($1::text[]::tid[])`, n.tbl)
	}
	return fmt.Sprintf(`UPDATE %s SET %s = now() WHERE ctid = ANY($1::text[]::tid[])`, n.tbl, n.published)
}

// markBeforeCommit marks the claim's rows, in one round trip, after a
// savepoint, just before the Kafka transaction that holds their events
// commits. That it succeeds shows the claim still holds its rows and
// buckets: a poller frozen since its claim began may have lost them to
// another instance when PostgreSQL ended its idle session, and must not
// commit what the other publishes too.
func (c *claimer) markBeforeCommit(ctx context.Context, tids []string) error {
	b := &pgx.Batch{}
	b.Queue("SAVEPOINT " + markSavepoint)
	b.Queue(c.markSQL(), tids)
	if err := c.conn.SendBatch(ctx, b).Close(); err != nil {
		return classify(fmt.Sprintf("%s %d rows before their Kafka transaction commits (they will be claimed again)", markVerb(c.src.cfg.Mode), len(tids)), err)
	}
	return nil
}

func markVerb(mode Mode) string {
	if mode == ModeDelete {
		return "delete"
	}
	return "mark"
}

// read locks and reads the oldest unpublished rows of the held buckets and
// returns them as events, with their ctids. expect is how many rows it
// may find, to size what it returns.
//
// A row that has failed before goes alone, in a batch of its own, so that
// its next failure rolls back nobody else: the batch ends before it, or is
// only it when it comes first.
//
// The batch also ends before the row that would take its values past
// poll.max_batch_bytes (unless it is the first). The claim query stops
// there already by the sizes PostgreSQL reports; this holds the bound
// where those are not what arrives (a compressed jsonb value is smaller
// stored than read as text). Rows after an end are locked until the
// commit and published by a later claim.
func (c *claimer) read(ctx context.Context, held []int32, expect int) ([]connector.Event, []string, error) {
	s, meta := c.src, c.meta
	var arr strings.Builder
	arr.WriteByte('{')
	for i, b := range held {
		if i > 0 {
			arr.WriteByte(',')
		}
		arr.WriteString(strconv.Itoa(int(b)))
	}
	arr.WriteByte('}')
	rr := c.conn.PgConn().ExecParams(ctx, meta.claimSQL,
		[][]byte{[]byte(arr.String()), []byte(strconv.Itoa(s.cfg.BatchSize)), []byte(strconv.Itoa(s.cfg.MaxBatchBytes))},
		[]uint32{int4ArrayOID, int4OID, int8OID}, nil, meta.formats)
	origin := "table " + s.cfg.Table
	stages := connector.Stages{Received: time.Now()}
	nc := len(meta.cols)
	events := make([]connector.Event, 0, expect)
	tids := make([]string, 0, expect)
	// NewEvent copies the columns it reads, so one slice serves every row.
	cols := make([]connector.Column, nc)
	cut := false
	kept := 0
	for rr.NextRow() {
		if cut {
			continue // locked until the commit, published by a later claim
		}
		vals := rr.Values()
		attempts, _ := strconv.Atoi(string(vals[nc+2]))
		size := 0
		for _, v := range vals[:nc] {
			size += len(v)
		}
		if len(events) > 0 && (attempts > 0 || kept+size > s.cfg.MaxBatchBytes) {
			cut = true
			continue
		}
		kept += size
		// The row's values, copied out of pgx's read buffer into one
		// allocation, which the event's payload and extra columns keep.
		buf := make([]byte, 0, size)
		for i, mc := range meta.cols {
			cols[i] = connector.Column{Name: mc.name, Type: mc.typ, Null: vals[i] == nil}
			if vals[i] != nil {
				// Non-nil even when empty: an empty text or bytea is a
				// value, and only NULL is nil. Capped, so that appending
				// to one value cannot overwrite the next.
				at := len(buf)
				buf = append(buf, vals[i]...)
				cols[i].Value = buf[at:len(buf):len(buf)]
			}
		}
		at := time.Now()
		if us, err := strconv.ParseInt(string(vals[nc+1]), 10, 64); err == nil {
			at = time.UnixMicro(us)
		}
		e := s.cfg.Columns.NewEvent(cols, at, origin)
		e.Table, e.Stages = s.qualified, stages
		events = append(events, e)
		tids = append(tids, string(vals[nc]))
		if attempts > 0 {
			cut = true
		}
	}
	if _, err := rr.Close(); err != nil {
		if isLockTimeout(err) {
			return nil, nil, err
		}
		return nil, nil, classify("claim rows", err)
	}
	return events, tids, nil
}

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

// commit commits the claim's transaction. A transaction that failed
// ends in ROLLBACK, which is an error here.
func (c *claimer) commit(ctx context.Context) error {
	tag, err := c.conn.Exec(ctx, "COMMIT")
	if err == nil && tag.String() != "COMMIT" {
		err = fmt.Errorf("the server ended the transaction with %s", tag)
	}
	return err
}

// rollback ends the claim's transaction, undoing it.
func (c *claimer) rollback(ctx context.Context) error {
	_, err := c.conn.Exec(ctx, "ROLLBACK")
	return err
}

// countInstances counts the pollers of this table that hold the member
// lock: each claim takes a share of the waiting buckets for one of them.
func (c *claimer) countInstances(ctx context.Context) error {
	s := c.src
	var count int
	err := c.conn.QueryRow(ctx, `
		SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 2
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND classid = $1::int4::oid AND objid = $2::int4::oid`, s.memberKey, s.cfg.Buckets).Scan(&count)
	if err != nil {
		return classify("count the running pollers", err)
	}
	c.instances = max(count, 1)
	c.countedAt = time.Now()
	return nil
}
