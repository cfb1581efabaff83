package pgoutput

import (
	"encoding/hex"
	"fmt"

	"github.com/jackc/pglogrepl"

	"github.com/outboxrelay/outboxrelay/connector"
)

// ByteaOID is the type OID of bytea, whose text form is hex to undo.
const ByteaOID = 17

// Relation is what the stream said about one table.
type Relation struct {
	ID        uint32
	Namespace string
	Name      string
	Columns   []Column
}

// Column is a column of a relation.
type Column struct {
	Name string
	Type uint32
}

// Relations caches relations by OID. PostgreSQL sends a relation message
// before the first change of a table in each session and again whenever the
// table's definition changes, so the cache holds the tables of the
// publication and no more.
type Relations map[uint32]*Relation

// Add records m, replacing what was known of its table.
func (rs Relations) Add(m *pglogrepl.RelationMessage) *Relation {
	r := &Relation{ID: m.RelationID, Namespace: m.Namespace, Name: m.RelationName, Columns: make([]Column, len(m.Columns))}
	for i, c := range m.Columns {
		r.Columns[i] = Column{Name: c.Name, Type: c.DataType}
	}
	rs[m.RelationID] = r
	return r
}

// Decode turns a tuple of relation r into columns. Text values are copied,
// since the message buffer is reused; bytea is decoded from its hex form.
func (r *Relation) Decode(t *pglogrepl.TupleData) ([]connector.Column, error) {
	if t == nil {
		return nil, fmt.Errorf("table %s.%s: change without a tuple", r.Namespace, r.Name)
	}
	if len(t.Columns) != len(r.Columns) {
		return nil, fmt.Errorf("table %s.%s: tuple has %d columns, relation has %d", r.Namespace, r.Name, len(t.Columns), len(r.Columns))
	}
	cols := make([]connector.Column, len(r.Columns))
	for i, tc := range t.Columns {
		rc := r.Columns[i]
		c := connector.Column{Name: rc.Name, Type: rc.Type}
		switch tc.DataType {
		case pglogrepl.TupleDataTypeNull:
			c.Null = true
		case pglogrepl.TupleDataTypeToast:
			// Only updates carry unchanged TOAST values; an insert has them all.
			return nil, fmt.Errorf("table %s.%s: column %q came as an unchanged TOAST value", r.Namespace, r.Name, rc.Name)
		case pglogrepl.TupleDataTypeText:
			if rc.Type == ByteaOID {
				v, err := DecodeBytea(tc.Data)
				if err != nil {
					return nil, fmt.Errorf("table %s.%s: column %q: %w", r.Namespace, r.Name, rc.Name, err)
				}
				c.Value = v
			} else {
				c.Value = append([]byte(nil), tc.Data...)
			}
		case pglogrepl.TupleDataTypeBinary:
			c.Value = append([]byte(nil), tc.Data...)
		default:
			return nil, fmt.Errorf("table %s.%s: column %q has unknown tuple data kind %q", r.Namespace, r.Name, rc.Name, tc.DataType)
		}
		cols[i] = c
	}
	return cols, nil
}

// DecodeBytea decodes bytea's text output: the hex format (`\x` followed by
// hex digits), or the escape format when the server sets bytea_output =
// escape.
func DecodeBytea(text []byte) ([]byte, error) {
	if len(text) >= 2 && text[0] == '\\' && text[1] == 'x' {
		out := make([]byte, hex.DecodedLen(len(text)-2))
		if _, err := hex.Decode(out, text[2:]); err != nil {
			return nil, fmt.Errorf("bytea value: %w", err)
		}
		return out, nil
	}
	out := make([]byte, 0, len(text))
	for i := 0; i < len(text); i++ {
		if text[i] != '\\' {
			out = append(out, text[i])
			continue
		}
		switch {
		case i+1 < len(text) && text[i+1] == '\\':
			out = append(out, '\\')
			i++
		case i+3 < len(text) && isOctal(text[i+1]) && isOctal(text[i+2]) && isOctal(text[i+3]):
			out = append(out, (text[i+1]-'0')<<6|(text[i+2]-'0')<<3|(text[i+3]-'0'))
			i += 3
		default:
			return nil, fmt.Errorf("bytea value: bad escape at byte %d", i)
		}
	}
	return out, nil
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
