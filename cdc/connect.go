package cdc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/connector"
)

// connect prepares the slot, waits while another session holds it, opens
// the replication connection and starts streaming. It returns the
// connection and the position streaming starts from; with a snapshot to
// publish first (cdc.snapshot initial), it returns before starting, and
// Run starts once the snapshot is handed on.
func (s *Source) connect(ctx context.Context) (*pgconn.PgConn, pglogrepl.LSN, *snapshotJob, error) {
	cfg, err := pgconn.ParseConfig(s.cfg.URL)
	if err != nil {
		return nil, 0, nil, connector.Permanent(fmt.Errorf("postgres.url: %w", redactErr(err)))
	}
	s.cfg.Network.Apply(cfg)
	cfg.RuntimeParams["replication"] = "database"
	if err := s.loadCheckpoint(ctx); err != nil { // checkpoint.go
		return nil, 0, nil, err
	}
	closeConn := func(conn *pgconn.PgConn) {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		conn.Close(closeCtx)
		cancel()
	}
	for {
		pos, err := s.prepare(ctx) // setup.go; waits while the slot is held
		if err != nil {
			return nil, 0, nil, err
		}
		if _, set := cfg.RuntimeParams["wal_sender_timeout"]; !set && s.sessionWalSenderTimeout.Load() {
			// The server then ends this session's walsender, and lets go
			// of the slot, when it hears nothing from the relay for as long
			// as the relay waits to hear from it: after a silent loss, the
			// relay's next session need not wait long for the slot. Status
			// updates go every cdc.status_interval, well within it.
			cfg.RuntimeParams["wal_sender_timeout"] = strconv.FormatInt(s.cfg.ReceiveTimeout.Milliseconds(), 10)
		}
		conn, err := pgconn.ConnectConfig(ctx, cfg)
		if err != nil {
			return nil, 0, nil, classify("open the replication connection", err)
		}
		var snap *snapshotJob
		if pos.create {
			lsn, name, err := s.createExported(ctx, conn)
			if isDuplicate(err) {
				closeConn(conn) // another relay created it first: judge again
				continue
			}
			if err != nil {
				closeConn(conn)
				return nil, 0, nil, classify("create the replication slot", err)
			}
			pos = slotPosition{lsn: lsn, fresh: true}
			snap = &snapshotJob{name: name}
		}
		if b := s.backfill; b != nil && b.job != nil {
			// backfill.go: the chosen rows, in the new slot's snapshot
			// when there is one.
			job := *b.job
			if snap != nil {
				job.name = snap.name
			}
			snap, b.job = &job, nil
		}
		start := pglogrepl.LSN(0)
		s.pos.update(func(p *positions) { start = p.resume(pos) })
		cp, ok := s.Checkpoint()
		if snap == nil && ok && cp.SnapshotPending {
			s.log.Warn("the snapshot of the outbox table was not all in Kafka when the relay stopped; publishing the table again, as it is now, before streaming (consumers drop the repeats by id)",
				"slot", s.cfg.Slot)
			snap = &snapshotJob{}
		}
		if snap != nil {
			s.pos.update(func(p *positions) { p.snapshotPending = true })
		}
		s.needMark = s.recorder != nil && (!ok || snap != nil)
		if s.recorder == nil && (!ok || snap != nil) {
			// A first checkpoint at once: a slot dropped before the first
			// event is then caught too, and a snapshot cut short is
			// published again.
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := s.save(sctx)
			cancel()
			if err != nil {
				closeConn(conn)
				return nil, 0, nil, &checkpointError{err}
			}
		}
		if snap != nil {
			return conn, start, snap, nil
		}
		err = s.startReplication(ctx, conn, start)
		if err == nil {
			s.holder = 0
			return conn, start, nil, nil
		}
		closeConn(conn)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != pgerrcode.ObjectInUse {
			return nil, 0, nil, classify(fmt.Sprintf("start replication from slot %q", s.cfg.Slot), err)
		}
		// Another session took the slot between prepare's look and our
		// start: wait for it like any other holder.
		if err := sleep(ctx, slotPollInterval); err != nil {
			return nil, 0, nil, err
		}
	}
}

// startReplication starts streaming from the slot at start.
func (s *Source) startReplication(ctx context.Context, conn *pgconn.PgConn, start pglogrepl.LSN) error {
	pub := strings.ReplaceAll(pgx.Identifier{s.cfg.Publication}.Sanitize(), "'", "''")
	startCtx, cancel := s.cfg.Network.Query(ctx)
	defer cancel()
	return pglogrepl.StartReplication(startCtx, conn, s.cfg.Slot, start, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + pub + "'"},
	})
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
