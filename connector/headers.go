package connector

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// MaxHeadersColumn bounds the routing.headers_column value the relay turns
// into headers: headers are metadata, and a row is input; 64 KiB is far
// more than any trace context and tenant tags need, and well under a
// record's limit.
const MaxHeadersColumn = 64 << 10

// withHeaders adds to m the headers of e's routing.headers_column, when
// the routing has one. A value that cannot be headers is the event's
// [*EventError].
func (r Routing) withHeaders(e *Event, m Message) (Message, error) {
	if r.HeadersColumn == "" {
		return m, nil
	}
	var col *Column
	for i := range e.Extra {
		if e.Extra[i].Name == r.HeadersColumn {
			col = &e.Extra[i]
			break
		}
	}
	if col == nil && e.Message != nil {
		// A logical decoding message's headers member is optional
		// (docs/outbox-messages.md): one left out adds none, as a NULL
		// column does. A row has every column of its table, so a column
		// it lacks is a configuration that names the wrong one.
		return m, nil
	}
	if col == nil {
		return Message{}, &EventError{EventID: e.ID, Origin: e.Origin, Err: fmt.Errorf("routing.headers_column %q is not a column of the row (nor may it be one of outbox.columns); add the column or correct the key", r.HeadersColumn)}
	}
	if col.Null {
		return m, nil
	}
	hs, err := HeadersFromJSON(col.Value)
	if err != nil {
		return Message{}, &EventError{EventID: e.ID, Origin: e.Origin, Err: fmt.Errorf("column %q (routing.headers_column): %w", r.HeadersColumn, err)}
	}
	// A new slice: m's headers share their backing array with its key.
	out := make([]Header, 0, len(m.Headers)+len(hs))
	m.Headers = append(append(out, m.Headers...), hs...)
	return m, nil
}

// HeadersFromJSON turns a JSON object into headers, one per entry in the
// order written: a string value is the header's value as is, null a null
// header, any other value its JSON text. Anything but an object of at
// most [MaxHeadersColumn] bytes is an error saying what was found.
func HeadersFromJSON(text []byte) ([]Header, error) {
	if len(text) > MaxHeadersColumn {
		return nil, fmt.Errorf("headers object is %d bytes, over the %d the relay takes; keep large data in the payload", len(text), MaxHeadersColumn)
	}
	if hs, ok := stringHeaders(text); ok {
		return hs, nil
	}
	return decodeHeaders(text)
}

// decodeHeaders is HeadersFromJSON for any JSON text.
func decodeHeaders(text []byte) ([]Header, error) {
	d := json.NewDecoder(bytes.NewReader(text))
	d.UseNumber()
	tok, err := d.Token()
	if err != nil {
		return nil, fmt.Errorf("headers are not JSON (%w): %q", err, Shorten(string(text), 100))
	}
	if delim, ok := tok.(json.Delim); !ok || delim != '{' {
		return nil, fmt.Errorf("headers are not a JSON object but %q; write an object of header names to values", Shorten(string(text), 100))
	}
	var hs []Header
	for d.More() {
		kt, err := d.Token()
		if err != nil {
			return nil, fmt.Errorf("headers object: %w", err)
		}
		var raw json.RawMessage
		if err := d.Decode(&raw); err != nil {
			return nil, fmt.Errorf("headers object, value of %q: %w", kt, err)
		}
		h := Header{Key: kt.(string)}
		switch raw[0] {
		case '"':
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return nil, fmt.Errorf("headers object, value of %q: %w", h.Key, err)
			}
			h.Value = []byte(s)
		case 'n':
			// A null header, as a NULL column is elsewhere.
		default:
			var b bytes.Buffer
			if err := json.Compact(&b, raw); err != nil {
				return nil, fmt.Errorf("headers object, value of %q: %w", h.Key, err)
			}
			h.Value = b.Bytes()
		}
		hs = append(hs, h)
	}
	if _, err := d.Token(); err != nil {
		return nil, fmt.Errorf("headers object: %w", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("headers column holds more than the one JSON object, or text after it; write one object")
	}
	return hs, nil
}

// stringHeaders reads the common headers column, an object of plain
// strings (a trace context, tags), without encoding/json's decoder, which
// costs 20 allocations for one entry. ok is false for anything else
// (escapes, control characters, bytes that are not UTF-8, values that are
// not strings, malformed text), which decodeHeaders then reads as it
// reads everything: the two agree wherever this one answers
// (FuzzHeadersFromJSON).
func stringHeaders(text []byte) (hs []Header, ok bool) {
	i := skipSpace(text, 0)
	if i == len(text) || text[i] != '{' {
		return nil, false
	}
	i = skipSpace(text, i+1)
	if i < len(text) && text[i] == '}' {
		return nil, skipSpace(text, i+1) == len(text)
	}
	for {
		var k, v []byte
		if k, i, ok = plainString(text, i); !ok {
			return nil, false
		}
		i = skipSpace(text, i)
		if i == len(text) || text[i] != ':' {
			return nil, false
		}
		if v, i, ok = plainString(text, skipSpace(text, i+1)); !ok {
			return nil, false
		}
		hs = append(hs, Header{Key: string(k), Value: append([]byte{}, v...)})
		i = skipSpace(text, i)
		if i == len(text) {
			return nil, false
		}
		switch text[i] {
		case ',':
			i = skipSpace(text, i+1)
		case '}':
			return hs, skipSpace(text, i+1) == len(text)
		default:
			return nil, false
		}
	}
}

// plainString reads a JSON string at text[i] that needs no decoding (no
// escape, no control character, valid UTF-8), returning its contents and
// the index after its closing quote.
func plainString(text []byte, i int) (s []byte, end int, ok bool) {
	if i >= len(text) || text[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(text); j++ {
		switch c := text[j]; {
		case c == '"':
			s = text[i+1 : j]
			return s, j + 1, utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

func skipSpace(text []byte, i int) int {
	for i < len(text) && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r') {
		i++
	}
	return i
}
