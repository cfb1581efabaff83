package debezium

import "strings"

// decodeMessageClass is Debezium's transform that turns a logical
// decoding message's JSON content into the "after" struct of an insert,
// so that the outbox router chained after it routes the message as a row:
// a table-less outbox (cdc.message_prefixes).
const decodeMessageClass = "io.debezium.connector.postgresql.transforms.DecodeLogicalDecodingMessageContent"

// decodeTransform takes the DecodeLogicalDecodingMessageContent transform
// of the chain: before the outbox router it is what cdc.message_prefixes
// does; after it, the router has already passed on the message's raw
// record, which outboxrelay does not write.
func (tr *translator) decodeTransform(name string) {
	tr.markPrefix("transforms." + name + ".")
	switch {
	case tr.router != "":
		tr.note("transforms."+name, Unsupported, "%s after the outbox router is not supported: put it before the router, which then routes each message as a row", decodeMessageClass)
	case tr.decode != "":
		tr.note("transforms."+name, Unsupported, "a second %s (after %q) is not supported", decodeMessageClass, tr.decode)
	default:
		tr.decode = name
	}
}

// messages maps message.prefix.include.list, with the decoding transform
// before the router, onto cdc.message_prefixes. Debezium matches each
// entry as a regular expression against the whole prefix; outboxrelay
// takes prefixes literally, so an entry that is a pattern is refused
// rather than read as a different set of prefixes.
func (tr *translator) messages() {
	include, hasInclude := tr.get("message.prefix.include.list")
	if _, ok := tr.get("message.prefix.exclude.list"); ok {
		tr.note("message.prefix.exclude.list", Unsupported, "not supported: name the prefixes to relay in message.prefix.include.list")
	}
	if tr.decode == "" {
		if hasInclude {
			tr.note("message.prefix.include.list", Warning, "without %s before the outbox router, Debezium writes logical decoding messages as raw message records, which the router does not route and outboxrelay does not write: no messages are relayed", decodeMessageClass)
		}
		return
	}
	if !hasInclude || strings.TrimSpace(include) == "" {
		tr.note("transforms."+tr.decode, Unsupported, "with no message.prefix.include.list Debezium relays the messages of every prefix; outboxrelay relays those of the prefixes listed in message.prefix.include.list (cdc.message_prefixes): list them")
		return
	}
	var prefixes []string
	for entry := range strings.SplitSeq(include, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		lit, dotted, ok := literalPattern(entry)
		if !ok {
			tr.note("message.prefix.include.list", Unsupported, "%q is a pattern; outboxrelay relays prefixes named literally (dots may be escaped): list each prefix", entry)
			continue
		}
		if dotted {
			tr.note("message.prefix.include.list", Warning, "%q: its dots are taken literally, where Debezium's pattern lets a dot match any character; escape them (\\.) to say so", entry)
		}
		prefixes = append(prefixes, lit)
	}
	if len(prefixes) > 0 {
		tr.set("cdc.message_prefixes", prefixes)
		tr.note("message.prefix.include.list", Info, "cdc.message_prefixes: transactional logical decoding messages with these prefixes are events, in commit order with the table's rows; non-transactional ones are skipped and logged at ERROR (Debezium relays those too)")
	}
}

// literalPattern returns the prefix an include-list entry names:
// its characters, with backslash-escaped punctuation unescaped. An
// unescaped dot is taken for a dot (dotted reports it), as prefixes are
// usually written; any other pattern character makes it no literal.
func literalPattern(p string) (lit string, dotted, ok bool) {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\' && i+1 < len(p) && strings.IndexByte(`.\+*?()|[]{}^$-/`, p[i+1]) >= 0:
			b.WriteByte(p[i+1])
			i++
			continue
		case c == '.':
			dotted = true
		case strings.IndexByte(`\+*?()|[]{}^$`, c) >= 0:
			return "", false, false
		}
		b.WriteByte(c)
	}
	return b.String(), dotted, b.Len() > 0
}
