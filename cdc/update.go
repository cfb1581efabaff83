package cdc

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxrelay/outboxrelay/connector"
)

// refuseUpdate turns an UPDATE of an outbox row, with cdc.on_update fail,
// into an event that cannot be published, in its place in the stream: the
// runner publishes every event before it, then stops with its error, or
// sends it to the dead letter topic. That is Debezium's
// table.op.invalid.behavior=fatal: EventRouterDelegate.handleUnexpectedOperation
// throws "Unexpected update message received <key>, fail." and the task
// stops, after the records before it. The event carries the row's new
// values, so the error and a dead letter name it.
func (st *stream) refuseUpdate(ctx context.Context, m *pglogrepl.UpdateMessage) error {
	rel, tbl := st.ours(m.RelationID)
	if tbl == nil || st.txn.skip {
		return nil
	}
	// The runner stops at this event without waiting for what is in
	// flight before it; Debezium has sent the records before the UPDATE
	// when it throws. So the transactions before it go to Kafka first.
	if err := st.release(ctx); err != nil {
		return err
	}
	if err := st.awaitAcked(ctx); err != nil {
		return err
	}
	var cols []connector.Column
	if m.NewTuple != nil {
		for i, c := range m.NewTuple.Columns {
			if i >= len(rel.Columns) {
				break
			}
			col := connector.Column{Name: rel.Columns[i].Name, Type: rel.Columns[i].Type}
			switch c.DataType {
			case pglogrepl.TupleDataTypeText, pglogrepl.TupleDataTypeBinary:
				col.Value = c.Data
			default: // NULL, or an unchanged TOAST value the message leaves out
				col.Null = true
			}
			cols = append(cols, col)
		}
	}
	e := tbl.columns.NewEvent(cols, st.txn.commitTime, st.txn.origin)
	e.Table, e.Stages = tbl.qualified, st.txn.stages
	e.Invalid = &connector.EventError{EventID: e.ID, Origin: st.txn.origin,
		Err: fmt.Errorf("UPDATE of a row of outbox table %s (aggregate %q %q), and cdc.on_update is fail (Debezium's table.op.invalid.behavior=fatal): outbox rows are inserted, never updated; stop whatever updates them, then set cdc.on_update: skip (table.op.invalid.behavior=warn) to pass over this one, or set kafka.dead_letter_topic to keep it there",
			tbl, e.AggregateType, e.AggregateID)}
	return st.add(ctx, e)
}

// awaitAcked returns once Kafka has acknowledged every transaction
// emitted so far, keeping up meanwhile (keepUp).
func (st *stream) awaitAcked(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		pos, err := st.keepUp(ctx, time.Now())
		if err != nil {
			return err
		}
		if pos.idle() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-st.saver.failures():
			return &checkpointError{err}
		case <-t.C:
		}
	}
}
