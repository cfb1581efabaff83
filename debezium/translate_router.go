package debezium

import (
	"cmp"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/outboxrelay/outboxrelay/secret"
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
		if typ != eventRouterClass {
			tr.note("transforms."+name, Unsupported, "transform %q (%s) is not supported: outboxrelay applies only the Outbox Event Router (%s), whose records it reproduces", name, typ, eventRouterClass)
			tr.markPrefix("transforms." + name + ".")
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

func (tr *translator) routerOptions() {
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

	regex, hasRegex := tr.opt("route.topic.regex")
	repl, hasRepl := tr.opt("route.topic.replacement")
	if !hasRegex {
		regex = DefaultTopicRegex
	}
	if !hasRepl {
		repl = DefaultTopicReplacement
	}
	if topics, err := newTopicRouter(regex, repl); err != nil {
		tr.note(p+"route.topic.regex", Unsupported, "%v", err)
	} else if regex == DefaultTopicRegex {
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
	} else {
		tr.set("routing.topic_regex", regex)
		tr.set("routing.topic_replacement", repl)
	}

	if v, ok := tr.opt("table.fields.additional.placement"); ok {
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
	tr.additionalMissing()
	expand := tr.boolOpt("table.expand.json.payload", false)
	if expand {
		tr.set("routing.expand_json_payload", true)
	}
	if v, ok := tr.opt("table.json.payload.null.behavior"); ok {
		switch v = strings.ToLower(strings.TrimSpace(v)); v {
		case "ignore", "optional_bytes":
			tr.set("routing.json_null_fields", v)
		default:
			tr.note(p+"table.json.payload.null.behavior", Unsupported, "%q is not ignore or optional_bytes", v)
		}
	}
	if v, ok := tr.opt("table.field.event.timestamp"); ok && v != "" {
		tr.set("routing.timestamp_column", v)
	} else if !tr.server {
		tr.note(p+"table.field.event.timestamp", Info, "not set: the record timestamp is the commit time; Debezium's is when it processed the change, which cannot be reproduced")
	}
	if tr.server {
		tr.note("debezium.sink.type", Info, "Debezium Server's Kafka sink leaves the record timestamp to the producer (the send time); outboxrelay writes %s",
			map[bool]string{true: "the timestamp column's value", false: "the commit time"}[tr.t.hasSetting("routing.timestamp_column")])
	}
	if tr.boolOpt("route.tombstone.on.empty.payload", false) {
		tr.set("routing.tombstone_on_empty_payload", true)
	}
	if v, ok := tr.opt("table.field.event.schema.version"); ok && v != "" {
		tr.set("routing.schema_version_column", v)
	}
	for _, k := range []string{"table.op.invalid.behavior", "debezium.op.invalid.behavior"} {
		v, ok := tr.opt(k)
		if !ok {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "warn", "error":
			tr.note(p+k, Info, "%s: UPDATEs of outbox rows are skipped and logged as warnings, once a minute", v)
		case "fatal":
			tr.note(p+k, Warning, "fatal is not supported: outboxrelay skips and logs UPDATEs of outbox rows instead of stopping")
		default:
			tr.note(p+k, Unsupported, "%q is not warn, error or fatal", v)
		}
	}
	tracing, ok := tr.opt("tracing.span.context.field")
	if !ok {
		tracing = "tracingspancontext"
	}
	tr.set("routing.tracing_column", tracing)

	if pred, ok := tr.opt("predicate"); ok {
		tr.predicate(pred)
	}
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
	// The router's other options are noted in leftovers.
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

// converters maps the key, value and header converters.
func (tr *translator) converters() {
	var key, value, header Format
	if tr.server {
		key = tr.serverFormat("key")
		value = tr.serverFormat("value")
		header = tr.serverFormat("header")
	} else {
		var keyDelegate, valueDelegate Format
		key, keyDelegate = tr.converter("key.converter")
		value, valueDelegate = tr.converter("value.converter")
		header = tr.headerConverter()
		if keyDelegate != "" {
			tr.set("routing.key_delegate_format", string(keyDelegate))
		}
		if valueDelegate != "" {
			tr.set("routing.value_delegate_format", string(valueDelegate))
		}
		tr.registry(key, value)
	}
	tr.set("routing.key_format", string(key))
	tr.set("routing.value_format", string(value))
	tr.set("routing.header_format", string(header))
	for _, k := range []string{"column.propagate.source.type", "datatype.propagate.source.type"} {
		if _, ok := tr.get(k); !ok {
			continue
		}
		if key == FormatJSONSchema || value == FormatJSONSchema || header == FormatJSONSchema {
			tr.note(k, Unsupported, "adds __debezium.source.column.* parameters to schemas, which outboxrelay does not write")
		} else {
			tr.note(k, Info, "no effect without schemas in the records")
		}
	}
}

// Debezium's pass-through converters (debezium-core, later
// debezium-connect-plugins, io/debezium/converters/). ByteBufferConverter
// came in Debezium 1.0 (DBZ-1604), took a delegate.converter.type in 1.3
// (DBZ-2396) and was removed in 2.0 (DBZ-4600) for BinaryDataConverter,
// which 1.9.3 already has.
const (
	byteBufferConverter = "io.debezium.converters.ByteBufferConverter"
	binaryDataConverter = "io.debezium.converters.BinaryDataConverter"
)

// The Avro converters: Confluent's (kafka-connect-avro-converter) and
// Apicurio's (apicurio-registry-utils-converter).
const (
	confluentAvroConverter = "io.confluent.connect.avro.AvroConverter"
	apicurioAvroConverter  = "io.apicurio.registry.utils.converter.AvroConverter"
)

// subjectStrategies maps Confluent's subject name strategy classes
// (io.confluent.kafka.serializers.subject) to schema_registry's names.
var subjectStrategies = map[string]string{
	"io.confluent.kafka.serializers.subject.TopicNameStrategy":       SubjectTopic,
	"io.confluent.kafka.serializers.subject.RecordNameStrategy":      SubjectRecord,
	"io.confluent.kafka.serializers.subject.TopicRecordNameStrategy": SubjectTopicRecord,
}

// registry maps the Schema Registry settings of the Avro key and value
// converters (AbstractKafkaSchemaSerDeConfig's keys, under
// key.converter. and value.converter.) onto schema_registry, which key
// and value share: a setting the two give different values is refused.
func (tr *translator) registry(key, value Format) {
	var prefixes []string
	if key == FormatAvro {
		prefixes = append(prefixes, "key.converter")
	}
	if value == FormatAvro {
		prefixes = append(prefixes, "value.converter")
	}
	if len(prefixes) == 0 {
		return
	}
	// one reads a setting from every Avro converter; values that differ
	// are refused, since key and value share one registry section.
	one := func(name string) (string, string, bool) {
		var val, at string
		for _, p := range prefixes {
			v, ok := tr.get(p + "." + name)
			if !ok {
				continue
			}
			v = strings.TrimSpace(v)
			if at != "" && v != val {
				// A URL's user info may hold a password.
				tr.note(p+"."+name, Unsupported, "%q differs from %s's %q; outboxrelay's key and value share one schema_registry", secret.Redact(v), at, secret.Redact(val))
				continue
			}
			val, at = v, p+"."+name
		}
		return val, at, at != ""
	}
	if v, at, ok := one("schema.registry.url"); ok {
		v = tr.resolve(at, v)
		// basic.auth.credentials.source URL: the user in the URL. It goes
		// to username, and the password with the other secrets, so that
		// neither the translated YAML nor a logged URL shows it.
		var urls []string
		for _, one := range strings.Split(v, ",") {
			one = strings.TrimSpace(one)
			u, err := url.Parse(one)
			if err != nil {
				// Its user info cannot be taken out reliably, and the
				// relay refuses it anyway: say so, password hidden.
				one = secret.Redact(one)
				tr.note(at, Unsupported, "%q is not a valid URL; escape a %% in it as %%25, or move the password to basic.auth.user.info", one)
			} else if u.User != nil {
				tr.set("schema_registry.username", u.User.Username())
				if pw, ok := u.User.Password(); ok {
					tr.t.secrets["schema_registry.password"] = pw
				}
				u.User = nil
				one = u.String()
			}
			urls = append(urls, one)
		}
		tr.set("schema_registry.url", strings.Join(urls, ","))
	} else {
		tr.note(prefixes[0]+".schema.registry.url", Unsupported, "the Avro converter needs schema.registry.url, the Schema Registry it registers its schemas in")
	}
	source := "URL"
	if v, _, ok := one("basic.auth.credentials.source"); ok {
		source = strings.ToUpper(v)
	}
	if v, at, ok := one("basic.auth.user.info"); ok {
		v = tr.resolve(at, v)
		switch source {
		case "USER_INFO":
			user, pw, _ := strings.Cut(v, ":")
			tr.set("schema_registry.username", user)
			if pw != "" {
				tr.t.secrets["schema_registry.password"] = pw
				tr.note(at, Info, "the password is used by run --debezium-config; `debezium translate` leaves it out (set schema_registry.password_file or OUTBOXRELAY_SCHEMA_REGISTRY_PASSWORD)")
			}
		default:
			tr.note(at, Info, "no effect: basic.auth.credentials.source is %s, not USER_INFO", source)
		}
	}
	switch source {
	case "URL", "USER_INFO":
	default:
		for _, p := range prefixes {
			if _, ok := tr.conn.Get(p + ".basic.auth.credentials.source"); ok {
				tr.note(p+".basic.auth.credentials.source", Unsupported, "%s is not supported; outboxrelay authenticates to the registry with USER_INFO (basic.auth.user.info) or a user in the URL", source)
			}
		}
	}
	if v, _, ok := one("auto.register.schemas"); ok {
		tr.set("schema_registry.auto_register", !strings.EqualFold(v, "false"))
	}
	if v, _, ok := one("use.latest.version"); ok {
		tr.set("schema_registry.use_latest_version", strings.EqualFold(v, "true"))
	}
	for _, p := range prefixes {
		what := strings.TrimSuffix(p, ".converter")
		k := p + "." + what + ".subject.name.strategy"
		v, ok := tr.get(k)
		if !ok {
			continue
		}
		st, known := subjectStrategies[strings.TrimSpace(v)]
		if !known {
			tr.note(k, Unsupported, "%s is not supported; outboxrelay names subjects with TopicNameStrategy, RecordNameStrategy or TopicRecordNameStrategy", v)
			continue
		}
		if prev, ok := tr.t.Setting("schema_registry.subject_name_strategy"); ok && prev != st {
			tr.note(k, Unsupported, "%s differs from the key's; outboxrelay's key and value share one schema_registry.subject_name_strategy", v)
			continue
		}
		tr.set("schema_registry.subject_name_strategy", st)
	}
	for _, p := range prefixes {
		if v, ok := tr.get(p + ".connect.meta.data"); ok && strings.EqualFold(strings.TrimSpace(v), "false") {
			tr.note(p+".connect.meta.data", Unsupported, "false is not supported: outboxrelay writes the connect.name and connect.version properties, as the default true")
		}
		for _, k := range tr.conn.Keys() {
			if strings.HasPrefix(k, p+".schema.registry.ssl.") && !tr.used[k] {
				tr.used[k] = true
				tr.note(k, Unsupported, "Java key and trust stores are not read; give PEM files in schema_registry.tls (ca_file, cert_file, key_file)")
			}
		}
		for _, k := range tr.conn.Keys() {
			if strings.HasPrefix(k, p+".") && !tr.used[k] {
				tr.used[k] = true
				tr.note(k, Info, "Avro converter setting with no effect on the records outboxrelay writes")
			}
		}
	}
}

// converter maps the key or value converter configured at prefix to its
// format and, for a pass-through converter, the format of its delegate
// (empty for none).
func (tr *translator) converter(prefix string) (f, delegate Format) {
	class, ok := tr.get(prefix)
	// schemas.enable is JsonConverter's; beside another converter it is
	// left to the sweep below, which notes it has no effect.
	jsonFormat := func() Format {
		if v, ok := tr.get(prefix + ".schemas.enable"); ok && strings.EqualFold(strings.TrimSpace(v), "false") {
			return FormatJSON
		}
		return FormatJSONSchema
	}
	switch class {
	case "":
		f = jsonFormat()
		if !ok {
			tr.note(prefix, Info, "not set, so the Connect worker's converter applies; taken to be JsonConverter (schemas.enable=%t), as in Debezium's container images. Set routing.%s_format if your worker differs", f == FormatJSONSchema, strings.TrimSuffix(prefix, ".converter"))
		}
	case "org.apache.kafka.connect.json.JsonConverter":
		f = jsonFormat()
		if v, ok := tr.get(prefix + ".replace.null.with.default"); ok && strings.EqualFold(v, "false") {
			tr.note(prefix+".replace.null.with.default", Unsupported, "false is not supported: a NULL column with a default is written as its default")
		}
	case "org.apache.kafka.connect.storage.StringConverter":
		f = FormatString
		if v, ok := tr.get(prefix + ".encoding"); ok && !strings.EqualFold(v, "UTF-8") && !strings.EqualFold(v, "UTF8") {
			tr.note(prefix+".encoding", Unsupported, "%q: only UTF-8 is supported", v)
		}
	case "org.apache.kafka.connect.converters.ByteArrayConverter":
		f = FormatBytes
	case confluentAvroConverter, apicurioAvroConverter:
		// The registry settings under prefix are read by registry, after
		// both converters are known.
		f = FormatAvro
		if class == apicurioAvroConverter {
			tr.note(prefix, Warning, "Apicurio's AvroConverter writes Apicurio's own header unless configured for Confluent compatibility (apicurio.registry.as-confluent=true, or the ccompat API); outboxrelay writes the Confluent wire format (magic byte 0, 4-byte schema id) through the registry's Confluent-compatible API: set %s.schema.registry.url to Apicurio's /apis/ccompat/v7 URL, and make sure consumers decode the Confluent format", prefix)
		}
		return f, ""
	case binaryDataConverter, byteBufferConverter:
		// Both write a BYTES value's bytes unchanged and hand anything else
		// to the converter delegate.converter.type names, which their
		// configure(Map, boolean) configures with the options under
		// delegate.converter.type., prefix removed
		// (Configuration.subset(DELEGATE_CONVERTER_TYPE, true)). passThrough
		// has the rest of their fromConnectData.
		f = FormatBytes
		delegate = tr.delegateConverter(prefix + ".delegate.converter.type")
	default:
		tr.note(prefix, Unsupported, "%s is not supported; outboxrelay writes JsonConverter, StringConverter, ByteArrayConverter and BinaryDataConverter (ByteBufferConverter) records", class)
		f = FormatJSONSchema
	}
	for _, k := range tr.conn.Keys() {
		if strings.HasPrefix(k, prefix+".") && !tr.used[k] {
			tr.used[k] = true
			tr.note(k, Info, "converter setting with no effect on the records outboxrelay writes")
		}
	}
	return f, delegate
}

// delegateConverter maps a pass-through converter's delegate.converter.type
// option, at key, to the format of its delegate. Its own options sit under
// key, as a converter's under key.converter, so they are read the same way.
func (tr *translator) delegateConverter(key string) Format {
	class, ok := tr.get(key)
	if !ok || class == "" {
		return ""
	}
	f, delegate := tr.converter(key)
	if f == FormatAvro {
		tr.note(key, Unsupported, "%s as the delegate is not supported; set it as the converter itself (routing.value_format avro)", class)
		return ""
	}
	if f != FormatBytes {
		return f
	}
	if class == "org.apache.kafka.connect.converters.ByteArrayConverter" {
		tr.note(key, Info, "ByteArrayConverter as the delegate refuses what is not bytes, as no delegate does; written as bytes")
	}
	// A pass-through delegate passes bytes, which never reach it, and
	// hands the rest to its own delegate.
	return delegate
}

func (tr *translator) headerConverter() Format {
	class, _ := tr.get("header.converter")
	schemas := true
	if v, ok := tr.get("header.converter.schemas.enable"); ok {
		schemas = !strings.EqualFold(strings.TrimSpace(v), "false")
	}
	f := FormatSimple
	switch class {
	case "":
		tr.note("header.converter", Info, "not set, so the Connect worker's header.converter applies; taken to be SimpleHeaderConverter, Kafka Connect's default. Set routing.header_format if your worker differs")
	case "org.apache.kafka.connect.storage.SimpleHeaderConverter":
	case "org.apache.kafka.connect.json.JsonConverter":
		f = FormatJSONSchema
		if !schemas {
			f = FormatJSON
		}
	case "org.apache.kafka.connect.storage.StringConverter":
		tr.note("header.converter", Info, "StringConverter writes the same header bytes as SimpleHeaderConverter for text, number and boolean columns; written as simple")
	default:
		tr.note("header.converter", Unsupported, "%s is not supported; outboxrelay writes SimpleHeaderConverter and JsonConverter headers", class)
	}
	for _, k := range tr.conn.Keys() {
		if strings.HasPrefix(k, "header.converter.") && !tr.used[k] {
			tr.used[k] = true
			tr.note(k, Info, "converter setting with no effect on the records outboxrelay writes")
		}
	}
	return f
}

// serverFormat maps debezium.format.<what> (default json).
func (tr *translator) serverFormat(what string) Format {
	name, ok := tr.formats[what]
	if !ok {
		name = "json"
	}
	schemas := true
	if v, ok := tr.formats[what+".schemas.enable"]; ok {
		schemas = !strings.EqualFold(strings.TrimSpace(v), "false")
	}
	f := FormatJSONSchema
	switch name {
	case "json", "jsonbytearray":
		if !schemas {
			f = FormatJSON
		}
	case "simplestring":
		if what == "header" {
			tr.note("debezium.format.header", Unsupported, "simplestring is not a header format")
		}
		f = FormatString
	default:
		tr.note("debezium.format."+what, Unsupported, "%q is not supported; outboxrelay writes json, jsonbytearray and simplestring", name)
	}
	for k := range tr.formats {
		if strings.HasPrefix(k, what+".") && k != what+".schemas.enable" {
			tr.note("debezium.format."+k, Info, "format setting with no effect on the records outboxrelay writes")
		}
	}
	return f
}

// producerOptions maps producer.override.* (Connect) or
// debezium.sink.kafka.producer.* (Debezium Server).
func (tr *translator) producerOptions() {
	protocol, _ := tr.producer.Get("security.protocol")
	protocol = strings.ToUpper(strings.TrimSpace(protocol))
	tls := protocol == "SSL" || protocol == "SASL_SSL"
	sasl := protocol == "SASL_SSL" || protocol == "SASL_PLAINTEXT"
	for _, k := range tr.producer.Keys() {
		v, _ := tr.producer.Get(k)
		name := tr.prodLabel + k
		switch {
		case k == "bootstrap.servers":
			var brokers []string
			for b := range strings.SplitSeq(v, ",") {
				if b = strings.TrimSpace(b); b != "" {
					brokers = append(brokers, b)
				}
			}
			tr.set("kafka.brokers", brokers)
		case k == "client.id":
			tr.set("kafka.client_id", v)
		case k == "compression.type":
			switch v {
			case "none", "gzip", "snappy", "lz4", "zstd":
				tr.set("kafka.compression", v)
			default:
				tr.note(name, Unsupported, "%q is not none, gzip, snappy, lz4 or zstd", v)
			}
		case k == "max.request.size":
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				tr.set("kafka.max_record_bytes", n)
			} else {
				tr.note(name, Unsupported, "%q is not a positive number of bytes", v)
			}
		case k == "security.protocol":
			switch protocol {
			case "PLAINTEXT":
			case "SSL", "SASL_SSL":
				tr.set("kafka.tls.enabled", true)
			case "SASL_PLAINTEXT":
				tr.set("kafka.allow_plaintext_sasl", true)
				tr.note(name, Info, "SASL without TLS: kafka.allow_plaintext_sasl is set")
			default:
				tr.note(name, Unsupported, "%q is not PLAINTEXT, SSL, SASL_SSL or SASL_PLAINTEXT", v)
			}
		case strings.HasPrefix(k, "sasl.") && !sasl:
			tr.note(name, Info, "unused: security.protocol is %s", cmp.Or(protocol, "PLAINTEXT"))
		case k == "sasl.mechanism":
			switch m := strings.ToUpper(strings.TrimSpace(v)); m {
			case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
				tr.set("kafka.sasl.mechanism", strings.ToLower(m))
			default:
				tr.note(name, Unsupported, "%s is not supported; outboxrelay authenticates with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", v)
			}
		case k == "sasl.jaas.config":
			user, password, ok := parseJAAS(v)
			if !ok {
				tr.note(name, Unsupported, "outboxrelay reads username and password from a PlainLoginModule or ScramLoginModule line only")
				continue
			}
			tr.set("kafka.sasl.username", user)
			tr.t.secrets["kafka.sasl.password"] = password
			tr.note(name, Info, "used by run --debezium-config; `debezium translate` leaves the password out (set OUTBOXRELAY_KAFKA_SASL_PASSWORD or kafka.sasl.password_file)")
		case strings.HasPrefix(k, "ssl.") && !tls:
			tr.note(name, Info, "unused: security.protocol is %s", cmp.Or(protocol, "PLAINTEXT"))
		case k == "ssl.truststore.location" || k == "ssl.keystore.location":
			store := strings.TrimSuffix(strings.TrimPrefix(k, "ssl."), ".location")
			if typ, _ := tr.producer.Get("ssl." + store + ".type"); !strings.EqualFold(typ, "PEM") {
				tr.note(name, Unsupported, "%s stores (%s) are not supported: convert it to PEM and set %s", cmp.Or(typ, "JKS"), v,
					map[string]string{"truststore": "kafka.tls.ca_file", "keystore": "kafka.tls.cert_file and kafka.tls.key_file"}[store])
				continue
			}
			if store == "truststore" {
				tr.set("kafka.tls.ca_file", v)
			} else {
				tr.set("kafka.tls.cert_file", v)
				tr.set("kafka.tls.key_file", v)
			}
		case k == "ssl.endpoint.identification.algorithm" && v == "":
			tr.note(name, Warning, "empty (no host name check) is not supported: outboxrelay checks the broker's certificate name; set kafka.tls.server_name if it differs from the host")
		case k == "ssl.key.password":
			tr.note(name, Unsupported, "encrypted private keys are not supported; decrypt it to a PEM key file")
		case strings.HasPrefix(k, "ssl."):
			tr.note(name, Info, "TLS setting outboxrelay does not need (Go's TLS defaults apply)")
		case k == "partitioner.class":
			if v != "org.apache.kafka.clients.producer.internals.DefaultPartitioner" {
				tr.note(name, Unsupported, "%s: outboxrelay partitions by murmur2 of the key bytes, the Java client's default", v)
			}
		case k == "key.serializer" || k == "value.serializer":
			if !strings.HasSuffix(v, ".StringSerializer") && !strings.HasSuffix(v, ".ByteArraySerializer") {
				tr.note(name, Unsupported, "%s is not supported; the converted record is written as it is", v)
			}
		default:
			tr.note(name, Info, "no effect on records: outboxrelay always produces with acks=all and idempotence")
		}
	}
	if sasl {
		if _, ok := tr.producer.Get("sasl.mechanism"); !ok {
			tr.note(tr.prodLabel+"sasl.mechanism", Unsupported, "not set, and Kafka's default GSSAPI (Kerberos) is not supported")
		}
	}
	if _, ok := tr.t.Setting("kafka.brokers"); !ok {
		tr.note("bootstrap.servers", Info, "the brokers are the Connect worker's, not the connector's: set kafka.brokers with --config or OUTBOXRELAY_KAFKA_BROKERS")
	}
}

// jaasEntry reads username="..." and password="..." from a JAAS line.
var jaasEntry = regexp.MustCompile(`(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"`)

func parseJAAS(s string) (user, password string, ok bool) {
	if !strings.Contains(s, "PlainLoginModule") && !strings.Contains(s, "ScramLoginModule") {
		return "", "", false
	}
	var haveUser, havePassword bool
	for _, m := range jaasEntry.FindAllStringSubmatch(s, -1) {
		v := strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(m[2])
		if m[1] == "username" {
			user, haveUser = v, true
		} else {
			password, havePassword = v, true
		}
	}
	return user, password, haveUser && havePassword
}

// leftovers notes every option no mapping used.
func (tr *translator) leftovers() {
	for _, k := range tr.conn.Keys() {
		if tr.used[k] {
			continue
		}
		if rest, ok := strings.CutPrefix(k, tr.routerPfx); ok && tr.routerPfx != "" {
			if o, ok := lookup(ScopeRouter, rest); ok {
				tr.note(k, o.Report, "%s", o.Text)
			} else {
				tr.note(k, Warning, "unknown outbox router option; ignored")
			}
			continue
		}
		if o, ok := lookup(ScopeConnector, k); ok {
			tr.note(k, o.Report, "%s", o.Text)
			continue
		}
		if o, ok := lookup(ScopeConnect, k); ok {
			tr.note(k, o.Report, "%s", o.Text)
			continue
		}
		switch {
		case strings.HasPrefix(k, "transforms.") || strings.HasPrefix(k, "predicates"):
			tr.note(k, Info, "belongs to no transform in use; ignored, as Kafka Connect does")
		case strings.HasPrefix(k, "database.") || strings.HasPrefix(k, "driver."):
			tr.note(k, Info, "JDBC connection setting; not used")
		case strings.HasPrefix(k, "snapshot.") || strings.HasPrefix(k, "offset.") || strings.HasPrefix(k, "schema.history.") ||
			strings.HasPrefix(k, "errors.") || strings.HasPrefix(k, "slot.") || k == "config.action.reload" ||
			k == "exactly.once.support" || k == "transaction.boundary" || k == "offsets.storage.topic":
			tr.note(k, Info, "no effect on records")
		default:
			tr.note(k, Warning, "unknown option; ignored (check that it does not shape records)")
		}
	}
}
