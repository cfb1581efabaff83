package debezium

import (
	"fmt"
	"regexp"
	"strings"
)

const eventRouterClass = "io.debezium.transforms.outbox.EventRouter"

// transforms finds the outbox router in the transforms chain and maps its
// options.
func (tr *translator) transforms() {
	list, _ := tr.get("transforms")
	for name := range strings.SplitSeq(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		typ, _ := tr.get("transforms." + name + ".type")
		if typ == decodeMessageClass {
			tr.decodeTransform(name)
			continue
		}
		if typ != eventRouterClass {
			tr.otherTransform(name, typ)
			continue
		}
		if tr.router != "" {
			tr.note("transforms."+name, Unsupported, "a second outbox router (after %q) is not supported", tr.router)
			tr.markPrefix("transforms." + name + ".")
			continue
		}
		tr.router = name
	}
	if tr.router == "" {
		tr.note("transforms", Unsupported, "no %s in transforms: outboxrelay relays outbox events; it does not write Debezium's change events", eventRouterClass)
		return
	}
	tr.routerPfx = "transforms." + tr.router + "."
	tr.routerOptions()
	tr.chainSettings()
}

// additionalMissing maps what to do with an additional column a row lacks:
// table.fields.additional.error.on.missing (true or false) up to Debezium
// 3.5, table.field.additional.missing (error or ignore) from 3.6, which
// reads only the new key. Both mean routing.additional_fields_required.
func (tr *translator) additionalMissing() {
	const oldKey, newKey = "table.fields.additional.error.on.missing", "table.field.additional.missing"
	required := tr.boolOpt(oldKey, true)
	_, hasOld := tr.opt(oldKey)
	if v, ok := tr.opt(newKey); ok {
		var newRequired bool
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "error":
			newRequired = true
		case "ignore":
		default:
			tr.note(tr.routerPfx+newKey, Unsupported, "%q is not error or ignore", v)
			return
		}
		if hasOld && newRequired != required {
			tr.note(tr.routerPfx+newKey, Unsupported, "%s=%s and %s=%t disagree: Debezium 3.6 and later read only %s, earlier versions only %s; keep the one your Debezium version reads",
				newKey, strings.TrimSpace(v), oldKey, required, newKey, oldKey)
			return
		}
		required = newRequired
	}
	if !required {
		tr.set("routing.additional_fields_required", false)
	}
}

func (tr *translator) markPrefix(prefix string) {
	for _, k := range tr.conn.Keys() {
		if strings.HasPrefix(k, prefix) {
			tr.used[k] = true
		}
	}
}

// opt returns an outbox router option.
func (tr *translator) opt(name string) (string, bool) { return tr.get(tr.routerPfx + name) }

// boolOpt reads a router boolean as Kafka's ConfigDef does: true or false,
// any case.
func (tr *translator) boolOpt(name string, def bool) bool {
	v, ok := tr.opt(name)
	if !ok {
		return def
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true":
		return true
	case "false":
		return false
	}
	tr.note(tr.routerPfx+name, Unsupported, "%q is not true or false", v)
	return def
}

// routerOptions maps the outbox router's options, one group of options
// a step.
func (tr *translator) routerOptions() {
	tr.columnRoles()
	tr.topicRouting()
	tr.additionalFields()
	tr.additionalMissing()
	expand := tr.payloadOptions()
	tr.timestampOption()
	if tr.boolOpt("route.tombstone.on.empty.payload", false) {
		tr.set("routing.tombstone_on_empty_payload", true)
	}
	if v, ok := tr.opt("table.field.event.schema.version"); ok && v != "" {
		tr.set("routing.schema_version_column", v)
	}
	tr.invalidOperation()
	tracing, ok := tr.opt("tracing.span.context.field")
	if !ok {
		tracing = "tracingspancontext"
	}
	tr.set("routing.tracing_column", tracing)
	if pred, ok := tr.opt("predicate"); ok {
		tr.predicate(pred)
	}
	tr.fieldNameAdjustment(expand)
	// The router's other options are noted in leftovers.
}

// columnRoles maps the columns of each role: the event id, key, payload,
// type and the route-by column.
func (tr *translator) columnRoles() {
	p := tr.routerPfx
	roles := map[string]string{}
	for _, c := range []struct{ option, native, def string }{
		{"route.by.field", "outbox.columns.aggregatetype", "aggregatetype"},
		{"table.field.event.id", "outbox.columns.id", "id"},
		{"table.field.event.key", "outbox.columns.aggregateid", "aggregateid"},
		{"table.field.event.payload", "outbox.columns.payload", "payload"},
		{"table.field.event.type", "outbox.columns.type", "type"},
	} {
		v, ok := tr.opt(c.option)
		if !ok {
			v = c.def
		}
		if c.option == "table.field.event.key" {
			// The key is read on its own (EventRouterDelegate.
			// defineRecordKey): any column, another role's too.
			tr.set(c.native, v)
			continue
		}
		if other, dup := roles[v]; dup {
			if c.option == "table.field.event.type" {
				// The router never reads the event type; routing by the
				// type column leaves no column to map it to.
				tr.set(c.native, "(none)")
				tr.note(p+"route.by.field", Info, "routes by the %q column, so no column is mapped as the event type (the router does not use it)", v)
				continue
			}
			tr.note(p+c.option, Unsupported, "names column %q, which %s also names; outboxrelay needs a column for each role", v, other)
		}
		roles[v] = p + c.option
		tr.set(c.native, v)
	}
}

// topicRouting maps route.topic.regex and route.topic.replacement onto
// the simplest native setting that routes the same: a prefix, a constant
// topic, a replacement of the default regex, or both.
func (tr *translator) topicRouting() {
	regex, hasRegex := tr.opt("route.topic.regex")
	repl, hasRepl := tr.opt("route.topic.replacement")
	if !hasRegex {
		regex = DefaultTopicRegex
	}
	if !hasRepl {
		repl = DefaultTopicReplacement
	}
	topics, err := newTopicRouter(regex, repl)
	switch {
	case err != nil:
		tr.note(tr.routerPfx+"route.topic.regex", Unsupported, "%v", err)
	case regex != DefaultTopicRegex:
		tr.set("routing.topic_regex", regex)
		tr.set("routing.topic_replacement", repl)
	default:
		prefix, isPrefix := strings.CutSuffix(repl, "${routedByValue}")
		constant, isConstant := topics.constant()
		switch {
		case isPrefix && prefix != "" && !strings.ContainsAny(prefix, `$\`):
			tr.set("routing.topic_prefix", prefix)
		case isConstant && constant != "":
			tr.set("routing.topic", constant)
		default:
			tr.set("routing.topic_replacement", repl)
		}
	}
}

// additionalFields maps table.fields.additional.placement.
func (tr *translator) additionalFields() {
	p := tr.routerPfx
	v, ok := tr.opt("table.fields.additional.placement")
	if !ok {
		return
	}
	var fields []string
	for f := range strings.SplitSeq(v, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		af, err := ParseAdditionalField(f)
		if err != nil {
			tr.note(p+"table.fields.additional.placement", Unsupported, "%v", err)
			continue
		}
		if af.Placement == PlacePartition && tr.server {
			tr.note(p+"table.fields.additional.placement", Warning, "partition placement of %q: Debezium Server's Kafka sink leaves the partition to the producer; outboxrelay writes to the column's partition", af.Column)
		}
		fields = append(fields, f)
	}
	tr.set("routing.additional_fields", fields)
}

// payloadOptions maps table.expand.json.payload and
// table.json.payload.null.behavior, and reports whether payloads are
// expanded.
func (tr *translator) payloadOptions() (expand bool) {
	expand = tr.boolOpt("table.expand.json.payload", false)
	if expand {
		tr.set("routing.expand_json_payload", true)
	}
	if v, ok := tr.opt("table.json.payload.null.behavior"); ok {
		switch v = strings.ToLower(strings.TrimSpace(v)); v {
		case "ignore", "optional_bytes":
			tr.set("routing.json_null_fields", v)
		default:
			tr.note(tr.routerPfx+"table.json.payload.null.behavior", Unsupported, "%q is not ignore or optional_bytes", v)
		}
	}
	return expand
}

// timestampOption maps table.field.event.timestamp, and says what
// timestamp records get where it differs from Debezium's.
func (tr *translator) timestampOption() {
	if v, ok := tr.opt("table.field.event.timestamp"); ok && v != "" {
		tr.set("routing.timestamp_column", v)
	} else if !tr.server {
		tr.note(tr.routerPfx+"table.field.event.timestamp", Info, "not set: the record timestamp is the commit time; Debezium's is when it processed the change, which cannot be reproduced")
	}
	if tr.server {
		tr.note("debezium.sink.type", Info, "Debezium Server's Kafka sink leaves the record timestamp to the producer (the send time); outboxrelay writes %s",
			map[bool]string{true: "the timestamp column's value", false: "the commit time"}[tr.t.hasSetting("routing.timestamp_column")])
	}
}

// invalidOperation maps table.op.invalid.behavior (and its older name
// debezium.op.invalid.behavior).
func (tr *translator) invalidOperation() {
	p := tr.routerPfx
	for _, k := range []string{"table.op.invalid.behavior", "debezium.op.invalid.behavior"} {
		v, ok := tr.opt(k)
		if !ok {
			continue
		}
		// EventRouterDelegate.handleUnexpectedOperation: warn and error
		// log each UPDATE and skip it; fatal throws, which stops the task.
		// DELETEs are skipped whatever the setting.
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "warn", "error":
			tr.note(p+k, Info, "%s: UPDATEs of outbox rows are skipped and logged as warnings, once a minute", v)
		case "fatal":
			tr.set("cdc.on_update", "fail")
			tr.note(p+k, Info, "fatal: cdc.on_update fail: an UPDATE of an outbox row stops relaying with an error naming the row, after every event committed before it (with kafka.dead_letter_topic set, it goes there instead); the publication must publish updates")
		default:
			tr.note(p+k, Unsupported, "%q is not warn, error or fatal", v)
		}
	}
}

// fieldNameAdjustment notes the connector's field name options, which
// matter only to expanded payloads.
func (tr *translator) fieldNameAdjustment(expand bool) {
	for _, k := range []string{"field.name.adjustment.mode", "sanitize.field.names"} {
		v, ok := tr.get(k)
		if !ok {
			continue
		}
		if expand && (v == "avro" || v == "avro_unicode" || strings.EqualFold(v, "true")) {
			tr.note(k, Unsupported, "%q: adjusted field names of expanded payloads are not supported", v)
		} else {
			tr.note(k, Info, "%q: no effect without table.expand.json.payload", v)
		}
	}
}

// predicate checks that the router's predicate selects the outbox table's
// records, the only ones outboxrelay reads.
func (tr *translator) predicate(name string) {
	p := tr.routerPfx
	negate := tr.boolOpt("negate", false)
	typ, _ := tr.get("predicates." + name + ".type")
	pattern, _ := tr.get("predicates." + name + ".pattern")
	tr.markPrefix("predicates." + name + ".")
	if typ != "org.apache.kafka.connect.transforms.predicates.TopicNameMatches" {
		tr.note(p+"predicate", Unsupported, "predicate %q (%s) is not supported; only TopicNameMatches", name, typ)
		return
	}
	re, err := regexp.Compile(`\A(?:` + pattern + `)\z`)
	if err != nil {
		tr.note(p+"predicate", Unsupported, "predicate %q pattern %q: %v", name, pattern, err)
		return
	}
	tr.used["predicates"] = true
	prefix, _ := tr.t.Setting("routing.schema_topic_prefix")
	var tables []string
	if t, ok := tr.t.Setting("outbox.table"); ok {
		tables = []string{fmt.Sprint(t)}
	} else if ts, ok := tr.t.Setting("outbox.tables"); ok {
		tables, _ = ts.([]string)
	}
	if ps := tr.t.TablePatterns(); len(ps) > 0 {
		// Tables matched later have topics no translation can list.
		topics := "<schema>.<table>"
		if prefix != nil {
			topics = fmt.Sprint(prefix) + "." + topics
		}
		tr.note(p+"predicate", Info, "predicate %q is not checked against the tables %s match: outboxrelay reads them whatever their topics, and it must select those topics (%s) for Debezium to route their records", name, strings.Join(ps, ", "), topics)
		if len(tables) == 0 {
			return
		}
	}
	var selected, not []string
	for _, table := range tables {
		topic := table
		if prefix != nil {
			topic = strings.TrimPrefix(fmt.Sprint(prefix)+"."+table, ".")
		}
		if re.MatchString(topic) != negate {
			selected = append(selected, topic)
		} else {
			not = append(not, topic)
		}
	}
	if len(not) == 0 {
		tr.note(p+"predicate", Info, "predicate %q selects %s, the outbox tables' topics, which is all outboxrelay reads", name, strings.Join(selected, ", "))
		return
	}
	tr.note(p+"predicate", Unsupported, "predicate %q does not select %s, an outbox table's topic, so Debezium would not route its records", name, strings.Join(not, ", "))
}
