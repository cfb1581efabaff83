package debezium

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Properties is a flat configuration: keys in the order they first
// appeared, and their values (the last one written wins, as in Java).
type Properties struct {
	keys   []string
	values map[string]string
}

// NewProperties returns an empty set.
func NewProperties() *Properties { return &Properties{values: map[string]string{}} }

// Set sets key to value, keeping key's first position.
func (p *Properties) Set(key, value string) {
	if _, ok := p.values[key]; !ok {
		p.keys = append(p.keys, key)
	}
	p.values[key] = value
}

// Get returns the value of key.
func (p *Properties) Get(key string) (string, bool) {
	v, ok := p.values[key]
	return v, ok
}

// Keys returns the keys in the order they first appeared.
func (p *Properties) Keys() []string { return append([]string(nil), p.keys...) }

// Len is the number of keys.
func (p *Properties) Len() int { return len(p.keys) }

// ParseProperties reads the format of java.util.Properties.load: key and
// value separated by '=', ':' or whitespace; '#' and '!' start comment
// lines; a line ending in an odd number of backslashes continues on the
// next, whose leading whitespace is dropped; \t \n \r \f and \uXXXX are
// escapes and a backslash before any other character stands for that
// character. Java reads such files as ISO-8859-1 (Kafka Connect) or UTF-8
// (Debezium Server); this reads UTF-8 and falls back to ISO-8859-1 when the
// file is not valid UTF-8.
func ParseProperties(data []byte) (*Properties, error) {
	text := string(data)
	if !utf8.ValidString(text) {
		var b strings.Builder
		for _, c := range data {
			b.WriteRune(rune(c))
		}
		text = b.String()
	}
	text = strings.TrimPrefix(text, "\uFEFF")
	p := NewProperties()
	lines := naturalLines(text)
	for i := 0; i < len(lines); i++ {
		line := strings.TrimLeft(lines[i], " \t\f")
		if line == "" || line[0] == '#' || line[0] == '!' {
			continue
		}
		start := i + 1
		// Join continuation lines: an odd number of trailing backslashes.
		for endsInContinuation(line) && i+1 < len(lines) {
			i++
			line = line[:len(line)-1] + strings.TrimLeft(lines[i], " \t\f")
		}
		if endsInContinuation(line) {
			line = line[:len(line)-1]
		}
		key, value, err := splitProperty(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", start, err)
		}
		p.Set(key, value)
	}
	return p, nil
}

// naturalLines splits at \n, \r and \r\n.
func naturalLines(s string) []string {
	var lines []string
	for len(s) > 0 {
		i := strings.IndexAny(s, "\r\n")
		if i < 0 {
			lines = append(lines, s)
			break
		}
		lines = append(lines, s[:i])
		if s[i] == '\r' && i+1 < len(s) && s[i+1] == '\n' {
			i++
		}
		s = s[i+1:]
	}
	return lines
}

func endsInContinuation(line string) bool {
	n := 0
	for i := len(line) - 1; i >= 0 && line[i] == '\\'; i-- {
		n++
	}
	return n%2 == 1
}

// splitProperty splits a logical line into its unescaped key and value.
func splitProperty(line string) (key, value string, err error) {
	end := len(line)
	for i := 0; i < len(line); i++ {
		c := line[i]
		if c == '\\' {
			i++
			continue
		}
		if c == '=' || c == ':' || c == ' ' || c == '\t' || c == '\f' {
			end = i
			break
		}
	}
	rest := strings.TrimLeft(line[min(end, len(line)):], " \t\f")
	if rest != "" && (rest[0] == '=' || rest[0] == ':') {
		rest = strings.TrimLeft(rest[1:], " \t\f")
	}
	if key, err = unescapeProperty(line[:end]); err != nil {
		return "", "", err
	}
	if value, err = unescapeProperty(rest); err != nil {
		return "", "", fmt.Errorf("key %q: %w", key, err)
	}
	return key, value, nil
}

func unescapeProperty(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch s[i] {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'f':
			b.WriteByte('\f')
		case 'u':
			if i+5 > len(s) {
				return "", fmt.Errorf("malformed \\uxxxx escape %q", s[i-1:])
			}
			n, err := strconv.ParseUint(s[i+1:i+5], 16, 16)
			if err != nil {
				return "", fmt.Errorf("malformed \\uxxxx escape %q", s[i-1:i+5])
			}
			i += 4
			r := rune(n)
			// A surrogate pair written as two escapes is one character.
			if utf16IsHigh(r) && i+6 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
				if lo, err := strconv.ParseUint(s[i+3:i+7], 16, 16); err == nil && utf16IsLow(rune(lo)) {
					r = (r-0xD800)<<10 + (rune(lo) - 0xDC00) + 0x10000
					i += 6
				}
			}
			b.WriteRune(r)
		default:
			// Java drops the backslash before any other character; in a
			// UTF-8 file that character may take several bytes.
			_, size := utf8.DecodeRuneInString(s[i:])
			b.WriteString(s[i : i+size])
			i += size - 1
		}
	}
	return b.String(), nil
}

func utf16IsHigh(r rune) bool { return r >= 0xD800 && r < 0xDC00 }
func utf16IsLow(r rune) bool  { return r >= 0xDC00 && r < 0xE000 }
