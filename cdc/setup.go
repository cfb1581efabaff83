package cdc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgident"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// prepare checks the server and the table, and creates the publication and
// the slot when they are missing. It returns where streaming from the slot
// begins.
// It runs on an ordinary connection before each replication session; every
// step is idempotent, and two relays racing to create the same object are
// both fine.
func (s *Source) prepare(ctx context.Context) (slotPosition, error) {
	conn, err := pgsql.Connect(ctx, s.cfg.URL, s.cfg.Network)
	if err != nil {
		return slotPosition{}, classify("connect to PostgreSQL", err)
	}
	defer pgsql.Close(ctx, conn)
	if err := s.checkServer(ctx, conn); err != nil {
		return slotPosition{}, err
	}
	waited, err := s.awaitSlot(ctx, conn) // slotwait.go
	if err != nil {
		return slotPosition{}, err
	}
	if err := s.checkpointAfterWait(ctx, waited); err != nil {
		return slotPosition{}, err
	}
	// history.go: a slot behind the checkpoint is replayed up to it
	// first, to tell a crash from a restore.
	history, err := s.checkHistory(ctx, conn)
	if err != nil {
		return slotPosition{}, err
	}
	qctx, cancel := s.cfg.Network.Query(ctx)
	defer cancel()
	return s.ensureSlot(qctx, conn, history)
}

// serverNotes is what the source has learned of the server, kept across
// connections so that what it says of it is said once. Only Run's
// goroutine touches it.
type serverNotes struct {
	// walSenderChecked is set once the server's wal_sender_timeout has
	// been compared with cdc.receive_timeout; sessionWalSenderTimeout
	// when the replication session may set its own (PostgreSQL 12+).
	walSenderChecked, sessionWalSenderTimeout bool
	// onHotStandby: the server the source last prepared on is a hot
	// standby (standby.go); hotStandbyLogged: it said so, once.
	onHotStandby, hotStandbyLogged bool
}

// checkServer checks the server, the outbox tables and the publication,
// and adds what the publication lacks. The checks are a few catalog
// queries; a server that does not answer them within the query timeout is
// as good as gone.
func (s *Source) checkServer(ctx context.Context, conn *pgx.Conn) error {
	ctx, cancel := s.cfg.Network.Query(ctx)
	defer cancel()
	if err := s.resolvePatterns(ctx, conn); err != nil { // patterns.go
		return err
	}
	facts, err := s.readFacts(ctx, conn)
	if err != nil {
		return err
	}
	if err := s.checkStandby(ctx, conn, facts); err != nil { // standby.go
		return err
	}
	if err := facts.LogicalWAL().Err(); err != nil {
		return err
	}
	if !s.server.walSenderChecked {
		if err := s.checkWalSenderTimeout(ctx, conn); err != nil {
			return err
		}
	}
	if err := s.checkTables(ctx, conn, facts); err != nil {
		return err
	}
	return s.ensurePublication(ctx, conn, facts)
}

// checkpointAfterWait reads the checkpoint again where the wait for the
// slot may have changed it. In Kafka transactions (txn.go) it is read,
// the first time too, only once no earlier instance may commit any more.
// After a wait, the session that held the slot may have moved it, and
// with it the checkpoint (another relay on this slot saves under the same
// key): judged against the checkpoint read at start, the slot would look
// ahead of it.
func (s *Source) checkpointAfterWait(ctx context.Context, waited bool) error {
	switch {
	case s.ckpt.recorder != nil:
		if err := s.ckpt.recorder.Fence(ctx); err != nil {
			return err
		}
		if !s.ckpt.loaded {
			return s.firstLoad(ctx, s.ckpt.store)
		}
		return s.reloadCheckpoint(ctx)
	case waited:
		return s.reloadCheckpoint(ctx)
	}
	return nil
}

// checkWalSenderTimeout learns whether the replication session may set
// its own wal_sender_timeout (PostgreSQL 12 and later), and otherwise
// warns, once, when the server would take longer than the relay to notice
// a dead replication connection: until it does, its walsender holds the
// slot, and a reconnected relay can only wait.
func (s *Source) checkWalSenderTimeout(ctx context.Context, conn *pgx.Conn) error {
	var ms, version int64
	err := conn.QueryRow(ctx, `SELECT (SELECT setting::int8 FROM pg_settings WHERE name = 'wal_sender_timeout'), current_setting('server_version_num')::int8`).Scan(&ms, &version)
	if err != nil {
		return classify("read wal_sender_timeout", err)
	}
	s.server.walSenderChecked = true
	if version >= 120000 {
		s.server.sessionWalSenderTimeout = true
		return nil
	}
	server := time.Duration(ms) * time.Millisecond
	switch {
	case ms == 0:
		s.log.Warn("the server's wal_sender_timeout is 0: it never ends a replication session whose connection died silently, and holds the slot until its kernel gives up on the socket; set wal_sender_timeout to at most cdc.receive_timeout",
			"slot", s.cfg.Slot, "receive_timeout", s.cfg.ReceiveTimeout.String())
	case server > s.cfg.ReceiveTimeout:
		s.log.Warn("the server's wal_sender_timeout is longer than cdc.receive_timeout: after a silent connection loss the relay waits up to wal_sender_timeout for the server to let go of the slot; lower wal_sender_timeout to at most cdc.receive_timeout",
			"slot", s.cfg.Slot, "wal_sender_timeout", server.String(), "receive_timeout", s.cfg.ReceiveTimeout.String())
	}
	return nil
}

// readFacts reads what the catalog says of the server, the outbox tables
// and the publication (pgsql.ReadFacts), and records each table's oid:
// the stream knows the table by it when its name changes.
func (s *Source) readFacts(ctx context.Context, conn *pgx.Conn) (pgsql.Facts, error) {
	names := make([]pgsql.TableName, len(s.tables))
	for i, t := range s.tables {
		names[i] = pgsql.TableName{Schema: t.schema, Name: t.name}
	}
	facts, err := pgsql.ReadFacts(ctx, conn, s.cfg.Publication, names...)
	if err != nil {
		return pgsql.Facts{}, classify("read the catalog", err)
	}
	for i := range s.tables {
		s.tables[i].oid = facts.Tables[i].OID
	}
	return facts, nil
}

// checkTables checks that every outbox table exists, is of a kind the
// stream can follow (pgsql's TableKind), and has the columns routing
// needs.
func (s *Source) checkTables(ctx context.Context, conn *pgx.Conn, facts pgsql.Facts) error {
	for i, t := range s.tables {
		if err := facts.TableKind("cdc", facts.Tables[i]).Err(); err != nil {
			return err
		}
		if err := s.checkTableColumns(ctx, conn, t); err != nil {
			return err
		}
	}
	return nil
}

func (s *Source) checkTableColumns(ctx context.Context, conn *pgx.Conn, t table) error {
	rows, err := conn.Query(ctx, `
		SELECT a.attname
		FROM pg_attribute a
		JOIN pg_class c ON c.oid = a.attrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped`,
		t.schema, t.name)
	if err != nil {
		return classify("read the outbox table's columns", err)
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return classify("read the outbox table's columns", err)
	}
	var missing []string
	m := t.columns
	for _, c := range []string{m.ID, m.AggregateType, m.AggregateID} {
		if !slices.Contains(cols, c) {
			missing = append(missing, fmt.Sprintf("%q", c))
		}
	}
	if len(missing) > 0 {
		return connector.Permanent(fmt.Errorf("outbox table %s has no column %s (it has %s); add them or map yours under outbox.columns", t, strings.Join(missing, ", "), strings.Join(cols, ", ")))
	}
	return nil
}

// ensurePublication makes sure the publication exists, publishes inserts
// and covers every outbox table, as pgsql's PublicationPlan judges it: it
// creates the publication, or adds a table to it, when
// cdc.create_publication allows, and otherwise says what to run. What
// else is wrong with it the relay does not change: the publication may
// serve other readers.
func (s *Source) ensurePublication(ctx context.Context, conn *pgx.Conn, facts pgsql.Facts) error {
	plan := facts.PublicationPlan()
	if plan.Missing {
		if facts.InRecovery {
			return s.standbyPublicationError(fmt.Sprintf("publication %q does not exist", s.cfg.Publication), plan.Create)
		}
		create := plan.Create
		if len(s.tables) == 0 {
			// outbox.table_patterns that match no table yet: tables
			// join as they are created (patterns.go).
			create = fmt.Sprintf("CREATE PUBLICATION %s WITH (publish = 'insert')", pgident.Quote(s.cfg.Publication))
		}
		if !*s.cfg.CreatePublication {
			return connector.Permanent(fmt.Errorf("publication %q does not exist and cdc.create_publication is false: create it with %s", s.cfg.Publication, create))
		}
		if _, err := conn.Exec(ctx, create); err != nil && !isDuplicate(err) {
			return classify("create the publication", err)
		}
		if s.cfg.OnUpdate == UpdateFail {
			// cdc.on_update fail must see the updates it refuses.
			if _, err := conn.Exec(ctx, publishUpdatesSQL(s.cfg.Publication)); err != nil {
				return classify("make the publication publish updates (cdc.on_update fail)", err)
			}
		}
		s.log.Info("created publication", "publication", s.cfg.Publication, "tables", s.tableList())
		return nil
	}
	if s.cfg.OnUpdate == UpdateFail && !facts.Publication.Update {
		return connector.Permanent(fmt.Errorf("publication %q does not publish updates, so cdc.on_update fail (Debezium's table.op.invalid.behavior=fatal) would never see an UPDATE of an outbox row: as its owner run %s, or set cdc.on_update: skip", s.cfg.Publication, publishUpdatesSQL(s.cfg.Publication)))
	}
	var fatal pgsql.PublicationPlan
	for _, p := range plan.Problems {
		if p.Add == nil {
			fatal.Problems = append(fatal.Problems, p)
		}
	}
	if err := fatal.Verdict(s.cfg.Publication).Err(); err != nil {
		return err
	}
	for i, t := range s.tables {
		if facts.Tables[i].InPublication {
			continue
		}
		sql := pgsql.AddTableSQL(s.cfg.Publication, t.ident())
		if facts.InRecovery {
			return s.standbyPublicationError(fmt.Sprintf("publication %q does not include table %s", s.cfg.Publication, t), sql)
		}
		if !*s.cfg.CreatePublication {
			return connector.Permanent(fmt.Errorf("publication %q does not include table %s and cdc.create_publication is false: %s", s.cfg.Publication, t, sql))
		}
		// A table added to outbox.tables: the slot decodes its inserts
		// from the next transaction the server sees after this commits.
		// Its rows are counted before, as a slot's are (rowsBefore).
		before := s.countRows(ctx, conn, t)
		if _, err := conn.Exec(ctx, sql); err != nil && !isDuplicate(err) {
			return classify(fmt.Sprintf("add table %s to publication %q", t, s.cfg.Publication), err)
		}
		s.log.Info("added a table to the publication", "publication", s.cfg.Publication, "table", t.String())
		s.warnTableRows(t, before, "the outbox table added to the publication already holds rows; those committed before it was added are not relayed, only what commits from now on is")
	}
	return nil
}

// publishUpdatesSQL makes publication pub publish inserts and updates.
func publishUpdatesSQL(pub string) string {
	return fmt.Sprintf("ALTER PUBLICATION %s SET (publish = 'insert, update')", pgident.Quote(pub))
}

// slotPosition is where streaming from the slot begins. fresh: the slot
// was just created, or taken over after a loss, so the position starts
// over there rather than at the checkpoint's, which may even be ahead of
// it on a restored server.
type slotPosition struct {
	lsn   pglogrepl.LSN
	fresh bool
	// create: the slot is to be created on the replication connection,
	// with a snapshot (cdc.snapshot initial); lsn is not known yet.
	create bool
}

// ensureSlot compares the slot with the checkpoint (judge) and creates the
// slot on a first start. A lost slot stops here with cdc.on_slot_loss
// fail, before anything is created.
func (s *Source) ensureSlot(ctx context.Context, conn *pgx.Conn, history *historyFinding) (slotPosition, error) {
	slot, err := s.readSlot(ctx, conn)
	if err != nil {
		return slotPosition{}, err
	}
	s.settleForeign(ctx, conn) // foreign.go: another cluster's checkpoint
	v, cause, kp := s.judge(slot, history)
	if v == slotLost && cause == CauseAhead {
		// Another relay on this slot may have moved it, and saved the
		// checkpoint that covers it, since this one read the checkpoint.
		if err := s.reloadCheckpoint(ctx); err != nil {
			return slotPosition{}, err
		}
		v, cause, kp = s.judge(slot, history)
	}
	if s.backfill != nil {
		return s.planBackfill(ctx, conn, slot, v, cause, kp) // backfill.go
	}
	switch v {
	case createSlot:
		return s.createSlot(ctx, conn, history)
	case useSlot:
		return slotPosition{lsn: slot.confirmed}, nil
	}
	if (cause == CauseDropped || cause == CauseInvalidated) && s.saveLate(ctx) {
		kp = s.pos.get().current
	}
	s.adviseBackfill(ctx, conn, kp, cause) // backfill.go: the command the error names
	if err := s.reportLoss(slot, kp, cause); err != nil {
		return slotPosition{}, err
	}
	// cdc.on_slot_loss recreate: start over from the slot as it is.
	s.setCurrent(nil)
	switch {
	case slot.exists && slot.lost:
		if _, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, s.cfg.Slot); err != nil {
			return slotPosition{}, classify("drop the invalidated replication slot", err)
		}
		return s.createSlot(ctx, conn, history)
	case !slot.exists:
		return s.createSlot(ctx, conn, history)
	}
	return slotPosition{lsn: slot.confirmed, fresh: true}, nil
}

// judge judges slot against the checkpoint the source knows, which it
// returns (nil: none), and what the replay of the slot found (nil:
// none ran).
func (s *Source) judge(slot slotState, history *historyFinding) (verdict, SlotLossCause, *connector.Checkpoint) {
	cp, ok := s.Checkpoint()
	if !ok {
		v, cause := judge(slot, nil, s.key())
		return v, cause, nil
	}
	if h := history; h != nil && h.end == cp.EndLSN && h.confirmed == slot.confirmed {
		slot.historyDiffers, slot.historyDetail = h.differs, h.detail
	}
	v, cause := judge(slot, &cp, s.key())
	return v, cause, &cp
}

// readSlot reads the slot's state, and refuses a slot that is not a
// pgoutput slot of this database.
func (s *Source) readSlot(ctx context.Context, conn *pgx.Conn) (slotState, error) {
	var plugin, database, walStatus, wal, reason string
	var confirmed *string
	err := conn.QueryRow(ctx, `SELECT coalesce(plugin, ''), coalesce(database, ''), confirmed_flush_lsn::text, coalesce(wal_status, ''),
			coalesce(`+pgsql.WALEnd+`::text, '0/0'), `+invalidationSQL(serverVersion(conn.PgConn()))+`
		FROM pg_replication_slots WHERE slot_name = $1`,
		s.cfg.Slot).Scan(&plugin, &database, &confirmed, &walStatus, &wal, &reason)
	if errors.Is(err, pgx.ErrNoRows) {
		return slotState{}, nil
	}
	if err != nil {
		return slotState{}, classify("look up the replication slot", err)
	}
	if plugin != "pgoutput" {
		return slotState{}, connector.Permanent(fmt.Errorf("replication slot %q uses plugin %q; outboxrelay needs a pgoutput slot: use another cdc.slot, or drop this one", s.cfg.Slot, plugin))
	}
	if database != conn.Config().Database {
		return slotState{}, connector.Permanent(fmt.Errorf("replication slot %q belongs to database %q, not %q: use another cdc.slot", s.cfg.Slot, database, conn.Config().Database))
	}
	st := slotState{exists: true, lost: walStatus == "lost" || reason != "", invalidation: reason}
	if st.wal, err = pglogrepl.ParseLSN(wal); err != nil {
		return slotState{}, fmt.Errorf("the server's WAL position %q: %w", wal, err)
	}
	if confirmed != nil {
		if st.confirmed, err = pglogrepl.ParseLSN(*confirmed); err != nil {
			return slotState{}, fmt.Errorf("replication slot %q: confirmed_flush_lsn %q: %w", s.cfg.Slot, *confirmed, err)
		}
	}
	return st, nil
}

// createSlot creates the slot, which captures what commits from now on.
// history is ensureSlot's, to judge again a slot another relay created
// first.
func (s *Source) createSlot(ctx context.Context, conn *pgx.Conn, history *historyFinding) (slotPosition, error) {
	if s.cfg.Snapshot == SnapshotInitial {
		return slotPosition{create: true}, nil // snapshot.go, on the replication connection
	}
	var lsn string
	before := s.rowsBefore(ctx, conn)
	version := serverVersion(conn.PgConn())
	err := conn.QueryRow(ctx, createSlotSQL(version, s.failover(version)), s.cfg.Slot).Scan(&lsn)
	if isDuplicate(err) {
		// Another relay created it first.
		return s.ensureSlot(ctx, conn, history)
	}
	if err != nil {
		return slotPosition{}, classify("create the replication slot", err)
	}
	s.log.Info("created replication slot", "slot", s.cfg.Slot, "lsn", lsn)
	s.warnRowsBefore(before)
	pos, err := pglogrepl.ParseLSN(lsn)
	return slotPosition{lsn: pos, fresh: true}, err
}

func isDuplicate(err error) bool {
	var pe *pgconn.PgError
	// duplicate_object for slots and publications; unique_violation when
	// two sessions race on a catalog's unique index.
	return errors.As(err, &pe) && (pe.Code == pgerrcode.DuplicateObject || pe.Code == pgerrcode.UniqueViolation)
}
