package pgoutput

import (
	"encoding/hex"
	"fmt"

	"github.com/jackc/pglogrepl"
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

// DecodeBytea decodes bytea's text output: the hex format (`\x` followed by
// hex digits), or the escape format when the server sets bytea_output =
// escape.
func DecodeBytea(text []byte) ([]byte, error) {
	return AppendBytea(make([]byte, 0, len(text)), text)
}

// AppendBytea appends the bytes that bytea's text output text stands for to
// dst. They are never more than len(text).
func AppendBytea(dst, text []byte) ([]byte, error) {
	if len(text) >= 2 && text[0] == '\\' && text[1] == 'x' {
		at := len(dst)
		dst = append(dst, make([]byte, hex.DecodedLen(len(text)-2))...)
		if _, err := hex.Decode(dst[at:], text[2:]); err != nil {
			return nil, fmt.Errorf("bytea value: %w", err)
		}
		return dst, nil
	}
	for i := 0; i < len(text); i++ {
		if text[i] != '\\' {
			dst = append(dst, text[i])
			continue
		}
		switch {
		case i+1 < len(text) && text[i+1] == '\\':
			dst = append(dst, '\\')
			i++
		case i+3 < len(text) && isOctal(text[i+1]) && isOctal(text[i+2]) && isOctal(text[i+3]):
			dst = append(dst, (text[i+1]-'0')<<6|(text[i+2]-'0')<<3|(text[i+3]-'0'))
			i += 3
		default:
			return nil, fmt.Errorf("bytea value: bad escape at byte %d", i)
		}
	}
	return dst, nil
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
