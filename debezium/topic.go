package debezium

import (
	"fmt"
	"regexp"
	"strings"
)

// DefaultTopicRegex and DefaultTopicReplacement are the router's
// route.topic.regex and route.topic.replacement defaults.
const (
	DefaultTopicRegex       = "(?<routedByValue>.*)"
	DefaultTopicReplacement = "outbox.event.${routedByValue}"
)

// topicRouter is Kafka Connect's RegexRouter as the outbox router uses it
// on the route.by.field value: when the regex matches the whole value, the
// first match is replaced (Matcher.matches, then replaceFirst); otherwise
// the value itself is the topic.
type topicRouter struct {
	full, first *regexp.Regexp
	repl        []replPart
}

// replPart is a literal or a group reference of a Java replacement string.
type replPart struct {
	literal string
	group   int // -1 for a literal
}

// newTopicRouter compiles a Java regex and replacement. Java syntax that
// Go's regexp (RE2) lacks, such as lookaround and backreferences, is an
// error naming the construct.
func newTopicRouter(regex, replacement string) (*topicRouter, error) {
	return newRegexRouter("route.topic.regex", regex, "route.topic.replacement", replacement)
}

// newRegexRouter is newTopicRouter with the names of the options the
// regex and replacement come from, for errors.
func newRegexRouter(regexOption, regex, replOption, replacement string) (*topicRouter, error) {
	first, err := regexp.Compile(regex)
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w (Java regex features that Go's RE2 lacks, such as lookaround and backreferences, are not supported)", regexOption, regex, err)
	}
	full := regexp.MustCompile(`\A(?:` + regex + `)\z`)
	repl, err := parseReplacement(replacement, first)
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", replOption, replacement, err)
	}
	return &topicRouter{full: full, first: first, repl: repl}, nil
}

// route returns the topic for value.
func (t *topicRouter) route(value string) string {
	if !t.full.MatchString(value) {
		return value
	}
	m := t.first.FindStringSubmatchIndex(value)
	var b strings.Builder
	b.WriteString(value[:m[0]])
	for _, p := range t.repl {
		if p.group < 0 {
			b.WriteString(p.literal)
		} else if s, e := m[2*p.group], m[2*p.group+1]; s >= 0 {
			b.WriteString(value[s:e])
		}
	}
	b.WriteString(value[m[1]:])
	return b.String()
}

// constant returns the topic when the replacement names no group.
func (t *topicRouter) constant() (string, bool) {
	var b strings.Builder
	for _, p := range t.repl {
		if p.group >= 0 {
			return "", false
		}
		b.WriteString(p.literal)
	}
	return b.String(), true
}

// parseReplacement reads Java's Matcher replacement syntax: \x is x, $n a
// group by number (taking more digits while the number stays a group),
// ${name} a named group; any other $ is an error, as in Java.
func parseReplacement(s string, re *regexp.Regexp) ([]replPart, error) {
	var parts []replPart
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			parts = append(parts, replPart{literal: lit.String(), group: -1})
			lit.Reset()
		}
	}
	groups := re.NumSubexp()
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			i++
			if i >= len(s) {
				return nil, fmt.Errorf("character to be escaped is missing")
			}
			lit.WriteByte(s[i])
		case '$':
			i++
			if i >= len(s) {
				return nil, fmt.Errorf("illegal group reference: group index is missing")
			}
			if s[i] == '{' {
				end := strings.IndexByte(s[i:], '}')
				if end < 0 {
					return nil, fmt.Errorf("named capturing group is missing trailing '}'")
				}
				name := s[i+1 : i+end]
				idx := re.SubexpIndex(name)
				if name == "" || idx < 0 {
					return nil, fmt.Errorf("no group with name {%s} in route.topic.regex", name)
				}
				flush()
				parts = append(parts, replPart{group: idx})
				i += end
				continue
			}
			if s[i] < '0' || s[i] > '9' {
				return nil, fmt.Errorf("illegal group reference at %q", s[i-1:])
			}
			n := int(s[i] - '0')
			if n > groups {
				return nil, fmt.Errorf("no group %d in route.topic.regex", n)
			}
			for i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9' {
				next := n*10 + int(s[i+1]-'0')
				if next > groups {
					break
				}
				n = next
				i++
			}
			flush()
			parts = append(parts, replPart{group: n})
		default:
			lit.WriteByte(c)
		}
	}
	flush()
	return parts, nil
}
