package pgident

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxLen is the longest name PostgreSQL keeps, in bytes (NAMEDATALEN-1).
// It silently cuts a longer one, which then names another object.
const MaxLen = 63

// Check reports why name cannot serve as a PostgreSQL name as written, or
// nil. The error reads on from the quoted name, for [CheckKey].
//
// It refuses what PostgreSQL would not keep (a NUL, invalid UTF-8, more
// than MaxLen bytes) and, although PostgreSQL keeps them inside quotes,
// characters that end or rearrange a line: control characters (a line
// feed or carriage return would end a -- comment, and psql would run what
// follows), Unicode line and paragraph separators, and bidirectional
// formatting characters, which make printed SQL read other than it runs.
func Check(name string) error {
	if name == "" {
		return errors.New("is empty; give a name")
	}
	if err := checkChars(name); err != nil {
		return err
	}
	if len(name) > MaxLen {
		return fmt.Errorf("is %d bytes long, over PostgreSQL's %d-byte limit on names: it would keep only %q and so name another object; shorten it", len(name), MaxLen, cut(name, MaxLen))
	}
	return nil
}

// checkChars is Check's test of each character.
func checkChars(name string) error {
	for i, r := range name {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(name[i:]); size == 1 {
				return fmt.Errorf("is not valid UTF-8 (byte %#x at byte %d), which PostgreSQL refuses; write the name in UTF-8", name[i], i)
			}
		}
		if r == 0 {
			return fmt.Errorf("contains a NUL byte (at byte %d), which no PostgreSQL name can hold; remove it", i)
		}
		if what := unsafe(r); what != "" {
			return fmt.Errorf("contains %s (%sU+%04X at byte %d), which could end or rearrange a line of the SQL the relay prints and runs; remove it", what, named[r], r, i)
		}
	}
	return nil
}

// CheckKey checks value with [Check] and reports the first problem as the
// configuration key, the value, quoted, and what is wrong. For a value
// made of several names, schema.table, pass the names as parts: each is
// checked for its length, and the value as a whole for its characters.
func CheckKey(key, value string, parts ...string) error {
	if len(parts) == 0 {
		if err := Check(value); err != nil {
			return fmt.Errorf("%s: %q %w", key, value, err)
		}
		return nil
	}
	if err := checkChars(value); err != nil {
		return fmt.Errorf("%s: %q %w", key, value, err)
	}
	for _, p := range parts {
		if err := Check(p); err != nil {
			return fmt.Errorf("%s: %q: %q %w", key, value, p, err)
		}
	}
	return nil
}

// unsafe names the kind of r when it may not stand in a name, else "".
func unsafe(r rune) string {
	switch {
	case unicode.IsControl(r):
		return "a control character"
	case r == '\u2028' || r == '\u2029':
		return "a Unicode line or paragraph separator"
	case isBidi(r):
		return "a bidirectional formatting character"
	}
	return ""
}

// named are the control characters a user may not recognise by number.
var named = map[rune]string{'\t': "a tab, ", '\n': "a line feed, ", '\v': "a vertical tab, ", '\f': "a form feed, ", '\r': "a carriage return, ", 0x1b: "an escape, ", 0x7f: "a delete, "}

// isBidi reports the characters that reorder text on display (the
// "Trojan Source" set, CVE-2021-42574).
func isBidi(r rune) bool {
	switch {
	case r == '\u061C', r == '\u200E', r == '\u200F':
		return true
	case r >= '\u202A' && r <= '\u202E':
		return true
	case r >= '\u2066' && r <= '\u2069':
		return true
	}
	return false
}

// Quote writes a name, or schema.name with several parts, as a quoted SQL
// identifier. A name [Check] accepts comes out as pgx.Identifier writes it
// ("na""me"). One with a character Check refuses is written in
// PostgreSQL's Unicode escape form, U&"a\000Ab", so that the result never
// holds a line break or other control character and can stand anywhere,
// a -- comment included, as one token. A NUL is written \0000, which
// PostgreSQL refuses, rather than dropped (as pgx does), which would name
// another object.
func Quote(parts ...string) string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('.')
		}
		quote(&b, p)
	}
	return b.String()
}

func quote(b *strings.Builder, name string) {
	if !needsEscape(name) {
		b.WriteByte('"')
		b.WriteString(strings.ReplaceAll(name, `"`, `""`))
		b.WriteByte('"')
		return
	}
	b.WriteString(`U&"`)
	for i := 0; i < len(name); {
		r, size := utf8.DecodeRuneInString(name[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			// Left as it is: PostgreSQL refuses invalid UTF-8, and the
			// byte is no line break.
			b.WriteByte(name[i])
		case r == 0 || unsafe(r) != "":
			fmt.Fprintf(b, `\%04X`, r)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '"':
			b.WriteString(`""`)
		default:
			b.WriteString(name[i : i+size])
		}
		i += size
	}
	b.WriteByte('"')
}

// Literal writes s as an SQL string literal. One with a backslash, or a
// character [Check] refuses, is an E'...' string: its meaning does not
// depend on standard_conforming_strings (with that off, a backslash in a
// plain '...' string would escape the closing quote), and the refused
// characters are written as \uXXXX escapes, so that, like [Quote], the
// result holds no line break or other control character.
func Literal(s string) string {
	q := strings.ReplaceAll(s, "'", "''")
	if !strings.Contains(s, `\`) && !needsEscape(s) {
		return "'" + q + "'"
	}
	var b strings.Builder
	b.WriteString("E'")
	for i := 0; i < len(q); {
		r, size := utf8.DecodeRuneInString(q[i:])
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == 0 || unsafe(r) != "":
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			// Invalid UTF-8 too, as it is, for PostgreSQL to refuse.
			b.WriteString(q[i : i+size])
		}
		i += size
	}
	b.WriteByte('\'')
	return b.String()
}

// needsEscape reports a character [Quote] and [Literal] write escaped.
func needsEscape(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return r == 0 || unsafe(r) != "" }) >= 0
}

// WithSuffix is name+suffix, with name cut so that the whole fits in
// MaxLen bytes, always between two characters: a name PostgreSQL keeps
// whole, for the objects the relay names after a table (its indexes).
// A suffix longer than MaxLen is itself cut.
func WithSuffix(name, suffix string) string {
	if len(name)+len(suffix) <= MaxLen {
		return name + suffix
	}
	if len(suffix) >= MaxLen {
		return cut(suffix, MaxLen)
	}
	return cut(name, MaxLen-len(suffix)) + suffix
}

// cut is the longest prefix of s of at most n bytes that ends between two
// characters, as PostgreSQL cuts a long name (pg_mbcliplen).
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
