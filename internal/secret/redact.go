package secret

import (
	"errors"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Mask stands in for a secret wherever one would be shown.
const Mask = "xxxxx"

// IsKey reports whether a connection parameter's value is a secret:
// libpq's password and sslpassword (the client key's passphrase), the two
// pgconn keeps out of the server's runtime parameters and masks in its own
// parse errors. Every other libpq parameter (passfile, sslkey, ...) names a
// file or a setting, not a secret. Case is ignored, so that a misspelt
// Password=, which the driver would pass on to the server, is hidden too.
func IsKey(key string) bool {
	switch strings.ToLower(key) {
	case "password", "sslpassword":
		return true
	}
	return false
}

// span is where a secret's value lies in a string: s[start:end], as
// written (quoted or percent-encoded).
type span struct{ start, end int }

// Redact hides every secret in s, a connection string or URL, and keeps the
// rest for an operator to read:
//   - scheme://user:password@host/...?password=...&sslpassword=...: the
//     password of the user info and the value of each secret query
//     parameter (IsKey, percent-encoded keys included). A URL that net/url
//     refuses, or whose user info is ambiguous (an unescaped @ past the
//     host), is masked from the first colon after the scheme up to its last
//     @, which may hide more than the password but never less.
//   - key=value ... (libpq's keyword/value form): the value of each secret
//     key, quoted or not, with escapes as libpq reads them. Past a part the
//     driver could not read either, everything after a secret key's = is
//     masked.
//   - user:password@host without a scheme: from the first colon to the
//     last @.
func Redact(s string) string {
	spans := find(s)
	if len(spans) == 0 {
		return s
	}
	var b strings.Builder
	last := 0
	for _, sp := range spans {
		b.WriteString(s[last:sp.start])
		b.WriteString(Mask)
		last = sp.end
	}
	b.WriteString(s[last:])
	return b.String()
}

// Values are the secrets in s, each as written and as the driver or an HTTP
// client reads it (percent-decoded, unquoted), and percent-encoded as a
// library might print it again: what a log scrubber must look for.
func Values(s string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(v string) {
		if v != "" && v != Mask && !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	_, isURL := cutScheme(s)
	isURL = isURL || !strings.Contains(s, "=")
	for _, sp := range find(s) {
		raw := s[sp.start:sp.end]
		add(raw)
		plain := raw
		switch {
		case isURL:
			if u, err := url.QueryUnescape(raw); err == nil {
				add(u) // + as a space, as in a query
			}
			if u, err := url.PathUnescape(raw); err == nil {
				plain = u
			}
		case len(raw) >= 2 && raw[0] == '\'' && raw[len(raw)-1] == '\'':
			plain = unescapeKeyword(raw[1 : len(raw)-1])
		default:
			plain = unescapeKeyword(raw)
		}
		add(plain)
		add(url.QueryEscape(plain))
		add(url.PathEscape(plain))
	}
	return out
}

// find locates the secrets of s, in order.
func find(s string) []span {
	if rest, ok := cutScheme(s); ok {
		return findURL(s, len(s)-len(rest))
	}
	if strings.Contains(s, "=") {
		return findKeywords(s)
	}
	return findURL(s, 0)
}

// scheme is RFC 3986's.
var scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.\-]*://`)

// cutScheme returns what follows scheme:// in s.
func cutScheme(s string) (string, bool) {
	m := scheme.FindString(s)
	if m == "" {
		return s, false
	}
	return s[len(m):], true
}

// findURL finds the secrets of a URL whose part after the scheme starts at
// s[from:].
func findURL(s string, from int) []span {
	rest := s[from:]
	// The user info ends at an @ before the first /: net/url stops the
	// host at /, ? or #, pgx at / only, so up to the last @ before the
	// first / covers both readings.
	hostEnd := strings.IndexByte(rest, '/')
	if hostEnd < 0 {
		hostEnd = len(rest)
	}
	at := strings.LastIndexByte(rest[:hostEnd], '@')
	if ambiguous(s, rest[max(at, 0):]) {
		at = strings.LastIndexByte(rest, '@')
	}
	var out []span
	after := 0
	if at >= 0 {
		if colon := strings.IndexByte(rest[:at], ':'); colon >= 0 {
			out = append(out, span{from + colon + 1, from + at})
		}
		after = at + 1
	}
	q := strings.IndexByte(rest[after:], '?')
	if q < 0 {
		return out
	}
	// A # may be part of a password, so a value runs to the next &.
	pos := from + after + q + 1
	for _, pair := range strings.Split(s[pos:], "&") {
		if rawKey, _, ok := strings.Cut(pair, "="); ok {
			key := rawKey
			if k, err := url.QueryUnescape(rawKey); err == nil {
				key = k
			}
			if IsKey(key) {
				out = append(out, span{pos + len(rawKey) + 1, pos + len(pair)})
			}
		}
		pos += len(pair) + 1
	}
	return out
}

// ambiguous reports whether a URL's user info may run past the @ found
// before its first /: net/url refuses the URL (an unescaped character in a
// password, or a password mistaken for a port), or an @ stands where a
// valid URL has none (in the path, the fragment, a query key or a query
// part with no =), as an unescaped / or ? in a password leaves it.
func ambiguous(s, afterUser string) bool {
	if !strings.Contains(afterUser, "@") {
		_, err := url.Parse(s)
		return err != nil
	}
	u, err := url.Parse(s)
	if err != nil || strings.Contains(u.Path, "@") || strings.Contains(u.Fragment, "@") || strings.Contains(u.Host, "@") {
		return true
	}
	for _, pair := range strings.Split(u.RawQuery, "&") {
		k, _, ok := strings.Cut(pair, "=")
		if !ok && strings.Contains(pair, "@") || strings.Contains(k, "@") {
			return true
		}
	}
	return false
}

// findKeywords finds the secrets of a libpq keyword/value string, reading
// it as pgconn does: a key, =, and a value that is either quoted ('...',
// with \ escaping) or runs to the next space (with \ escaping).
func findKeywords(s string) []span {
	var out []span
	i := 0
	for {
		i = skipSpace(s, i)
		if i == len(s) {
			return out
		}
		k := i
		for k < len(s) && s[k] != '=' && !isSpace(s[k]) {
			k++
		}
		key := s[i:k]
		eq := skipSpace(s, k)
		if eq == len(s) || s[eq] != '=' {
			return append(out, maskFrom(s, i)...)
		}
		v := skipSpace(s, eq+1)
		end := v
		if end < len(s) && s[end] == '\'' {
			end++
			for end < len(s) && s[end] != '\'' {
				if s[end] == '\\' {
					end++
				}
				end++
			}
			if end >= len(s) {
				// Unterminated: the driver refuses it; hide all of it.
				if IsKey(key) {
					return append(out, span{v, len(s)})
				}
				return append(out, maskFrom(s, i)...)
			}
			end++
		} else {
			for end < len(s) && !isSpace(s[end]) {
				if s[end] == '\\' {
					end++
				}
				end++
			}
			end = min(end, len(s))
		}
		if IsKey(key) && end > v {
			out = append(out, span{v, end})
		}
		i = end
	}
}

// secretKey finds a secret key and its = in text the keyword reader
// could not follow.
var secretKey = regexp.MustCompile(`(?i)(ssl)?password\s*=\s*`)

// maskFrom hides everything after the first secret key in s[i:], for a
// string that is not valid keyword/value from i on.
func maskFrom(s string, i int) []span {
	m := secretKey.FindStringIndex(s[i:])
	if m == nil || i+m[1] == len(s) {
		return nil
	}
	return []span{{i + m[1], len(s)}}
}

func isSpace(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '\v', '\f':
		return true
	}
	return false
}

func skipSpace(s string, i int) int {
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return i
}

// unescapeKeyword undoes libpq's \ escapes.
func unescapeKeyword(v string) string {
	if !strings.Contains(v, `\`) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// RedactError is err with every connection string and URL it quotes
// redacted: net/url's errors quote the whole URL, password and all, and
// pgconn's parse errors the connection string, masked on a best-effort
// basis only. pgconn's message is replaced by what it says is wrong, with
// no part of the string. An err that quotes neither is returned as it is;
// one that does becomes a new error with only the redacted text, so that
// no caller can reach the original through errors.As and print it.
func RedactError(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := msg
	walk(err, func(e error) {
		var ue *url.Error
		var pe *pgconn.ParseConfigError
		switch {
		case errors.As(e, &ue) && ue == e:
			if r := Redact(ue.URL); r != ue.URL {
				clean = strings.ReplaceAll(clean, strconv.Quote(ue.URL), strconv.Quote(r))
				clean = strings.ReplaceAll(clean, ue.URL, r)
			}
		case errors.As(e, &pe) && pe == e:
			clean = strings.ReplaceAll(clean, pe.Error(), "cannot parse the connection string: "+parseProblem(pe))
			if pe.ConnString != "" {
				clean = strings.ReplaceAll(clean, pe.ConnString, Redact(pe.ConnString))
			}
		}
	})
	if clean == msg {
		return err
	}
	return redactedError(clean)
}

type redactedError string

func (e redactedError) Error() string { return string(e) }

// walk calls f on err and every error it wraps.
func walk(err error, f func(error)) {
	if err == nil {
		return
	}
	f(err)
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		walk(u.Unwrap(), f)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			walk(e, f)
		}
	}
}

// parseProblem is what pgconn found wrong with a connection string: its
// message less the quoted string. The message is not exported on its own,
// and the cause (Unwrap) is nil for some problems, such as an invalid
// port. Error is "cannot parse `<string>`: <message>[ (<cause>)]", with the
// string masked by pgconn, and the message follows the last "`: ". Should
// the result still hold a secret of the string, only the cause is given.
func parseProblem(pe *pgconn.ParseConfigError) string {
	s := pe.Error()
	problem := "not a valid URL or key=value string"
	if i := strings.LastIndex(s, "`: "); i >= 0 {
		problem = s[i+len("`: "):]
	}
	for _, v := range Values(pe.ConnString) {
		if len(v) >= 3 && strings.Contains(problem, v) {
			return "not a valid URL or key=value string"
		}
	}
	return problem
}
