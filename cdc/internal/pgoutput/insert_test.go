package pgoutput

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
)

// col is one column of a tuple as pgoutput sends it.
type col struct {
	kind byte
	data string
}

func text(s string) col { return col{kindText, s} }

var null = col{kind: kindNull}

// insertMsg encodes an Insert message of protocol version 1.
func insertMsg(rel uint32, cols ...col) []byte {
	b := []byte{'I'}
	b = binary.BigEndian.AppendUint32(b, rel)
	b = append(b, 'N')
	b = binary.BigEndian.AppendUint16(b, uint16(len(cols)))
	for _, c := range cols {
		b = append(b, c.kind)
		if c.kind == kindText || c.kind == kindBinary {
			b = binary.BigEndian.AppendUint32(b, uint32(len(c.data)))
			b = append(b, c.data...)
		}
	}
	return b
}

// outboxRelation is Debezium's outbox table with a bytea column beside.
func outboxRelation() *Relation {
	return &Relation{ID: 16384, Namespace: "public", Name: "outbox", Columns: []Column{
		{"id", 2950}, {"aggregatetype", 1043}, {"aggregateid", 1043}, {"type", 1043}, {"payload", 3802}, {"raw", ByteaOID},
	}}
}

func TestDecodeInsert(t *testing.T) {
	rel := outboxRelation()
	for _, tc := range []struct {
		name      string
		msg       []byte
		want      []string // "<NULL>" for NULL
		malformed bool
		rowErr    string
	}{
		{
			name: "text, NULL and bytea",
			msg:  insertMsg(16384, text("6f1c..."), text("order"), text("o-1"), null, text(`{"a": 1}`), text(`\x00ff`)),
			want: []string{"6f1c...", "order", "o-1", "<NULL>", `{"a": 1}`, "\x00\xff"},
		},
		{
			name: "empty is not NULL",
			msg:  insertMsg(16384, text("i"), text("order"), text(""), text("t"), text(""), text(`\x`)),
			want: []string{"i", "order", "", "t", "", ""},
		},
		{
			name: "bytea escape format",
			msg:  insertMsg(16384, text("i"), text("a"), text("b"), text("t"), null, text(`a\\\001`)),
			want: []string{"i", "a", "b", "t", "<NULL>", "a\\\x01"},
		},
		{
			name: "binary kind is taken as is",
			msg:  insertMsg(16384, text("i"), text("a"), text("b"), text("t"), null, col{kindBinary, "\x01\x02"}),
			want: []string{"i", "a", "b", "t", "<NULL>", "\x01\x02"},
		},
		{name: "too few columns", msg: insertMsg(16384, text("i")), rowErr: "tuple has 1 columns, relation has 6"},
		{name: "unchanged TOAST", msg: insertMsg(16384, text("i"), text("a"), text("b"), text("t"), col{kind: kindUnchangedToast}, null), rowErr: "unchanged TOAST"},
		{name: "bad bytea", msg: insertMsg(16384, text("i"), text("a"), text("b"), text("t"), null, text(`\x0`)), rowErr: `column "raw"`},
		{name: "unknown kind", msg: insertMsg(16384, text("i"), text("a"), text("b"), text("t"), col{kind: 'z'}, null), malformed: true},
		{name: "not an insert", msg: []byte("B\x00\x00\x00\x01N\x00\x00"), malformed: true},
		{name: "short", msg: []byte("I\x00"), malformed: true},
		{name: "truncated value", msg: insertMsg(16384, text("i"), text("a"), text("b"), text("t"), null, text("xy"))[:50], malformed: true},
		{name: "trailing bytes", msg: append(insertMsg(16384, text("i"), text("a"), text("b"), text("t"), null, null), 0), malformed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := bytes.Clone(tc.msg)
			cols, err := rel.DecodeInsert(msg, nil)
			switch {
			case tc.malformed:
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("DecodeInsert = %v, want an ErrMalformed", err)
				}
				return
			case tc.rowErr != "":
				if err == nil || errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.rowErr) {
					t.Fatalf("DecodeInsert = %v, want a row error with %q", err, tc.rowErr)
				}
				return
			case err != nil:
				t.Fatalf("DecodeInsert: %v", err)
			}
			// The values are copies: the connection reuses the buffer.
			for i := range msg {
				msg[i] = '#'
			}
			if len(cols) != len(tc.want) {
				t.Fatalf("got %d columns, want %d", len(cols), len(tc.want))
			}
			for i, c := range cols {
				if c.Name != rel.Columns[i].Name || c.Type != rel.Columns[i].Type {
					t.Errorf("column %d is %s/%d, want %s/%d", i, c.Name, c.Type, rel.Columns[i].Name, rel.Columns[i].Type)
				}
				got := string(c.Value)
				if c.Null {
					got = "<NULL>"
					if c.Value != nil {
						t.Errorf("column %s: NULL with value %q", c.Name, c.Value)
					}
				} else if c.Value == nil {
					t.Errorf("column %s: nil value but not NULL", c.Name)
				}
				if got != tc.want[i] {
					t.Errorf("column %s = %q, want %q", c.Name, got, tc.want[i])
				}
				if cap(c.Value) != len(c.Value) {
					t.Errorf("column %s: cap %d > len %d, an append would overwrite the next value", c.Name, cap(c.Value), len(c.Value))
				}
			}
		})
	}
}

// TestDecodeInsertReusesColumns checks that a caller's slice is reused and
// that decoding the next row leaves the earlier row's values alone.
func TestDecodeInsertReusesColumns(t *testing.T) {
	rel := outboxRelation()
	first, err := rel.DecodeInsert(insertMsg(1, text("a"), text("b"), text("c"), text("d"), text("e"), null), nil)
	if err != nil {
		t.Fatal(err)
	}
	payload := first[4].Value
	second, err := rel.DecodeInsert(insertMsg(1, text("v"), text("w"), text("x"), text("y"), text("z"), null), first)
	if err != nil {
		t.Fatal(err)
	}
	if &second[0] != &first[0] {
		t.Error("the columns slice was not reused")
	}
	if string(payload) != "e" {
		t.Errorf("an earlier row's value changed to %q", payload)
	}
}

// FuzzDecodeInsert checks DecodeInsert against pglogrepl's parser: on any
// input it does not panic, and where pglogrepl reads an insert of text and
// NULL columns, both read the same values.
func FuzzDecodeInsert(f *testing.F) {
	f.Add(insertMsg(16384, text("6f1c"), text("order"), text("o-1"), null, text(`{"a": 1}`), text("x")))
	f.Add(insertMsg(16384, text(""), text(""), text(""), text(""), text(""), text("")))
	f.Add(insertMsg(7, null))
	f.Fuzz(func(t *testing.T, msg []byte) {
		rel := outboxRelation()
		rel.Columns[5].Type = 25 // text, so that both parsers keep the bytes as they are
		cols, err := rel.DecodeInsert(msg, nil)
		if _, ierr := InsertRelation(msg); ierr != nil {
			if err == nil {
				t.Fatalf("DecodeInsert read %x, which is no insert", msg)
			}
			return // and pglogrepl may hang on other message types
		}
		if err != nil && !strings.Contains(err.Error(), "after the last column") {
			// Lengths may be past the end: pglogrepl would allocate what
			// they claim, gigabytes, before noticing.
			return
		}

		ins, isInsert := parseWithPglogrepl(msg)
		if !isInsert || ins.Tuple == nil || len(ins.Tuple.Columns) != len(rel.Columns) {
			return
		}
		plain := true
		for _, c := range ins.Tuple.Columns {
			plain = plain && (c.DataType == kindText || c.DataType == kindNull)
		}
		if !plain {
			return
		}
		if err != nil {
			// pglogrepl ignores bytes after the tuple; DecodeInsert does not.
			if errors.Is(err, ErrMalformed) {
				return
			}
			t.Fatalf("pglogrepl reads %x, DecodeInsert says %v", msg, err)
		}
		for i, c := range ins.Tuple.Columns {
			if (c.DataType == kindNull) != cols[i].Null || string(c.Data) != string(cols[i].Value) {
				t.Fatalf("column %d: pglogrepl %q (%c), DecodeInsert %q (null %v)", i, c.Data, c.DataType, cols[i].Value, cols[i].Null)
			}
		}
	})
}

// parseWithPglogrepl reads msg with pglogrepl, which panics on some broken
// input (an empty message, for one).
func parseWithPglogrepl(msg []byte) (ins *pglogrepl.InsertMessage, ok bool) {
	defer func() {
		if recover() != nil {
			ins, ok = nil, false
		}
	}()
	m, err := pglogrepl.Parse(msg)
	if err != nil {
		return nil, false
	}
	ins, ok = m.(*pglogrepl.InsertMessage)
	return ins, ok
}
