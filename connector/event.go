package connector

import (
	"fmt"
	"strings"
	"time"
)

// Column is one column of an outbox row as read from PostgreSQL.
type Column struct {
	Name string
	// Type is the PostgreSQL type OID; 0 when unknown.
	Type uint32
	// Null reports an SQL NULL; Value is nil then.
	Null bool
	// Value is the column in PostgreSQL's text form, except bytea, which
	// holds the raw bytes. An empty value ('' or '\x') is empty, not nil.
	Value []byte
}

// Event is one committed outbox row.
type Event struct {
	ID            string
	AggregateType string
	AggregateID   string
	Type          string
	// TypeNull reports a NULL type column (Type is empty then), which
	// Debezium writes as null: a null header, a null envelope field.
	TypeNull bool
	// AggregateIDNull reports a NULL aggregate id column (AggregateID is
	// empty then). Such an event is Invalid, unless the runner passes
	// NULL keys to its router ([WithNullKeys]), as Debezium's outbox
	// router makes a record with a null key of it.
	AggregateIDNull bool
	// Payload is the payload column as stored: the text of json, jsonb and
	// text columns, the raw bytes of bytea. Nil when the column is NULL.
	Payload []byte
	// CommitTime is when the row's transaction committed.
	CommitTime time.Time
	// Extra holds the row's other columns, in table order.
	Extra []Column
	// Origin says where the row came from, for errors and logs: the commit
	// LSN for CDC, the table for the poller.
	Origin string
	// Table is the outbox table the row is in, schema.table. Empty: the
	// one table configured (a source that does not say).
	Table string
	// Stages are when the event passed the source's stages, for the
	// metrics of slow events; zero where a source cannot tell.
	Stages Stages
	// Message, when not nil, says the event came from a logical decoding
	// message (pg_logical_emit_message) rather than a row: a table-less
	// outbox. Nil for a row.
	Message *LogicalMessage
	// Invalid, when not nil, says why this row is not a valid outbox event
	// (a required column is NULL, say). The runner does not publish it: it
	// sends it to the dead letter topic or stops with this error.
	Invalid error
	// onlyNullKey reports that Invalid says no more than that the
	// aggregate id is NULL, which a runner [WithNullKeys] routes.
	onlyNullKey bool
}

// Stages are the times an event passed on its way to the runner, besides
// its commit: with CommitTime and the sink's own times they tell which
// stage held a slow event.
type Stages struct {
	// Sent is when the server sent the event's transaction, by its clock
	// (CDC: the walsender's send time of the transaction's first
	// message); zero when the source cannot tell (the poller).
	Sent time.Time
	// Received is when the source read it (CDC: the transaction's first
	// message; the poller: its claim).
	Received time.Time
}

// Field returns the value of the named column: one of the mapped columns or
// an extra one. ok is false when the row has no such column.
func (e *Event) Field(m ColumnMap, name string) (value []byte, null, ok bool) {
	switch name {
	case m.ID:
		return []byte(e.ID), false, true
	case m.AggregateType:
		return []byte(e.AggregateType), false, true
	case m.AggregateID:
		if e.AggregateIDNull {
			return nil, true, true
		}
		return []byte(e.AggregateID), false, true
	case m.Type:
		if e.TypeNull {
			return nil, true, true
		}
		return []byte(e.Type), false, true
	case m.Payload:
		return e.Payload, e.Payload == nil, true
	}
	for _, c := range e.Extra {
		if c.Name == name {
			return c.Value, c.Null, true
		}
	}
	return nil, false, false
}

// ColumnMap names the outbox table's columns. The zero value of a field
// means Debezium's default column name.
type ColumnMap struct {
	ID            string `yaml:"id" doc:"Column holding the event id (header id)."`
	AggregateType string `yaml:"aggregatetype" doc:"Column naming the aggregate type (the topic)."`
	AggregateID   string `yaml:"aggregateid" doc:"Column holding the aggregate id (the record key)."`
	Type          string `yaml:"type" doc:"Column holding the event type."`
	Payload       string `yaml:"payload" doc:"Column holding the payload (the record value)."`
}

// WithDefaults returns m with empty names set to Debezium's defaults.
func (m ColumnMap) WithDefaults() ColumnMap {
	def := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	def(&m.ID, "id")
	def(&m.AggregateType, "aggregatetype")
	def(&m.AggregateID, "aggregateid")
	def(&m.Type, "type")
	def(&m.Payload, "payload")
	return m
}

// Validate reports columns that are mapped twice. The aggregate id, which
// is only the record key, may be any column, one of the others too (the
// event id, say), as Debezium's table.field.event.key may.
func (m ColumnMap) Validate() error {
	seen := map[string]string{}
	for _, f := range []struct{ role, name string }{
		{"id", m.ID}, {"aggregatetype", m.AggregateType},
		{"type", m.Type}, {"payload", m.Payload},
	} {
		if other, dup := seen[f.name]; dup && f.name != "" {
			return fmt.Errorf("outbox.columns: column %q is mapped as both %s and %s", f.name, other, f.role)
		}
		seen[f.name] = f.role
	}
	return nil
}

// NewEvent builds an event from a row's columns. The id, aggregate type and
// aggregate id must be present and not NULL; the type and payload columns may
// be absent or NULL. When they are not, the event's Invalid is an
// [*EventError] naming the row (by id where there is one) and the column.
func (m ColumnMap) NewEvent(cols []Column, commit time.Time, origin string) Event {
	e := Event{CommitTime: commit, Origin: origin}
	var have [5]bool
	var id, aggType, aggID, typ []byte
	extra := 0
	for i := range cols {
		c := &cols[i]
		if c.Name == m.AggregateID {
			// Read apart from the switch: the key may be another role's
			// column.
			aggID, have[2], e.AggregateIDNull = c.Value, !c.Null, c.Null
		}
		switch c.Name {
		case m.ID:
			id, have[0] = c.Value, !c.Null
		case m.AggregateType:
			aggType, have[1] = c.Value, !c.Null
		case m.AggregateID:
		case m.Type:
			typ, have[3], e.TypeNull = c.Value, true, c.Null
		case m.Payload:
			e.Payload, have[4] = c.Value, true
			if c.Null {
				e.Payload = nil
			}
		default:
			extra++
		}
	}
	// The four text fields are substrings of one string: one allocation
	// per event instead of four, on the CDC source's hot path. They live
	// and die together anyway.
	var b strings.Builder
	b.Grow(len(id) + len(aggType) + len(aggID) + len(typ))
	b.Write(id)
	b.Write(aggType)
	b.Write(aggID)
	b.Write(typ)
	all, at := b.String(), 0
	next := func(n int) string { at += n; return all[at-n : at] }
	e.ID, e.AggregateType, e.AggregateID, e.Type = next(len(id)), next(len(aggType)), next(len(aggID)), next(len(typ))
	if extra > 0 {
		e.Extra = make([]Column, 0, extra)
		for _, c := range cols {
			switch c.Name {
			case m.ID, m.AggregateType, m.AggregateID, m.Type, m.Payload:
			default:
				e.Extra = append(e.Extra, c)
			}
		}
	}
	for i, name := range []string{m.ID, m.AggregateType, m.AggregateID} {
		if !have[i] {
			e.Invalid = &EventError{EventID: e.ID, Origin: origin, Err: fmt.Errorf("column %q is missing or NULL", name)}
			e.onlyNullKey = i == 2 && e.AggregateIDNull
			break
		}
	}
	return e
}

// LogicalMessage is where an event that came from a logical decoding
// message came from, and what its content said of the payload's kind.
type LogicalMessage struct {
	// Prefix is the message's prefix.
	Prefix string
	// LSN is the message's position in the WAL.
	LSN uint64
	// PayloadText: the content's payload was a JSON string, which
	// Event.Payload holds unquoted, as a text column would; otherwise
	// Event.Payload is the JSON value's text, as a json column would.
	PayloadText bool
}
