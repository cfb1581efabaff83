package cdc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxrelay/outboxrelay/cdc/internal/pgoutput"
	"github.com/outboxrelay/outboxrelay/connector"
)

// decode takes one pgoutput message: an insert into an outbox table
// becomes an event of the transaction being received, and the
// transaction's commit hands it on (hold).
func (st *stream) decode(ctx context.Context, wal []byte) error {
	if len(wal) > 0 && wal[0] == byte(pglogrepl.MessageTypeInsert) {
		return st.insert(ctx, wal)
	}
	msg, err := pglogrepl.Parse(wal)
	if err != nil {
		return fmt.Errorf("parse pgoutput message: %w", err)
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		st.src.noteRenamed(m)
		st.src.adoptTable(m) // patterns.go
		st.rels.Add(m)
	case *pglogrepl.BeginMessage:
		st.txn.begin(m, st.src.pos.get().skips(m.FinalLSN))
		st.noteLag(st.txn.sent, m.CommitTime) // coalesce.go
	case *pglogrepl.LogicalDecodingMessage:
		return st.message(ctx, m) // message.go
	case *pglogrepl.UpdateMessage:
		if st.src.cfg.OnUpdate == UpdateFail {
			return st.refuseUpdate(ctx, m) // update.go
		}
		st.skip(m.RelationID, "UPDATE")
	case *pglogrepl.DeleteMessage:
		st.skip(m.RelationID, "DELETE")
	case *pglogrepl.TruncateMessage:
		for _, id := range m.RelationIDs {
			st.skip(id, "TRUNCATE")
		}
	case *pglogrepl.CommitMessage:
		return st.commit(ctx, m)
	}
	return nil
}

// commit ends the transaction being received. One without events of ours,
// while nothing is in flight, moves the position at once; any other is
// handed on with its checkpoint, or held (hold).
func (st *stream) commit(ctx context.Context, m *pglogrepl.CommitMessage) error {
	t := &st.txn
	t.open = false
	end := m.TransactionEndLSN
	proof := &connector.CheckpointTxn{Xid: t.xid, CommitLSN: uint64(m.CommitLSN), EndLSN: uint64(end), CommitTime: t.commitTime}
	if t.events == 0 && st.pass(end, proof) {
		// Nothing of ours, nothing in flight: confirmable at once.
		return st.markIdle(ctx)
	}
	n := int64(t.events)
	var handed int64
	st.src.pos.update(func(p *positions) { handed = p.emit(end, n, t.stages.Received) })
	mark, done := st.src.ckpt.write(&ackedTxn{end: end, commit: t.commitTime, lastID: t.lastID, proof: proof}, handed, n, false)
	return st.hold(ctx, mark, done)
}

// insert turns an Insert message into an event. Inserts are one message per
// event, so they are decoded in place (pgoutput.DecodeInsert) rather than
// through pglogrepl.Parse, which allocates for the message and for every
// column of every row.
func (st *stream) insert(ctx context.Context, wal []byte) error {
	id, err := pgoutput.InsertRelation(wal)
	if err != nil {
		return fmt.Errorf("parse pgoutput message: %w", err)
	}
	rel, tbl := st.ours(id)
	if tbl == nil || st.txn.skip {
		return nil
	}
	t := &st.txn
	var e connector.Event
	cols, err := rel.DecodeInsert(wal, t.cols)
	switch {
	case errors.Is(err, pgoutput.ErrMalformed):
		return fmt.Errorf("parse pgoutput message: %w", err)
	case err != nil:
		e = connector.Event{CommitTime: t.commitTime, Origin: t.origin, Invalid: &connector.EventError{Origin: t.origin, Err: err}}
	default:
		// NewEvent copies what it keeps of cols, so cols is reused.
		t.cols = cols
		e = tbl.columns.NewEvent(cols, t.commitTime, t.origin)
	}
	e.Table, e.Stages = tbl.qualified, t.stages
	if inv, ok := e.Invalid.(*connector.EventError); ok {
		st.src.explainMissing(inv, rel, tbl)
	}
	return st.add(ctx, e)
}

// add puts an event of the transaction being received into the batch,
// handing the batch on when it is full.
func (st *stream) add(ctx context.Context, e connector.Event) error {
	st.txn.lastID = e.ID
	st.txn.events++
	st.batch.events = append(st.batch.events, e)
	st.batch.bytes += eventBytes(&e)
	if st.full() {
		// The whole transactions before this one go on first, with
		// their Done. A large transaction goes on in chunks that cannot
		// be confirmed on their own: only its commit can.
		if err := st.release(ctx); err != nil {
			return err
		}
		if st.full() {
			return st.emitWith(ctx, len(st.batch.events), st.batch.bytes, nil, nil)
		}
	}
	return nil
}

func (st *stream) full() bool {
	return len(st.batch.events) >= st.src.cfg.MaxBatchEvents || st.batch.bytes >= st.src.cfg.MaxBatchBytes
}

// eventBytes is what an event holds in memory, as cdc.max_batch_bytes
// counts it: every value it keeps, extra columns too (a large one of those
// weighs as much as a payload), and its fixed part.
func eventBytes(e *connector.Event) int {
	n := len(e.Payload) + len(e.ID) + len(e.AggregateType) + len(e.AggregateID) + len(e.Type) + 64
	for _, c := range e.Extra {
		n += len(c.Value) + len(c.Name)
	}
	return n
}

// ours returns the relation and the outbox table it is, or a nil table
// when it is none. A publication the user made may cover other tables;
// their changes are not ours to relay. A table is known by its oid, so
// that a rename does not hide it, and by its name, so that one dropped
// and made again is still known.
func (st *stream) ours(id uint32) (*pgoutput.Relation, *table) {
	rel, ok := st.rels[id]
	if !ok {
		return nil, nil
	}
	for i := range st.src.tables {
		if t := &st.src.tables[i]; id == t.oid || (rel.Namespace == t.schema && rel.Name == t.name) {
			return rel, t
		}
	}
	return nil, nil
}

// noteRenamed warns when an outbox table comes under another name than
// the configured one: renamed or moved to another schema while the relay
// ran, or, replayed from before a rename, under its old name. ours still
// knows it by its oid; the next start looks it up by the configured name.
func (s *Source) noteRenamed(m *pglogrepl.RelationMessage) {
	for _, t := range s.tables {
		if t.oid == m.RelationID && (m.Namespace != t.schema || m.RelationName != t.name) {
			s.log.Warn("the outbox table's changes come under another name, renamed or moved; relaying them by the table's oid. Set outbox.table to its current name before the next start",
				"table", t.String(), "name", m.Namespace+"."+m.RelationName)
		}
	}
}

// explainMissing says, of an event whose routed column is not in the
// table at all (renamed or dropped while the relay ran, which the
// relation message announced), which column, which table, and the ways on.
func (s *Source) explainMissing(inv *connector.EventError, rel *pgoutput.Relation, t *table) {
	m := t.columns
	for _, name := range []string{m.ID, m.AggregateType, m.AggregateID} {
		if !slices.ContainsFunc(rel.Columns, func(c pgoutput.Column) bool { return c.Name == name }) {
			inv.Err = fmt.Errorf("outbox table %s has no column %q any more (renamed or dropped; it has %s): rename it back, or map the new name under outbox.columns and restart, or set kafka.dead_letter_topic to pass such rows there: %w",
				t, name, relColumns(rel), inv.Err)
			return
		}
	}
}

func relColumns(rel *pgoutput.Relation) string {
	names := make([]string, len(rel.Columns))
	for i, c := range rel.Columns {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

// skip counts a change that is not an insert. Logging each one would flood
// the log of a table that is cleaned with DELETE; once a minute says it.
func (st *stream) skip(id uint32, op string) {
	if _, t := st.ours(id); t == nil {
		return
	}
	n := st.src.count.skipped.Add(1)
	if time.Since(st.warned.skip) >= time.Minute {
		st.warned.skip = time.Now()
		st.src.log.Warn("skipping changes to the outbox table that are not inserts; only inserted rows are events",
			"op", op, "at", st.txn.origin, "skipped_total", n,
			"hint", "publish only inserts: ALTER PUBLICATION ... SET (publish = 'insert')")
	}
}
