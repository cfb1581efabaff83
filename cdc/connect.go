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
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// connect prepares the slot, waits while another session holds it, opens
// the replication connection and starts streaming. It returns the
// connection and the position streaming starts from; with a snapshot to
// publish first (cdc.snapshot initial), it returns before starting, and
// Run starts once the snapshot is handed on.
//
// Each decision is a step of its own: the checkpoint (loadCheckpoint,
// once), the slot (prepare, then createSlotOn), what to publish before
// streaming (snapshotFor), the position (positions.resume), the first
// checkpoint (firstCheckpoint) and the start (startReplication, again
// after another session took the slot).
func (s *Source) connect(ctx context.Context) (*pgconn.PgConn, pglogrepl.LSN, *snapshotJob, error) {
	if err := s.loadCheckpoint(ctx); err != nil { // checkpoint.go
		return nil, 0, nil, pgsql.ConnectFailed(err)
	}
	closeConn := func(conn *pgconn.PgConn) { pgsql.Close(ctx, conn) }
	for {
		pos, err := s.prepare(ctx) // setup.go; waits while the slot is held
		if err != nil {
			return nil, 0, nil, pgsql.ConnectFailed(err)
		}
		conn, err := s.openReplication(ctx)
		if err != nil {
			return nil, 0, nil, pgsql.ConnectFailed(classify("open the replication connection", err))
		}
		var created *snapshotJob
		if pos.create {
			pos, created, err = s.createSlotOn(ctx, conn)
			if isDuplicate(err) {
				closeConn(conn) // another relay created it first: judge again
				continue
			}
			if err != nil {
				closeConn(conn)
				return nil, 0, nil, classify("create the replication slot", err)
			}
		}
		snap := s.snapshotFor(created)
		var start pglogrepl.LSN
		s.pos.update(func(p *positions) { start = p.resume(pos) })
		if err := s.firstCheckpoint(ctx, snap != nil); err != nil {
			closeConn(conn)
			return nil, 0, nil, err
		}
		if snap != nil {
			return conn, start, snap, nil
		}
		err = s.startReplication(ctx, conn, start)
		if err == nil {
			s.wait.holder = 0
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

// openReplication opens a replication connection to postgres.url, its
// wal_sender_timeout limited (limitWalSender); a connection pooler there
// is refused.
func (s *Source) openReplication(ctx context.Context) (*pgconn.PgConn, error) {
	return connectReplication(ctx, s.cfg.URL, s.cfg.Network, s.limitWalSender()) // pooler.go
}

// limitWalSender sets the session's wal_sender_timeout to
// cdc.receive_timeout, where the server allows it and postgres.url does
// not set one. The server then ends this session's walsender, and lets go
// of the slot, when it hears nothing from the relay for as long as the
// relay waits to hear from it: after a silent loss, the relay's next
// session need not wait long for the slot. Status updates go every
// cdc.status_interval, well within it.
func (s *Source) limitWalSender() pgsql.Option {
	return func(cfg *pgconn.Config) {
		if s.server.sessionWalSenderTimeout {
			pgsql.DefaultParam("wal_sender_timeout", strconv.FormatInt(s.cfg.ReceiveTimeout.Milliseconds(), 10))(cfg)
		}
	}
}

// createSlotOn creates the slot on the replication connection, with a
// snapshot exported for cdc.snapshot initial, and returns the slot's
// position and that snapshot.
func (s *Source) createSlotOn(ctx context.Context, conn *pgconn.PgConn) (slotPosition, *snapshotJob, error) {
	lsn, name, err := s.createExported(ctx, conn)
	if err != nil {
		return slotPosition{}, nil, err
	}
	return slotPosition{lsn: lsn, fresh: true}, &snapshotJob{name: name}, nil
}

// snapshotFor decides what is published before streaming, given the
// snapshot a slot created now exported (nil: none): a backfill's chosen
// rows (backfill.go), in that snapshot when there is one; that snapshot;
// or, when the checkpoint says a snapshot was cut short, the table again
// as it is now. Nil: nothing, streaming starts at once.
func (s *Source) snapshotFor(created *snapshotJob) *snapshotJob {
	snap := created
	if b := s.backfill; b != nil && b.job != nil {
		job := *b.job
		if snap != nil {
			job.name = snap.name
		}
		snap, b.job = &job, nil
	}
	if cp, ok := s.Checkpoint(); snap == nil && ok && cp.SnapshotPending {
		s.log.Warn("the snapshot of the outbox table was not all in Kafka when the relay stopped; publishing the table again, as it is now, before streaming (consumers drop the repeats by id)",
			"slot", s.cfg.Slot)
		snap = &snapshotJob{}
	}
	return snap
}

// firstCheckpoint writes a checkpoint before anything is streamed when
// there is none yet, or when a snapshot is about to be published (it then
// says the snapshot is pending): a slot dropped before the first event is
// then caught too, and a snapshot cut short is published again. The store
// saves it now; in Kafka transactions, Run commits it first (emitMark).
func (s *Source) firstCheckpoint(ctx context.Context, snapshot bool) error {
	_, ok := s.Checkpoint()
	if snapshot {
		s.pos.update(func(p *positions) { p.snapshotPending = true })
	}
	due := !ok || snapshot
	if s.ckpt.recorder != nil {
		s.ckpt.needMark = due
		return nil
	}
	if !due {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.save(sctx); err != nil {
		return &checkpointError{err}
	}
	return nil
}

// startReplication starts streaming from the slot at start.
func (s *Source) startReplication(ctx context.Context, conn *pgconn.PgConn, start pglogrepl.LSN) error {
	pub := strings.ReplaceAll(pgx.Identifier{s.cfg.Publication}.Sanitize(), "'", "''")
	args := []string{"proto_version '1'", "publication_names '" + pub + "'"}
	if len(s.cfg.MessagePrefixes) > 0 {
		// pgoutput sends logical decoding messages only when asked
		// (message.go); it knows the option from PostgreSQL 14.
		if v := serverVersion(conn); v > 0 && v < 140000 {
			return connector.Permanent(fmt.Errorf("cdc.message_prefixes needs PostgreSQL 14 or later, whose pgoutput sends logical decoding messages; the server is %s: remove cdc.message_prefixes or upgrade the server",
				conn.ParameterStatus("server_version")))
		}
		args = append(args, "messages 'true'")
	}
	startCtx, cancel := s.cfg.Network.Query(ctx)
	defer cancel()
	return pglogrepl.StartReplication(startCtx, conn, s.cfg.Slot, start, pglogrepl.StartReplicationOptions{PluginArgs: args})
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
