package debezium

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// simpleDateFormat is a java.text.SimpleDateFormat pattern as
// TimestampRouter uses it: in UTC, with an English locale's names (the
// JVM's default in Kafka Connect's images). The week-based letters (w, W,
// Y), whose values depend on the locale's first day of the week, are
// refused.
type simpleDateFormat []dateToken

// dateToken is a run of one pattern letter, or literal text (letter 0).
type dateToken struct {
	letter  byte
	count   int
	literal string
}

const javaPatternChars = "GyMdkHmsSEDFwWahKzZYuXL"

// parseSimpleDateFormat reads a pattern as SimpleDateFormat.compile does:
// text in single quotes is literal (” a quote), so is any character but
// an ASCII letter, and an ASCII letter outside javaPatternChars is an
// error.
func parseSimpleDateFormat(p string) (simpleDateFormat, error) {
	var out simpleDateFormat
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			out = append(out, dateToken{literal: lit.String()})
			lit.Reset()
		}
	}
	inQuote := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '\'' {
			if i+1 < len(p) && p[i+1] == '\'' {
				lit.WriteByte('\'')
				i++
			} else {
				inQuote = !inQuote
			}
			continue
		}
		if inQuote || !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
			lit.WriteByte(c)
			continue
		}
		if !strings.ContainsRune(javaPatternChars, rune(c)) {
			return nil, fmt.Errorf("pattern %q: illegal pattern character '%c'", p, c)
		}
		if c == 'w' || c == 'W' || c == 'Y' {
			return nil, fmt.Errorf("pattern %q: '%c' depends on the JVM's locale (its first day of the week), which outboxrelay does not know", p, c)
		}
		n := 1
		for i+n < len(p) && p[i+n] == c {
			n++
		}
		flush()
		out = append(out, dateToken{letter: c, count: n})
		i += n - 1
	}
	if inQuote {
		return nil, fmt.Errorf("pattern %q has an unterminated quote", p)
	}
	flush()
	return out, nil
}

var (
	javaMonths   = []string{"January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"}
	javaWeekdays = []string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
)

// format writes epoch milliseconds ms as SimpleDateFormat.format does in
// UTC.
func (f simpleDateFormat) format(ms int64) string {
	t := time.UnixMilli(ms).UTC()
	var b strings.Builder
	for _, tok := range f {
		if tok.letter == 0 {
			b.WriteString(tok.literal)
			continue
		}
		b.WriteString(tok.field(t))
	}
	return b.String()
}

// field is SimpleDateFormat.subFormat for one run of a letter.
func (tok dateToken) field(t time.Time) string {
	n := tok.count
	switch tok.letter {
	case 'G':
		if t.Year() <= 0 {
			return "BC"
		}
		return "AD"
	case 'y':
		y := t.Year()
		if y <= 0 {
			y = 1 - y // the year of the era
		}
		if n == 2 {
			return zeroPad(y%100, 2)
		}
		return zeroPad(y, n)
	case 'M', 'L':
		switch {
		case n >= 4:
			return javaMonths[t.Month()-1]
		case n == 3:
			return javaMonths[t.Month()-1][:3]
		}
		return zeroPad(int(t.Month()), n)
	case 'd':
		return zeroPad(t.Day(), n)
	case 'k':
		h := t.Hour()
		if h == 0 {
			h = 24
		}
		return zeroPad(h, n)
	case 'H':
		return zeroPad(t.Hour(), n)
	case 'K':
		return zeroPad(t.Hour()%12, n)
	case 'h':
		h := t.Hour() % 12
		if h == 0 {
			h = 12
		}
		return zeroPad(h, n)
	case 'm':
		return zeroPad(t.Minute(), n)
	case 's':
		return zeroPad(t.Second(), n)
	case 'S':
		return zeroPad(t.Nanosecond()/1e6, n)
	case 'E':
		if n >= 4 {
			return javaWeekdays[t.Weekday()]
		}
		return javaWeekdays[t.Weekday()][:3]
	case 'u':
		d := int(t.Weekday())
		if d == 0 {
			d = 7
		}
		return zeroPad(d, n)
	case 'D':
		return zeroPad(t.YearDay(), n)
	case 'F':
		return zeroPad((t.Day()-1)/7+1, n)
	case 'a':
		if t.Hour() < 12 {
			return "AM"
		}
		return "PM"
	case 'z':
		if n >= 4 {
			return "Coordinated Universal Time"
		}
		return "UTC"
	case 'Z':
		return "+0000"
	case 'X':
		return "Z"
	}
	return ""
}

// zeroPad is SimpleDateFormat.zeroPaddingNumber: at least n digits.
func zeroPad(v, n int) string {
	s := strconv.Itoa(v)
	if len(s) < n {
		s = strings.Repeat("0", n-len(s)) + s
	}
	return s
}
