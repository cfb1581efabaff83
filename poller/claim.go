package poller

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

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
	// Every round trip until the batch is handed on shares one deadline:
	// a connection that died without a word fails the claim here, pgx
	// closes it, and the source starts again on a fresh one.
	qctx, cancel := c.src.cfg.Network.Query(ctx)
	defer cancel()
	if time.Since(c.countedAt) > instancesEvery {
		if err := c.countInstances(qctx); err != nil {
			return res, err
		}
	}
	ended := false
	defer func() {
		if !ended {
			err = c.rollbackUnended(ctx, err)
		}
	}()
	events, tids, res, err := c.take(qctx)
	if err != nil || len(events) == 0 {
		return res, err
	}
	res, ended, err = c.publish(ctx, events, tids)
	return res, err
}

// rollbackUnended rolls back a claim that did not end its transaction:
// one that found nothing to hand on, or failed before its commit. Its
// connection may have died after the last answer came: the rollback then
// times out and pgx closes the connection. That is the claim's error
// (unless it has one already), so that the loop says the connection is
// dead and its session is ended; dropped, the next claim would only find
// the connection closed, without a word of why, and the session would
// keep its locks until the server ended it.
func (c *claimer) rollbackUnended(ctx context.Context, err error) error {
	rbCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if rbErr := c.rollback(rbCtx); rbErr != nil && err == nil {
		return classify("roll back a claim that found nothing to hand on", rbErr)
	}
	return err
}

// take begins the claim's transaction, locks a share of the buckets that
// have rows waiting and reads their oldest rows. Without events there is
// nothing to hand on, and res says why.
func (c *claimer) take(ctx context.Context) (events []connector.Event, tids []string, res claimResult, err error) {
	s := c.src
	held, nBuckets, nWaiting, err := c.lockBuckets(ctx)
	switch {
	case err != nil:
		return nil, nil, res, err
	case nBuckets == 0:
		return nil, nil, res, nil
	case len(held) == 0:
		return nil, nil, claimResult{busy: true}, nil
	case len(held) < nBuckets:
		// More waits: wake another of this instance's claims, if one is
		// idle, to take it while this one publishes.
		c.poke()
	}
	events, tids, err = c.read(ctx, held, min(nWaiting, s.cfg.BatchSize))
	if isLockTimeout(err) {
		s.log.Warn("another session holds a lock on the outbox table or on unpublished rows; their buckets wait for it, since a later event of the same aggregate must not go first",
			"table", s.cfg.Table, "err", err)
		return nil, nil, claimResult{busy: true}, nil
	}
	if err != nil {
		return nil, nil, res, err
	}
	if len(events) == 0 {
		// Published by an instance that held the buckets a moment ago.
		return nil, nil, claimResult{busy: true}, nil
	}
	return events, tids, res, nil
}

// lockBuckets begins the claim's transaction and takes a fair share of
// the buckets that have rows waiting, so that every instance gets work
// (tableMeta.lockSQL): what waits beyond one claim is shared among this
// instance's claims too; less is taken whole, by one claim. It returns the
// buckets now held, and how many buckets and rows wait.
//
// The transaction is the claim's connection's own: BEGIN goes out in one
// round trip with the statement that locks the buckets, and the mark with
// COMMIT, so that a claim that finds rows costs three round trips
// (docs/poller.md).
func (c *claimer) lockBuckets(ctx context.Context) (held []int32, nBuckets, nWaiting int, err error) {
	s := c.src
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(c.meta.lockSQL, 2*s.cfg.BatchSize, s.bucketKey, s.cfg.BatchSize, c.instances*s.cfg.Claims, c.instances).
		QueryRow(func(row pgx.Row) error { return row.Scan(&nBuckets, &nWaiting, &held) })
	if err := c.conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, 0, 0, classify("find waiting rows and lock their buckets", err)
	}
	return held, nBuckets, nWaiting, nil
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
	rr := c.conn.PgConn().ExecParams(ctx, meta.claimSQL,
		[][]byte{int4Array(held), []byte(strconv.Itoa(s.cfg.BatchSize)), []byte(strconv.Itoa(s.cfg.MaxBatchBytes))},
		[]uint32{int4ArrayOID, int4OID, int8OID}, nil, meta.formats)
	rows := rowReader{c: c, origin: "table " + s.cfg.Table, stages: connector.Stages{Received: time.Now()},
		events: make([]connector.Event, 0, expect), tids: make([]string, 0, expect),
		// NewEvent copies the columns it reads, so one slice serves every row.
		cols: make([]connector.Column, len(meta.cols))}
	for rr.NextRow() {
		rows.add(rr.Values())
	}
	if _, err := rr.Close(); err != nil {
		if isLockTimeout(err) {
			return nil, nil, err
		}
		return nil, nil, classify("claim rows", err)
	}
	return rows.events, rows.tids, nil
}

// int4Array is held as the text of an int4[].
func int4Array(held []int32) []byte {
	arr := []byte{'{'}
	for i, b := range held {
		if i > 0 {
			arr = append(arr, ',')
		}
		arr = strconv.AppendInt(arr, int64(b), 10)
	}
	return append(arr, '}')
}

// rowReader makes the claim query's rows into events, up to the first end
// of the batch (read).
type rowReader struct {
	c      *claimer
	origin string
	stages connector.Stages
	events []connector.Event
	tids   []string
	cols   []connector.Column
	// kept is the bytes of the events so far; cut is set at the end of
	// the batch: the rows after it are locked until the commit, and
	// published by a later claim.
	kept int
	cut  bool
}

// add takes the next row: the event columns, then ctid, the event time in
// microseconds and the attempts so far (tableMeta.claimSQL).
func (r *rowReader) add(vals [][]byte) {
	if r.cut {
		return
	}
	s, nc := r.c.src, len(r.c.meta.cols)
	attempts, _ := strconv.Atoi(string(vals[nc+2]))
	size := 0
	for _, v := range vals[:nc] {
		size += len(v)
	}
	if len(r.events) > 0 && (attempts > 0 || r.kept+size > s.cfg.MaxBatchBytes) {
		r.cut = true
		return
	}
	r.kept += size
	// The row's values, copied out of pgx's read buffer into one
	// allocation, which the event's payload and extra columns keep.
	buf := make([]byte, 0, size)
	for i, mc := range r.c.meta.cols {
		r.cols[i] = connector.Column{Name: mc.name, Type: mc.typ, Null: vals[i] == nil}
		if vals[i] != nil {
			// Non-nil even when empty: an empty text or bytea is a value,
			// and only NULL is nil. Capped, so that appending to one value
			// cannot overwrite the next.
			at := len(buf)
			buf = append(buf, vals[i]...)
			r.cols[i].Value = buf[at:len(buf):len(buf)]
		}
	}
	at := time.Now()
	if us, err := strconv.ParseInt(string(vals[nc+1]), 10, 64); err == nil {
		at = time.UnixMicro(us)
	}
	e := s.cfg.Columns.NewEvent(r.cols, at, r.origin)
	e.Table, e.Stages = s.qualified, r.stages
	r.events = append(r.events, e)
	r.tids = append(r.tids, string(vals[nc]))
	if attempts > 0 {
		r.cut = true
	}
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
