package poller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/connector"
)

// publish hands the claimed rows' events to the runner, waits until Kafka
// has them (or will not), and ends the claim's transaction by what
// happened: the rows marked or deleted and committed, or the failure
// recorded. ended reports whether it ended the transaction; if not, claim
// rolls it back.
func (c *claimer) publish(ctx context.Context, events []connector.Event, tids []string) (res claimResult, ended bool, err error) {
	h := newHandoff()
	defer h.close()
	select {
	case c.out <- h.batch(events):
	case <-ctx.Done():
		// Not received: the rows go back with the rollback.
		return res, false, ctx.Err()
	}
	result, marked, err := c.await(ctx, h, tids)
	if err != nil {
		return res, false, err
	}
	// Kafka has the batch (or will not).
	fctx, fcancel := c.finishCtx(ctx)
	defer fcancel()
	if result != nil {
		return c.abort(ctx, fctx, h, events, tids, marked)
	}
	return c.commitPublished(fctx, events, tids, marked)
}

// finishCtx bounds one step of a claim whose batch was handed on. From
// there the claim finishes even if ctx is cancelled, so that a graceful
// stop records what was published, and each step gets its own query
// timeout, however long Kafka took.
func (c *claimer) finishCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), c.src.cfg.Network.QueryTimeout)
}

// handoff is how the runner reaches a claim while Kafka takes its batch.
// Done brings the batch's outcome. Prepare (in a Kafka transaction,
// kafka.delivery exactly_once: the mark, just before the runner commits)
// and Quarantine (without a dead letter topic: a failed event's record,
// after Done, in the claim's transaction, which still holds the event's
// row) are requests that the claim's goroutine, the only one that uses
// the claim's connection, serves and answers.
type handoff struct {
	// done is buffered: Done must not block, and is called once.
	done       chan error
	prepare    chan chan error
	quarantine chan quarantineRequest
	// gone is closed when the claim ends, so a late request is refused
	// rather than left waiting.
	gone chan struct{}
}

func newHandoff() *handoff {
	return &handoff{done: make(chan error, 1), prepare: make(chan chan error),
		quarantine: make(chan quarantineRequest), gone: make(chan struct{})}
}

func (h *handoff) close() { close(h.gone) }

// batch is the batch of events whose calls reach the claim through h.
func (h *handoff) batch(events []connector.Event) connector.Batch {
	return connector.Batch{Events: events, Done: func(err error) { h.done <- err },
		Prepare: func(ctx context.Context) error {
			reply := make(chan error, 1)
			return ask(ctx, h, h.prepare, reply, reply)
		},
		Quarantine: func(ctx context.Context, cause *connector.EventError) error {
			reply := make(chan error, 1)
			return ask(ctx, h, h.quarantine, quarantineRequest{cause: cause, reply: reply}, reply)
		},
	}
}

// ask sends req to the claim's goroutine on to and waits for its answer on
// reply, unless the claim has ended or ctx ends first.
func ask[R any](ctx context.Context, h *handoff, to chan<- R, req R, reply <-chan error) error {
	select {
	case to <- req:
	case <-h.gone:
		return errClaimGone
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// await serves the runner's Prepare until Done brings the batch's
// outcome, result. marked says the rows were marked before a Kafka commit
// (Prepare). An error means the claim gives the batch up: its rows go back
// with the rollback.
func (c *claimer) await(ctx context.Context, h *handoff, tids []string) (result error, marked bool, err error) {
	for {
		select {
		case reply := <-h.prepare:
			mctx, mcancel := c.finishCtx(ctx)
			err := c.markBeforeCommit(mctx, tids)
			mcancel()
			marked = err == nil
			reply <- err
		case result = <-h.done:
			return result, marked, nil
		case <-ctx.Done():
			return c.awaitStopping(ctx, h, marked)
		}
	}
}

// awaitStopping decides, once ctx has ended, whether the claim still
// waits for the batch's outcome. The runner calls Done before it stops
// the source: taken if it came at the same moment, else the batch is
// given up, unless the rows are marked.
func (c *claimer) awaitStopping(ctx context.Context, h *handoff, marked bool) (result error, _ bool, err error) {
	select {
	case result = <-h.done:
		return result, marked, nil
	default:
	}
	if !marked {
		return nil, false, ctx.Err()
	}
	// The mark told the runner it may commit the Kafka transaction
	// (another claim loop failed, say, and ended this one's context): wait
	// for its outcome, so that the rows are committed as published if and
	// only if it committed, but no longer than the broker keeps a
	// transaction open.
	timer := time.NewTimer(MaxTransactionTimeout(c.src.cfg.Network))
	defer timer.Stop()
	select {
	case result = <-h.done:
		return result, marked, nil
	case <-timer.C:
		return nil, marked, ctx.Err()
	}
}

// abort ends a claim whose batch failed. The runner stops this Run after a
// failed batch. Before that it may ask to quarantine the event that
// failed; otherwise (a dead letter topic takes the event, or the failure
// was no event's) the claim rolls back, and its rows are claimed again.
func (c *claimer) abort(ctx, fctx context.Context, h *handoff, events []connector.Event, tids []string, marked bool) (claimResult, bool, error) {
	s := c.src
	if marked {
		// The Kafka transaction aborted after the mark: undo the mark, so
		// that the failure is recorded on the rows as they were.
		if _, err := c.conn.Exec(fctx, "ROLLBACK TO SAVEPOINT "+markSavepoint); err != nil {
			_ = c.rollback(fctx)
			return claimResult{failed: true}, true, classify("undo the mark of an aborted Kafka transaction", err)
		}
	}
	select {
	case req := <-h.quarantine:
		qctx, qcancel := c.finishCtx(ctx)
		recorded, err := c.fail(qctx, events, tids, req.cause) // ends the transaction either way
		qcancel()
		if err == nil && !recorded {
			err = fmt.Errorf("event %s is not in the batch of rows %s claimed", req.cause.EventID, s.cfg.Table)
		}
		req.reply <- err
		return claimResult{failed: true}, true, nil
	case <-ctx.Done():
		return claimResult{failed: true}, false, nil
	}
}

// commitPublished marks or deletes the rows of a batch Kafka has, unless
// Prepare did, and commits.
func (c *claimer) commitPublished(ctx context.Context, events []connector.Event, tids []string, marked bool) (claimResult, bool, error) {
	s := c.src
	if !marked {
		if ended, err := c.markAndCommit(ctx, tids); err != nil {
			return claimResult{}, ended, err
		}
	} else if err := c.commit(ctx); err != nil {
		// The one window exactly_once leaves open: the Kafka transaction
		// committed, PostgreSQL's did not.
		s.log.Warn("Kafka committed these events but PostgreSQL did not commit their mark: they will be published again, and read_committed consumers will see them twice (docs/exactly-once.md#the-poller)",
			"table", s.cfg.Table, "events", len(events), "first_event_id", events[0].ID, "err", err)
		return claimResult{}, true, classify(fmt.Sprintf("commit %d published rows (they will be published again)", len(tids)), err)
	}
	s.delivered.Add(int64(len(events)))
	return claimResult{delivered: len(events)}, true, nil
}

// markAndCommit marks or deletes the rows and commits, in one round trip.
// A failed mark skips the COMMIT, and ended is false: claim's ROLLBACK
// ends the transaction.
func (c *claimer) markAndCommit(ctx context.Context, tids []string) (ended bool, err error) {
	b := &pgx.Batch{}
	b.Queue(c.markSQL(), tids)
	b.Queue("COMMIT")
	br := c.conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return false, classify(fmt.Sprintf("%s %d published rows (they will be published again)", markVerb(c.src.cfg.Mode), len(tids)), err)
	}
	tag, err := br.Exec()
	err = errors.Join(err, br.Close())
	if err == nil && tag.String() != "COMMIT" {
		err = fmt.Errorf("the server ended the transaction with %s", tag)
	}
	if err != nil {
		return true, classify(fmt.Sprintf("commit %d published rows (they will be published again)", len(tids)), err)
	}
	return true, nil
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
