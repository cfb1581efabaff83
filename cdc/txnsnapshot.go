package cdc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// An outbox row carries no commit position of its own, so after a lost
// slot the rows Kafka already has cannot be told from the gap by the row
// alone. A transaction snapshot of the database can: the source takes one
// now and then (pg_current_snapshot(), then the WAL insert position), and
// once a checkpoint reaches that position, every transaction whose id is
// below the snapshot's xmin is in Kafka (connector.TxnSnapshot). A
// backfill then publishes only the rows whose xmin is not below it
// (backfill_snapshot.go): what committed since the snapshot was taken,
// and what was still running then.
//
// One snapshot waits at a time for a checkpoint past it
// (positions.snapshotTaken): the next is taken at the first checkpoint
// interval after a checkpoint carries it, so at most one per interval,
// and while only keepalives move the checkpoint (an idle outbox), one per
// status interval. What a backfill after a loss publishes again is then
// about the events of the snapshot's age, two or three checkpoint
// intervals, besides those the last checkpoint lacked. Each costs one
// round trip of two statements on a connection of the snapshot
// goroutine's own; a primary only, since a standby's WAL position is not
// read after what its snapshot sees.

// takeTxnSnapshots takes a snapshot every cdc.checkpoint_interval while
// none waits for a checkpoint, until ctx ends. A failure is logged once a
// minute and tried again: the checkpoint keeps the older snapshot, and a
// backfill publishes a little more.
func (s *Source) takeTxnSnapshots(ctx context.Context) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			pgsql.Close(ctx, conn)
		}
	}()
	t := time.NewTicker(s.cfg.CheckpointInterval)
	defer t.Stop()
	var failures failureLog
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.pos.get().snapWaiting != nil {
			continue
		}
		var snap connector.TxnSnapshot
		var err error
		conn, snap, err = s.txnSnapshot(ctx, conn)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, errOnStandby):
			return
		case err != nil:
			if failures.failed(err) {
				s.log.Warn("could not take a transaction snapshot for the checkpoint; a backfill after a loss would publish more again", "slot", s.cfg.Slot, "err", err)
			}
			continue
		}
		failures.recovered()
		s.pos.update(func(p *positions) { p.snapshotTaken(snap) })
	}
}

// errOnStandby: a hot standby takes no transaction snapshot for the
// checkpoint.
var errOnStandby = errors.New("the server is a hot standby")

// txnSnapshotSQL takes the snapshot, with the server's clock after it and
// the start of the server process. It runs alone: the WAL position is
// read by a later statement, so that it is past every commit the snapshot
// sees as ended.
const txnSnapshotSQL = `SELECT pg_is_in_recovery(), pg_current_snapshot()::text, clock_timestamp(), pg_postmaster_start_time()`

// txnSnapshotLSNSQL reads the WAL insert position and the timeline it is
// on, the first eight hex digits of its WAL file's name.
const txnSnapshotLSNSQL = `SELECT lsn::text, pg_walfile_name(lsn) FROM pg_current_wal_insert_lsn() AS lsn`

// txnSnapshot takes one snapshot on conn, connecting first when conn is
// nil, and returns the connection to use next time: nil after an error.
func (s *Source) txnSnapshot(ctx context.Context, conn *pgx.Conn) (*pgx.Conn, connector.TxnSnapshot, error) {
	ctx, cancel := s.cfg.Network.Query(ctx)
	defer cancel()
	if conn == nil {
		var err error
		if conn, err = pgsql.Connect(ctx, s.cfg.URL, s.cfg.Network, pgsql.Param("application_name", "outboxrelay-snapshot")); err != nil {
			return nil, connector.TxnSnapshot{}, classify("connect for a transaction snapshot", err)
		}
	}
	fail := func(what string, err error) (*pgx.Conn, connector.TxnSnapshot, error) {
		conn.Close(context.WithoutCancel(ctx))
		return nil, connector.TxnSnapshot{}, classify(what, err)
	}
	var inRecovery bool
	var text, lsnText, walFile string
	var snap connector.TxnSnapshot
	if err := conn.QueryRow(ctx, txnSnapshotSQL).Scan(&inRecovery, &text, &snap.Taken, &snap.ServerStart); err != nil {
		return fail("take a transaction snapshot", err)
	}
	if inRecovery {
		return conn, connector.TxnSnapshot{}, errOnStandby
	}
	if err := conn.QueryRow(ctx, txnSnapshotLSNSQL).Scan(&lsnText, &walFile); err != nil {
		return fail("read the WAL position after a transaction snapshot", err)
	}
	var err error
	if snap.Xmin, snap.Xmax, err = parseTxnSnapshot(text); err != nil {
		return fail("read a transaction snapshot", err)
	}
	lsn, err := pglogrepl.ParseLSN(lsnText)
	if err != nil {
		return fail("read the WAL position after a transaction snapshot", err)
	}
	snap.LSN = uint64(lsn)
	if snap.Timeline, err = walFileTimeline(walFile); err != nil {
		return fail("read the timeline of a transaction snapshot", err)
	}
	s.log.Debug("transaction snapshot", "slot", s.cfg.Slot, "xmin", snap.Xmin, "lsn", lsn, "timeline", snap.Timeline)
	return conn, snap, nil
}

// parseTxnSnapshot reads the bounds of a pg_snapshot's text form,
// "xmin:xmax:xip,...".
func parseTxnSnapshot(text string) (xmin, xmax uint64, err error) {
	parts := strings.SplitN(text, ":", 3)
	if len(parts) != 3 {
		return 0, 0, fmt.Errorf("snapshot %q: want xmin:xmax:xip", text)
	}
	if xmin, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("snapshot %q: xmin: %w", text, err)
	}
	if xmax, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("snapshot %q: xmax: %w", text, err)
	}
	if xmin == 0 || xmin > xmax {
		return 0, 0, fmt.Errorf("snapshot %q: xmin is not at or below xmax", text)
	}
	return xmin, xmax, nil
}

// walFileTimeline is the timeline of a WAL file named as
// pg_walfile_name names it (TTTTTTTTXXXXXXXXYYYYYYYY, in hex).
func walFileTimeline(name string) (int32, error) {
	if len(name) != 24 {
		return 0, fmt.Errorf("WAL file name %q is not 24 hex digits", name)
	}
	tli, err := strconv.ParseUint(name[:8], 16, 32)
	if err != nil || tli == 0 || tli > 1<<31-1 {
		return 0, fmt.Errorf("WAL file name %q: no timeline", name)
	}
	return int32(tli), nil
}
