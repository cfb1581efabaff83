package debezium

import (
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/outboxrelay/outboxrelay/internal/secret"
)

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
// came in Debezium 1.0, took a delegate.converter.type in 1.3 and was
// removed in 2.0 for BinaryDataConverter,
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

// Confluent's JSON Schema and Protobuf converters
// (kafka-connect-json-schema-converter, kafka-connect-protobuf-converter).
const (
	confluentJSONSchemaConverter = "io.confluent.connect.json.JsonSchemaConverter"
	confluentProtobufConverter   = "io.confluent.connect.protobuf.ProtobufConverter"
)

// unsupportedDataConfig are the JsonSchemaDataConfig and ProtobufDataConfig
// (and AbstractDataConfig, and the JSON Schema serializer's) options whose other value changes the schema
// or record outboxrelay writes, with the default it writes; the others
// touch no schema the router makes (unions, enums, maps) or only reading.
var unsupportedDataConfig = map[Format]map[string]string{
	FormatJSONSR: {
		"object.additional.properties": "true",
		"ignore.default.for.nullables": "false",
		// KafkaJsonSchemaSerializerConfig: pretty-printed records.
		"json.indent.output": "false",
		// NUMERIC writes a Decimal as a number schema and value.
		"decimal.format": "BASE64",
	},
	FormatProtobuf: {
		"scrub.invalid.names":          "false",
		"wrapper.for.nullables":        "false",
		"optional.for.nullables":       "false",
		"ignore.default.for.nullables": "false",
	},
}

// subjectStrategies maps Confluent's subject name strategy classes
// (io.confluent.kafka.serializers.subject) to schema_registry's names.
var subjectStrategies = map[string]string{
	"io.confluent.kafka.serializers.subject.TopicNameStrategy":       SubjectTopic,
	"io.confluent.kafka.serializers.subject.RecordNameStrategy":      SubjectRecord,
	"io.confluent.kafka.serializers.subject.TopicRecordNameStrategy": SubjectTopicRecord,
}

// registryConverters are the converters that use the Schema Registry,
// by the prefix of their options (key.converter, value.converter), and
// their formats.
type registryConverters struct {
	tr       *translator
	prefixes []string
	formats  map[string]Format
}

// one reads a setting from every registry converter; values that differ
// are refused, since key and value share one registry section. at is
// the option it was read from.
func (rc registryConverters) one(name string) (val, at string, ok bool) {
	for _, p := range rc.prefixes {
		v, ok := rc.tr.get(p + "." + name)
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		if at != "" && v != val {
			// A URL's user info may hold a password.
			rc.tr.note(p+"."+name, Unsupported, "%q differs from %s's %q; outboxrelay's key and value share one schema_registry", secret.Redact(v), at, secret.Redact(val))
			continue
		}
		val, at = v, p+"."+name
	}
	return val, at, at != ""
}

// registry maps the Schema Registry settings of the key and value
// converters that use it (Avro, JSON Schema, Protobuf) (AbstractKafkaSchemaSerDeConfig's keys, under
// key.converter. and value.converter.) onto schema_registry, which key
// and value share: a setting the two give different values is refused.
func (tr *translator) registry(key, value Format) {
	rc := registryConverters{tr: tr, formats: map[string]Format{"key.converter": key, "value.converter": value}}
	if key.UsesRegistry() {
		rc.prefixes = append(rc.prefixes, "key.converter")
	}
	if value.UsesRegistry() {
		rc.prefixes = append(rc.prefixes, "value.converter")
	}
	if len(rc.prefixes) == 0 {
		return
	}
	tr.registryURL(rc)
	tr.registryAuth(rc)
	if v, _, ok := rc.one("auto.register.schemas"); ok {
		tr.set("schema_registry.auto_register", !strings.EqualFold(v, "false"))
	}
	if v, _, ok := rc.one("use.latest.version"); ok {
		tr.set("schema_registry.use_latest_version", strings.EqualFold(v, "true"))
	}
	tr.subjectStrategy(rc)
	for _, p := range rc.prefixes {
		tr.registryConverterOptions(p, rc.formats[p])
	}
}

// registryURL maps schema.registry.url. basic.auth.credentials.source URL
// takes the user from it: the user goes to username, and the password
// with the other secrets, so that neither the translated YAML nor a
// logged URL shows it.
func (tr *translator) registryURL(rc registryConverters) {
	v, at, ok := rc.one("schema.registry.url")
	if !ok {
		p := rc.prefixes[0]
		tr.note(p+".schema.registry.url", Unsupported, "the %s converter needs schema.registry.url, the Schema Registry it registers its schemas in", registryFormat(rc.formats[p]).name())
		return
	}
	v = tr.resolve(at, v)
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
}

// registryAuth maps basic.auth.credentials.source and
// basic.auth.user.info.
func (tr *translator) registryAuth(rc registryConverters) {
	source := "URL"
	if v, _, ok := rc.one("basic.auth.credentials.source"); ok {
		source = strings.ToUpper(v)
	}
	if v, at, ok := rc.one("basic.auth.user.info"); ok {
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
		for _, p := range rc.prefixes {
			if _, ok := tr.conn.Get(p + ".basic.auth.credentials.source"); ok {
				tr.note(p+".basic.auth.credentials.source", Unsupported, "%s is not supported; outboxrelay authenticates to the registry with USER_INFO (basic.auth.user.info) or a user in the URL", source)
			}
		}
	}
}

// subjectStrategy maps key.subject.name.strategy and
// value.subject.name.strategy, which must agree.
func (tr *translator) subjectStrategy(rc registryConverters) {
	for _, p := range rc.prefixes {
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
}

// registryConverterOptions checks the data options of the converter at
// prefix p that change its records, and notes the rest.
func (tr *translator) registryConverterOptions(p string, f Format) {
	if v, ok := tr.get(p + ".connect.meta.data"); ok && f == FormatAvro && strings.EqualFold(strings.TrimSpace(v), "false") {
		tr.note(p+".connect.meta.data", Unsupported, "false is not supported: outboxrelay writes the connect.name and connect.version properties, as the default true")
	}
	data := unsupportedDataConfig[f]
	for _, name := range slices.Sorted(maps.Keys(data)) {
		def := data[name]
		if v, ok := tr.get(p + "." + name); ok && !strings.EqualFold(strings.TrimSpace(v), def) {
			tr.note(p+"."+name, Unsupported, "%s is not supported: outboxrelay writes the schema and record of the default, %s", strings.TrimSpace(v), def)
		}
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
			tr.note(k, Info, "%s converter setting with no effect on the records outboxrelay writes", registryFormat(f).name())
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
		// JsonConverterConfig's decimal.format: NUMERIC writes a Decimal
		// as a JSON number, which outboxrelay does not.
		if v, ok := tr.get(prefix + ".decimal.format"); ok && !strings.EqualFold(strings.TrimSpace(v), "BASE64") {
			tr.note(prefix+".decimal.format", Unsupported, "%q: only BASE64, the default, is supported: a Decimal (decimal.handling.mode precise) is written as the base64 of its bytes", v)
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
	case confluentJSONSchemaConverter, confluentProtobufConverter:
		// Their registry settings and options are read by registry too.
		f = FormatJSONSR
		if class == confluentProtobufConverter {
			f = FormatProtobuf
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
		tr.note(prefix, Unsupported, "%s is not supported; outboxrelay writes JsonConverter, StringConverter, ByteArrayConverter, BinaryDataConverter (ByteBufferConverter) and Confluent's Avro, JSON Schema and Protobuf converters' records", class)
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
	if f.UsesRegistry() {
		tr.note(key, Unsupported, "%s as the delegate is not supported; set it as the converter itself (routing.value_format %s)", class, f)
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
