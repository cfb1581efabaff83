package cdc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxrelay/outboxrelay/connector"
)

// A table-less outbox: the application writes each event into the WAL
// with pg_logical_emit_message(true, prefix, content), in its business
// transaction, and the source relays the messages whose prefix is one of
// cdc.message_prefixes. pgoutput sends a transactional message inside its
// transaction, in WAL order with the transaction's inserts, and only once
// the transaction commits (protocol version 1), so the events of one
// transaction, rows and messages, go on in the order they were written,
// and the position machinery treats them alike.
//
// The content is one JSON object (docs/outbox-messages.md):
//
//	{"id": "…", "aggregatetype": "…", "aggregateid": "…", "type": "…",
//	 "payload": <any JSON value>, "headers": {"name": "value", …}}
//
// The keys are outbox.columns' names (by default the ones above), matched
// exactly, as Debezium's outbox router reads the fields that its
// DecodeLogicalDecodingMessageContent transform makes of the content.
// id, aggregatetype and aggregateid are required strings (or numbers,
// taken as their text); type is a string or null; payload is any JSON
// value: a string is the payload's text, any other value its JSON text;
// headers, when present, is an object of strings; left out, the event has
// no headers column, which routing.headers_column takes as no headers, as
// it takes a NULL column. Every other key is an extra column of the
// event, as a row's other columns are.

// headersKey is the content's key for the event's headers.
const headersKey = "headers"

// PostgreSQL type OIDs of an extra column made from a content key: its
// text for a JSON string, its JSON text for any other value.
const (
	oidText  = 25
	oidJSON  = 114
	oidJSONB = 3802
)

// message handles a logical decoding message: an event when it is
// transactional and its prefix is one of cdc.message_prefixes, else
// nothing. The heartbeat's, and any other application's, are not ours.
func (st *stream) message(ctx context.Context, m *pglogrepl.LogicalDecodingMessage) error {
	if !slices.Contains(st.src.cfg.MessagePrefixes, m.Prefix) {
		return nil
	}
	if !m.Transactional || !st.txn.open {
		// Written whether or not its transaction commits, and sent at
		// once, outside any transaction: not an outbox event, which must
		// commit with the business change. Relaying it could publish an
		// event of a transaction that rolled back.
		n := st.src.count.skipped.Add(1)
		if time.Since(st.warned.message) >= time.Minute {
			st.warned.message = time.Now()
			st.src.log.Error("skipping a non-transactional logical decoding message with an outbox prefix: it is written even when its transaction rolls back, so it is not an outbox event; write events with pg_logical_emit_message(true, prefix, content)",
				"prefix", m.Prefix, "lsn", m.LSN.String(), "skipped_total", n)
		}
		return nil
	}
	if st.txn.skip {
		return nil
	}
	at := &connector.LogicalMessage{Prefix: m.Prefix, LSN: uint64(m.LSN)}
	origin := fmt.Sprintf("%s, message %q at %s", st.txn.origin, m.Prefix, m.LSN)
	e := messageEvent(st.src.cfg.Columns, m.Content, at, st.txn.commitTime, origin)
	e.Stages = st.txn.stages
	return st.add(ctx, e)
}

// messageEvent builds the event of a message's content; a content that is
// not an event is the event's Invalid, naming the problem.
func messageEvent(cols connector.ColumnMap, content []byte, at *connector.LogicalMessage, commit time.Time, origin string) connector.Event {
	e := connector.Event{CommitTime: commit, Origin: origin, Message: at}
	if err := fillMessageEvent(&e, cols, content); err != nil {
		// The dead letter record carries the whole content, so that
		// nothing of the message is lost.
		e.Payload, e.Extra = slices.Clone(content), nil
		e.Invalid = &connector.EventError{EventID: e.ID, Origin: origin,
			Err: fmt.Errorf("logical decoding message %q: %w; see docs/outbox-messages.md for the content's format", at.Prefix, err)}
	}
	return e
}

func fillMessageEvent(e *connector.Event, cols connector.ColumnMap, content []byte) error {
	trimmed := bytes.TrimLeft(content, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return fmt.Errorf("the content is not a JSON object: %q", connector.Shorten(string(content), 100))
	}
	// Keys are matched exactly: encoding/json's struct decoding would
	// take "ID" for "id", which Debezium's router does not.
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(content, &obj); err != nil {
		return fmt.Errorf("the content is not valid JSON: %w", err)
	}
	var errs []error
	text := func(key string, required bool) (string, bool) {
		raw, ok := obj[key]
		if !ok || isNull(raw) {
			if required {
				errs = append(errs, fmt.Errorf("%q is missing or null", key))
			}
			return "", false
		}
		switch raw[0] {
		case '"':
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				errs = append(errs, fmt.Errorf("%q: %w", key, err))
			}
			return s, true
		case '{', '[', 't', 'f':
			errs = append(errs, fmt.Errorf("%q is %s, not a string", key, connector.Shorten(string(raw), 100)))
			return "", false
		}
		return string(raw), true // a number, as its text
	}
	e.ID, _ = text(cols.ID, true)
	e.AggregateType, _ = text(cols.AggregateType, true)
	e.AggregateID, _ = text(cols.AggregateID, true)
	var hasType bool
	e.Type, hasType = text(cols.Type, false)
	e.TypeNull = !hasType
	if raw, ok := obj[cols.Payload]; ok && !isNull(raw) {
		if raw[0] == '"' {
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				errs = append(errs, fmt.Errorf("%q: %w", cols.Payload, err))
			}
			e.Payload, e.Message.PayloadText = []byte(s), true
		} else {
			e.Payload = slices.Clone(raw)
		}
	}
	if raw, ok := obj[headersKey]; ok && !isNull(raw) {
		var h map[string]string
		if err := json.Unmarshal(raw, &h); err != nil {
			errs = append(errs, fmt.Errorf("%q must be an object of strings: %s", headersKey, connector.Shorten(string(raw), 100)))
		}
	}
	// The other keys are extra columns, in a stable order: a JSON object's
	// order is not kept by the map, and Debezium's additional fields are
	// read by name.
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		switch k {
		case cols.ID, cols.AggregateType, cols.AggregateID, cols.Type, cols.Payload:
			continue
		}
		raw := obj[k]
		c := connector.Column{Name: k, Type: oidJSON}
		switch {
		case isNull(raw):
			c.Null = true
		case raw[0] == '"':
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				errs = append(errs, fmt.Errorf("%q: %w", k, err))
			}
			c.Type, c.Value = oidText, []byte(s)
		default:
			c.Value = slices.Clone(raw)
		}
		if k == headersKey {
			c.Type = oidJSONB
		}
		e.Extra = append(e.Extra, c)
	}
	return errors.Join(errs...)
}

func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }
