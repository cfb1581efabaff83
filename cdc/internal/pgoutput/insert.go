package pgoutput

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/outboxrelay/outboxrelay/connector"
)

// ErrMalformed marks a message that does not follow the pgoutput protocol:
// the stream is broken, not the row.
var ErrMalformed = errors.New("malformed pgoutput message")

// Tuple column kinds (pgoutput's TupleData).
const (
	kindNull           = 'n'
	kindUnchangedToast = 'u'
	kindText           = 't'
	kindBinary         = 'b'
)

// InsertRelation returns the relation OID of an Insert message (protocol
// version 1: 'I', the OID, 'N', the new tuple).
func InsertRelation(msg []byte) (uint32, error) {
	if len(msg) < 8 || msg[0] != 'I' || msg[5] != 'N' {
		return 0, fmt.Errorf("%w: insert message %x...", ErrMalformed, msg[:min(len(msg), 8)])
	}
	return binary.BigEndian.Uint32(msg[1:5]), nil
}

// DecodeInsert decodes the new tuple of an Insert message of relation r
// into columns, appended to cols[:0] so that a caller can reuse one slice.
//
// This is the hot path of the CDC source, one call per event, so it reads
// the message in place instead of through pglogrepl.Parse, which allocates
// a message, a tuple, a struct and a copy per column. The values are copied
// out of msg, whose buffer the connection reuses, all into one allocation;
// bytea is decoded from its hex (or escape) text form. An empty value is
// empty, not nil; only NULL is nil.
//
// An error wrapping [ErrMalformed] means msg itself is broken; any other
// error is about the row (a column count that does not match the relation,
// an unchanged TOAST value).
func (r *Relation) DecodeInsert(msg []byte, cols []connector.Column) ([]connector.Column, error) {
	if _, err := InsertRelation(msg); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(msg[6:8]))
	if n != len(r.Columns) {
		return nil, fmt.Errorf("table %s.%s: tuple has %d columns, relation has %d", r.Namespace, r.Name, n, len(r.Columns))
	}
	if cap(cols) < n {
		cols = make([]connector.Column, n)
	}
	cols = cols[:n]

	// First pass: find each value in msg and add up their sizes. kinds
	// stays on the stack for tables of up to 32 columns.
	var kindBuf [32]byte
	kinds := kindBuf[:0]
	pos, size := 8, 0
	for i, rc := range r.Columns {
		if pos >= len(msg) {
			return nil, fmt.Errorf("%w: insert message ends before column %d of %d", ErrMalformed, i+1, n)
		}
		kind := msg[pos]
		pos++
		kinds = append(kinds, kind)
		c := connector.Column{Name: rc.Name, Type: rc.Type}
		switch kind {
		case kindNull:
			c.Null = true
		case kindUnchangedToast:
			// Only updates carry unchanged TOAST values; an insert has them all.
			return nil, fmt.Errorf("table %s.%s: column %q came as an unchanged TOAST value", r.Namespace, r.Name, rc.Name)
		case kindText, kindBinary:
			if len(msg)-pos < 4 {
				return nil, fmt.Errorf("%w: insert message ends in the length of column %d", ErrMalformed, i+1)
			}
			l := binary.BigEndian.Uint32(msg[pos:])
			pos += 4
			if uint64(l) > uint64(len(msg)-pos) {
				return nil, fmt.Errorf("%w: column %d says %d bytes, the message has %d left", ErrMalformed, i+1, l, len(msg)-pos)
			}
			c.Value = msg[pos : pos+int(l)]
			pos += int(l)
			size += int(l)
		default:
			return nil, fmt.Errorf("%w: table %s.%s: column %q has unknown tuple data kind %q", ErrMalformed, r.Namespace, r.Name, rc.Name, kind)
		}
		cols[i] = c
	}
	if pos != len(msg) {
		return nil, fmt.Errorf("%w: %d bytes after the last column of an insert", ErrMalformed, len(msg)-pos)
	}

	// Second pass: copy the values out. Decoded bytea is never longer than
	// its text, so buf never grows, and the values' slices stay valid.
	buf := make([]byte, 0, size)
	for i := range cols {
		c := &cols[i]
		if c.Null {
			continue
		}
		at := len(buf)
		if kinds[i] == kindText && c.Type == ByteaOID {
			var err error
			if buf, err = AppendBytea(buf, c.Value); err != nil {
				return nil, fmt.Errorf("table %s.%s: column %q: %w", r.Namespace, r.Name, c.Name, err)
			}
		} else {
			buf = append(buf, c.Value...)
		}
		c.Value = buf[at:len(buf):len(buf)]
	}
	return cols, nil
}
