package debezium

import (
	"fmt"
	"strings"
)

// Severity says how a [Note] bears on running the configuration.
type Severity int

const (
	// Info: the option is honoured, or has no effect on records; the note
	// says how.
	Info Severity = iota
	// Warning: the option is not honoured; the note says what outboxrelay
	// does instead. The relay still runs.
	Warning
	// Unsupported: outboxrelay cannot produce what Debezium would with
	// this option; the configuration does not run.
	Unsupported
)

func (s Severity) String() string {
	switch s {
	case Info:
		return "info"
	case Warning:
		return "warning"
	}
	return "unsupported"
}

// Note is what the translation says about one option.
type Note struct {
	Option   string
	Severity Severity
	Text     string
}

func (n Note) String() string { return fmt.Sprintf("%s (%s): %s", n.Option, n.Severity, n.Text) }

// OptionError is an option outboxrelay cannot honour or read.
type OptionError struct {
	Option string
	Err    error
}

func (e *OptionError) Error() string { return e.Option + ": " + e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

// Status is an option's row in the compatibility table.
type Status string

const (
	Same     Status = "supported, same default"
	WithNote Status = "supported with a note"
	No       Status = "not supported"
	NoEffect Status = "no effect on records"
)

// Option is one Debezium, Kafka Connect or Debezium Server option that
// matters to a migration: how outboxrelay treats it.
type Option struct {
	// Name as written in a connector config; outbox router options
	// without their transforms.<name>. prefix; Debezium Server keys in
	// full.
	Name    string
	Scope   Scope
	Default string
	Status  Status
	// Text says where the option maps to, or what happens instead.
	Text string
	// Report is the note's severity when the option is set and the
	// translation does not map it itself.
	Report Severity
}

// Scope groups options.
type Scope string

const (
	ScopeRouter    Scope = "Outbox Event Router (transforms.<name>.)"
	ScopeConnector Scope = "PostgreSQL connector"
	ScopeConnect   Scope = "Kafka Connect"
	ScopeServer    Scope = "Debezium Server"
	// ScopeTransform are Kafka Connect's transforms after the router, by
	// their class in org.apache.kafka.connect.transforms.
	ScopeTransform Scope = "Kafka Connect transforms after the router"
)

// Options is the compatibility catalogue; docs/debezium.md's table is made from
// it and a test keeps the two in step.
var Options = []Option{
	// The router.
	{Name: "table.field.event.id", Scope: ScopeRouter, Default: "id", Status: Same, Text: "`outbox.columns.id`; header `id`"},
	{Name: "table.field.event.key", Scope: ScopeRouter, Default: "aggregateid", Status: WithNote, Text: "`outbox.columns.aggregateid`; any column, the id or another role's too. A NULL key makes a record with a null key as in Debezium (the column's default if it has one): null with StringConverter, ByteArrayConverter and AvroConverter (nothing registered), the JSON null with JsonConverter; a null record key goes to the producer's sticky partition, in no aggregate's order (JsonConverter's null is hashed as any key)"},
	{Name: "table.field.event.type", Scope: ScopeRouter, Default: "type", Status: Same, Text: "`outbox.columns.type`"},
	{Name: "table.field.event.payload", Scope: ScopeRouter, Default: "payload", Status: Same, Text: "`outbox.columns.payload`"},
	{Name: "table.field.event.timestamp", Scope: ScopeRouter, Default: "(none)", Status: WithNote, Text: "`routing.timestamp_column`; timestamp columns as Debezium, timestamptz and bigint (epoch ms) too, which Debezium refuses. Without it the record timestamp is the commit time, where Debezium uses the time it processed the change"},
	{Name: "table.field.event.schema.version", Scope: ScopeRouter, Default: "(none)", Status: Same, Text: "`routing.schema_version_column`; the version of the envelope struct schema"},
	{Name: "table.field.event.payload.id", Scope: ScopeRouter, Default: "aggregateid", Status: No, Text: "removed in Debezium 2.0; use table.field.event.key", Report: Warning},
	{Name: "table.fields.additional.placement", Scope: ScopeRouter, Default: "(none)", Status: WithNote, Text: "`routing.additional_fields`; header, envelope and partition placements with aliases; a partition column may be smallint or bigint, where Debezium requires integer. Debezium Server does not pass the partition on; outboxrelay does"},
	{Name: "table.fields.additional.error.on.missing", Scope: ScopeRouter, Default: "true", Status: Same, Text: "`routing.additional_fields_required`; read by Debezium up to 3.5, which renamed it table.field.additional.missing in 3.6"},
	{Name: "table.field.additional.missing", Scope: ScopeRouter, Default: "error", Status: WithNote, Text: "`routing.additional_fields_required`, false for ignore (Debezium 3.6 and later): a missing header or partition column is left out; a missing envelope column stops outboxrelay at start, where Debezium leaves it out of the envelope. Any value but error or ignore is refused"},
	{Name: "table.expand.json.payload", Scope: ScopeRouter, Default: "false", Status: WithNote, Text: "`routing.expand_json_payload`; when objects in one array have different fields, the merged field order follows first appearance (Debezium's follows Java hash order); a payload Debezium's task would fail on (a top-level array, clashing types) is an error naming the event; so is one nested deeper than 1000 levels or with a number longer than 1000 characters (Jackson's limits, past which Debezium sends the payload unexpanded, as a string), one over 1 MiB, or one whose schema names (each nested object's full path, summed) would pass 8 MiB or whose struct values would pass 32 MiB (objects of one array with different keys)"},
	{Name: "table.json.payload.null.behavior", Scope: ScopeRouter, Default: "ignore", Status: Same, Text: "`routing.json_null_fields`: ignore or optional_bytes"},
	{Name: "route.by.field", Scope: ScopeRouter, Default: "aggregatetype", Status: Same, Text: "`outbox.columns.aggregatetype`"},
	{Name: "route.topic.regex", Scope: ScopeRouter, Default: DefaultTopicRegex, Status: WithNote, Text: "`routing.topic_regex`; Go's RE2 syntax, which lacks lookaround and backreferences (those are refused)"},
	{Name: "route.topic.replacement", Scope: ScopeRouter, Default: DefaultTopicReplacement, Status: Same, Text: "`routing.topic_prefix` (a prefix before ${routedByValue}), `routing.topic` (no group), or `routing.topic_replacement`; Java's replacement syntax"},
	{Name: "route.tombstone.on.empty.payload", Scope: ScopeRouter, Default: "false", Status: Same, Text: "`routing.tombstone_on_empty_payload`"},
	{Name: "table.op.invalid.behavior", Scope: ScopeRouter, Default: "warn", Status: WithNote, Text: "warn and error: UPDATEs of outbox rows are skipped and logged (warning, once a minute); fatal: `cdc.on_update: fail`, an UPDATE stops relaying with an error naming the row, after the events before it (to kafka.dead_letter_topic when one is set)"},
	{Name: "debezium.op.invalid.behavior", Scope: ScopeRouter, Default: "warn", Status: WithNote, Text: "old name of table.op.invalid.behavior"},
	{Name: "tracing.span.context.field", Scope: ScopeRouter, Default: "tracingspancontext", Status: WithNote, Text: "`routing.tracing_column`; its W3C traceparent (and tracestate) go out first: the writer's as it is, or, with OTEL_EXPORTER_OTLP_ENDPOINT set, the relay's own span's, as Debezium sends the id of a span it creates as the parent with OpenTelemetry on its classpath (set the key empty if yours had none); docs/application.md"},
	{Name: "tracing.operation.name", Scope: ScopeRouter, Default: "debezium-read", Status: NoEffect, Text: "the relay's spans (with OTEL_EXPORTER_OTLP_ENDPOINT set) are named send <topic>, as OpenTelemetry's messaging conventions name them", Report: Info},
	{Name: "tracing.with.context.field.only", Scope: ScopeRouter, Default: "false", Status: NoEffect, Text: "headers are sent only for rows with a span context", Report: Info},
	{Name: "predicate, negate", Scope: ScopeRouter, Default: "(none)", Status: WithNote, Text: "a TopicNameMatches predicate that selects the outbox table is accepted (outboxrelay reads only that table); any other predicate is refused"},

	// The connector.
	{Name: "connector.class", Scope: ScopeConnector, Default: "(required)", Status: Same, Text: "must be io.debezium.connector.postgresql.PostgresConnector"},
	{Name: "database.hostname, database.port, database.user, database.password, database.dbname", Scope: ScopeConnector, Default: "port 5432", Status: WithNote, Text: "`postgres.url`; `debezium translate` leaves the password out (set PGPASSWORD or OUTBOXRELAY_POSTGRES_URL)"},
	{Name: "database.sslmode, database.sslrootcert, database.sslcert, database.sslkey, database.sslpassword", Scope: ScopeConnector, Default: "prefer", Status: Same, Text: "query parameters of `postgres.url`"},
	{Name: "database.sslfactory", Scope: ScopeConnector, Status: No, Text: "a Java class; use the ssl* options", Report: Unsupported},
	{Name: "database.initial.statements", Scope: ScopeConnector, Status: No, Text: "not run", Report: Warning},
	{Name: "topic.prefix, database.server.name", Scope: ScopeConnector, Default: "(required)", Status: Same, Text: "`routing.schema_topic_prefix`: names the envelope struct schema"},
	{Name: "plugin.name", Scope: ScopeConnector, Default: "decoderbufs", Status: WithNote, Text: "pgoutput only; decoderbufs and wal2json are refused (switch Debezium to pgoutput with a new slot first); when unset, a slot that exists must be pgoutput"},
	{Name: "slot.name", Scope: ScopeConnector, Default: "debezium", Status: Same, Text: "`cdc.slot`; outboxrelay resumes from the slot's confirmed position"},
	{Name: "publication.name", Scope: ScopeConnector, Default: "dbz_publication", Status: Same, Text: "`cdc.publication`"},
	{Name: "publication.autocreate.mode", Scope: ScopeConnector, Default: "all_tables", Status: WithNote, Text: "`cdc.create_publication`: all_tables and filtered create a missing publication FOR TABLE <outbox> WITH (publish = 'insert'); disabled and no_tables create none. An existing publication is used as it is"},
	{Name: "table.include.list, table.whitelist", Scope: ScopeConnector, Default: "(all tables)", Status: WithNote, Text: "names (dots may be escaped): `outbox.table`, or `outbox.tables` for a list; patterns: `outbox.table_patterns`, matched as Debezium does (the whole schema.table, ignoring case; RE2 syntax) at every start and, while running, against tables created later, which join the publication and the stream; `debezium translate` lists what they match now"},
	{Name: "schema.include.list, schema.exclude.list", Scope: ScopeConnector, Status: WithNote, Text: "with table names: no effect, outboxrelay reads only the outbox tables; with table patterns: accepted when every pattern writes out a schema the list lets through (`inventory\\.outbox.*`), so it selects nothing more, else refused: write the schema into the pattern", Report: Info},
	{Name: "table.exclude.list", Scope: ScopeConnector, Status: NoEffect, Text: "alone: outboxrelay reads only the outbox tables, never every table but some; with table.include.list: refused, as Debezium refuses the two together", Report: Info},
	{Name: "column.include.list, column.exclude.list", Scope: ScopeConnector, Status: WithNote, Text: "not applied: the router sees every column (matters only for an excluded additional field)", Report: Warning},
	{Name: "status.update.interval.ms", Scope: ScopeConnector, Default: "10000", Status: Same, Text: "`cdc.status_interval`"},
	{Name: "heartbeat.interval.ms", Scope: ScopeConnector, Default: "0", Status: WithNote, Text: "`cdc.heartbeat_interval`: a logical message keeps an idle slot moving; no heartbeat records are written to Kafka"},
	{Name: "heartbeat.action.query", Scope: ScopeConnector, Status: WithNote, Text: "`cdc.heartbeat_query`: run as written at every heartbeat (only with heartbeat.interval.ms > 0, as Debezium), on the heartbeat's own connection, after its logical message; a failure is logged at ERROR and relaying goes on"},
	{Name: "topic.heartbeat.prefix", Scope: ScopeConnector, Default: "__debezium-heartbeat", Status: NoEffect, Text: "no heartbeat records", Report: Info},
	{Name: "snapshot.mode", Scope: ScopeConnector, Default: "initial", Status: WithNote, Text: "`cdc.snapshot`: initial and when_needed publish the rows already in the table when outboxrelay creates the slot (from the slot's exported snapshot), no_data does not, nor does never (removed in Debezium 3.3, read as no_data); a slot that exists (a takeover) is streamed from without a snapshot. always, initial_only and the others are refused", Report: Warning},
	{Name: "slot.drop.on.stop", Scope: ScopeConnector, Default: "false", Status: No, Text: "outboxrelay never drops its slot", Report: Warning},
	{Name: "slot.stream.params", Scope: ScopeConnector, Status: No, Text: "outboxrelay sends proto_version and publication_names only", Report: Warning},
	{Name: "lsn.flush.mode, flush.lsn.source", Scope: ScopeConnector, Default: "connector", Status: WithNote, Text: "outboxrelay confirms the slot up to what Kafka acknowledged and, while nothing is in flight, up to the server's keepalive position, as connector_and_driver does; manual (flush.lsn.source=false) is not honoured (a warning). lsn.flush.mode came in Debezium 3.4 and replaced flush.lsn.source, which it ignores when both are set", Report: Warning},
	{Name: "lsn.flush.timeout.ms, lsn.flush.timeout.action", Scope: ScopeConnector, Default: "30000, fail", Status: NoEffect, Text: "Debezium 3.2 and later: outboxrelay confirms in the replication stream's standby status updates, which wait for no answer", Report: Info},
	{Name: "offset.mismatch.strategy, internal.slot.seek.to.known.offset.on.start", Scope: ScopeConnector, Default: "no_validation", Status: NoEffect, Text: "Debezium 3.4 and later (replacing the internal option): outboxrelay streams from the slot's confirmed position and compares it with its checkpoint in Kafka at every start ([The checkpoint](checkpoint.md))", Report: Info},
	{Name: "publish.via.partition.root", Scope: ScopeConnector, Default: "false", Status: WithNote, Text: "Debezium 3.2 and later: true is not set on a publication outboxrelay creates (a warning); create it WITH (publish_via_partition_root = true) for a partitioned outbox table", Report: Warning},
	{Name: "connection.validation.timeout.ms, executor.shutdown.timeout.ms, guardrail.collections.max, guardrail.collections.limit.action, legacy.snapshot.max.threads, snapshot.max.threads.multiplier, queue.provider.type, statistics.metrics.enabled", Scope: ScopeConnector, Status: NoEffect, Text: "added in Debezium 3.2 (the first two), 3.3 (guardrail), 3.5 (snapshot threads) and 3.6 (the last two); none shapes records", Report: Info},
	{Name: "binary.handling.mode", Scope: ScopeConnector, Default: "bytes", Status: WithNote, Text: "bytes only", Report: Unsupported},
	{Name: "time.precision.mode", Scope: ScopeConnector, Default: "adaptive", Status: WithNote, Text: "`routing.time_precision`: adaptive, adaptive_time_microseconds and connect, for date, time, timetz, timestamp and timestamptz columns in keys, headers and envelopes (timestamptz padded to the column's scale, as since Debezium 2.2; connect's dates written as text as a worker JVM in UTC writes them); isostring, microseconds, nanoseconds and structured are refused", Report: Unsupported},
	{Name: "decimal.handling.mode", Scope: ScopeConnector, Default: "precise", Status: WithNote, Text: "`routing.decimal_handling`: precise, double and string write numeric columns in keys, headers and envelopes as Debezium does (precise: Connect's Decimal, VariableScaleDecimal for a numeric without precision; NaN and the infinities fail the event, as in Debezium); precise is refused at start for a numeric key, payload or envelope field with ProtobufConverter", Report: Unsupported},
	{Name: "interval.handling.mode", Scope: ScopeConnector, Default: "numeric", Status: Same, Text: "`routing.interval_handling`: numeric (MicroDuration) or string (ISO 8601), for interval columns in keys, headers and envelopes", Report: Unsupported},
	{Name: "hstore.handling.mode", Scope: ScopeConnector, Default: "json", Status: NoEffect, Text: "hstore columns are not supported in keys, headers or envelopes (refused at start)", Report: Info},
	{Name: "column.propagate.source.type, datatype.propagate.source.type", Scope: ScopeConnector, Status: No, Text: "adds schema parameters outboxrelay does not write; refused with JsonConverter schemas.enable=true", Report: Warning},
	{Name: "field.name.adjustment.mode, sanitize.field.names", Scope: ScopeConnector, Default: "none", Status: WithNote, Text: "none only; avro names are refused when table.expand.json.payload is on", Report: Warning},
	{Name: "schema.name.adjustment.mode", Scope: ScopeConnector, Default: "none", Status: WithNote, Text: "names are not adjusted; matters only for envelope schemas of aggregate types with characters Avro forbids", Report: Warning},
	{Name: "tombstones.on.delete", Scope: ScopeConnector, Default: "true", Status: NoEffect, Text: "the router drops deletes", Report: Info},
	{Name: "skipped.operations", Scope: ScopeConnector, Default: "t", Status: NoEffect, Text: "only inserts are events", Report: Info},
	{Name: "extended.headers.enabled", Scope: ScopeConnector, Default: "true", Status: Same, Text: "`routing.context_headers`: every record starts with `__debezium.context.connectorLogicalName` (topic.prefix), `.taskId` (0), `.connectorName` (postgresql) and `.runId` (a new UUID at each start), as Debezium 3.4 and later write them (3.2 and 3.3 have no runId; earlier versions none: set it false for those)"},
	{Name: "provide.transaction.metadata", Scope: ScopeConnector, Default: "false", Status: No, Text: "no transaction topic", Report: Warning},
	{Name: "message.prefix.include.list", Scope: ScopeConnector, Default: "(all prefixes)", Status: WithNote, Text: "`cdc.message_prefixes`, with DecodeLogicalDecodingMessageContent before the router: transactional logical decoding messages of these prefixes are events, with Debezium's records; prefixes named literally (a pattern, or no list, is refused); non-transactional messages are skipped and logged at ERROR"},
	{Name: "message.prefix.exclude.list", Scope: ScopeConnector, Status: No, Text: "name the prefixes in message.prefix.include.list", Report: Unsupported},
	{Name: "message.key.columns", Scope: ScopeConnector, Status: NoEffect, Text: "the router sets the key", Report: Info},
	{Name: "max.batch.size, max.queue.size, max.queue.size.in.bytes, poll.interval.ms", Scope: ScopeConnector, Status: NoEffect, Text: "see `cdc.max_batch_events` and `kafka.max_buffered_records`", Report: Info},
	{Name: "event.processing.failure.handling.mode, errors.max.retries", Scope: ScopeConnector, Default: "fail", Status: WithNote, Text: "a bad row stops the relay or goes to `kafka.dead_letter_topic`; connection failures are retried with backoff", Report: Info},
	{Name: "signal.*, incremental.snapshot.*, notification.*, read.only", Scope: ScopeConnector, Status: No, Text: "outboxrelay has no signals or snapshots", Report: Warning},
	{Name: "converters", Scope: ScopeConnector, Status: No, Text: "custom converters change values outboxrelay cannot reproduce", Report: Unsupported},
	{Name: "topic.delimiter, topic.naming.strategy", Scope: ScopeConnector, Status: WithNote, Text: "only the default `.` naming is understood (it names the envelope schema)", Report: Warning},

	// Kafka Connect.
	{Name: "name", Scope: ScopeConnect, Status: Same, Text: "`kafka.client_id` connector-producer-<name>-0, the client id Kafka Connect's producer has"},
	{Name: "tasks.max", Scope: ScopeConnect, Default: "1", Status: NoEffect, Text: "one relay per outbox table, as Debezium's one task", Report: Info},
	{Name: "key.converter, value.converter", Scope: ScopeConnect, Default: "the worker's", Status: WithNote, Text: "`routing.key_format`/`routing.value_format`: JsonConverter (json, json+schema), StringConverter (string), ByteArrayConverter and Debezium's pass-through BinaryDataConverter (ByteBufferConverter before 2.0) (bytes: a bytea column's bytes unchanged, an empty one as an empty value, NULL as null), Confluent's io.confluent.connect.avro.AvroConverter and Apicurio's io.apicurio.registry.utils.converter.AvroConverter (avro: the schema AvroData derives registered in `schema_registry`, the Confluent wire format; Apicurio's with a warning, as outboxrelay writes the Confluent format through its ccompat API), Confluent's io.confluent.connect.json.JsonSchemaConverter (json_sr: the JSON Schema JsonSchemaData derives, schemaType JSON) and io.confluent.connect.protobuf.ProtobufConverter (protobuf: the .proto ProtobufData derives, schemaType PROTOBUF, with message indexes), registered and written the same way; others refused. Unset, the worker's is assumed to be JsonConverter with schemas, as in Debezium's images"},
	{Name: "key.converter.delegate.converter.type, value.converter.delegate.converter.type", Scope: ScopeConnect, Default: "(none)", Status: WithNote, Text: "BinaryDataConverter's converter for what is not bytes: `routing.key_delegate_format`/`routing.value_delegate_format`, JsonConverter (json, json+schema, by its own `delegate.converter.type.schemas.enable`) or StringConverter (string). Without one, a key or payload column that is not bytea is refused at start (Kafka Connect fails on the first record)"},
	{Name: "key.converter.schema.registry.url, value.converter.schema.registry.url", Scope: ScopeConnect, Default: "(required)", Status: Same, Text: "`schema_registry.url`, shared by key and value (values that differ are refused)"},
	{Name: "key.converter.basic.auth.credentials.source, basic.auth.user.info", Scope: ScopeConnect, Default: "URL", Status: WithNote, Text: "USER_INFO: `schema_registry.username` and the password (`schema_registry.password_file` when translated); URL: the user in the URL; SASL_INHERIT and others refused"},
	{Name: "key.converter.auto.register.schemas, value.converter.auto.register.schemas", Scope: ScopeConnect, Default: "true", Status: Same, Text: "`schema_registry.auto_register`"},
	{Name: "key.converter.use.latest.version, value.converter.use.latest.version", Scope: ScopeConnect, Default: "false", Status: Same, Text: "`schema_registry.use_latest_version` (with auto.register.schemas false; refused with ProtobufConverter, whose records would need the latest .proto's field numbers)"},
	{Name: "key.converter.key.subject.name.strategy, value.converter.value.subject.name.strategy", Scope: ScopeConnect, Default: "TopicNameStrategy", Status: Same, Text: "`schema_registry.subject_name_strategy`: topic, record, topic_record; custom strategies refused"},
	{Name: "key.converter.schema.registry.ssl.*, value.converter.schema.registry.ssl.*", Scope: ScopeConnect, Status: WithNote, Text: "Java stores are refused: give PEM files in `schema_registry.tls`", Report: Unsupported},
	{Name: "key.converter.connect.meta.data, value.converter.connect.meta.data", Scope: ScopeConnect, Default: "true", Status: WithNote, Text: "true only: the schemas carry connect.name and connect.version", Report: Unsupported},
	{Name: "key.converter.object.additional.properties, value.converter.object.additional.properties", Scope: ScopeConnect, Default: "true", Status: WithNote, Text: "JsonSchemaConverter: true only (the JSON Schema has no additionalProperties)", Report: Unsupported},
	{Name: "key.converter.json.indent.output, value.converter.json.indent.output", Scope: ScopeConnect, Default: "false", Status: WithNote, Text: "JsonSchemaConverter: false only (compact JSON records)", Report: Unsupported},
	{Name: "key.converter.ignore.default.for.nullables, value.converter.ignore.default.for.nullables", Scope: ScopeConnect, Default: "false", Status: WithNote, Text: "JsonSchemaConverter, ProtobufConverter: false only (a NULL column with a default is written as its default)", Report: Unsupported},
	{Name: "key.converter.scrub.invalid.names, wrapper.for.nullables, optional.for.nullables", Scope: ScopeConnect, Default: "false", Status: WithNote, Text: "ProtobufConverter: false only (a name that is no Protobuf identifier is the event's error, as Confluent's converter fails on it; an optional field is a plain proto3 field)", Report: Unsupported},
	{Name: "key.converter.schemas.enable, value.converter.schemas.enable", Scope: ScopeConnect, Default: "true", Status: Same, Text: "json (false) or json+schema (true)"},
	{Name: "header.converter", Scope: ScopeConnect, Default: "SimpleHeaderConverter", Status: Same, Text: "`routing.header_format`: simple, json, json+schema"},
	{Name: "value.converter.replace.null.with.default", Scope: ScopeConnect, Default: "true", Status: WithNote, Text: "true only", Report: Unsupported},
	{Name: "transforms", Scope: ScopeConnect, Status: WithNote, Text: "exactly one io.debezium.transforms.outbox.EventRouter, optionally after io.debezium.connector.postgresql.transforms.DecodeLogicalDecodingMessageContent (see message.prefix.include.list), then any of Kafka Connect's transforms below (`routing.transforms`); any other transform, and any before the router, is refused"},
	{Name: "producer.override.compression.type", Scope: ScopeConnect, Default: "none", Status: Same, Text: "`kafka.compression`"},
	{Name: "producer.override.max.request.size", Scope: ScopeConnect, Default: "1048576", Status: Same, Text: "`kafka.max_record_bytes`"},
	{Name: "producer.override.security.protocol, sasl.mechanism, sasl.jaas.config", Scope: ScopeConnect, Default: "PLAINTEXT", Status: WithNote, Text: "`kafka.tls.enabled`, `kafka.sasl.*`: SSL, SASL_SSL and SASL_PLAINTEXT with PLAIN or SCRAM-SHA-256/512 (username and password from a PlainLoginModule or ScramLoginModule JAAS line); GSSAPI and OAUTHBEARER are refused"},
	{Name: "producer.override.ssl.truststore.location, ssl.keystore.location", Scope: ScopeConnect, Status: WithNote, Text: "`kafka.tls.ca_file`, `kafka.tls.cert_file`/`key_file` for PEM stores (ssl.*.type=PEM); JKS and PKCS12 are refused (convert them to PEM)"},
	{Name: "producer.override.partitioner.class", Scope: ScopeConnect, Status: No, Text: "outboxrelay partitions by murmur2 of the key, the Java default", Report: Unsupported},
	{Name: "producer.override.* (others)", Scope: ScopeConnect, Status: NoEffect, Text: "outboxrelay always produces with acks=all and idempotence", Report: Info},
	{Name: "errors.tolerance", Scope: ScopeConnect, Default: "none", Status: WithNote, Text: "all is not supported: a bad row stops the relay or goes to `kafka.dead_letter_topic`", Report: Warning},
	{Name: "topic.creation.*", Scope: ScopeConnect, Status: WithNote, Text: "`kafka.topic_creation`: with topic.creation.default.partitions and .replication.factor set, each topic is created before its first record; other default.* keys are topic configs; topic.creation.groups with include/exclude patterns (RE2), the first match winning, unset settings from the default group"},
	{Name: "config.providers ${file:...}, ${directory:...}, ${env:...}", Scope: ScopeConnect, Status: WithNote, Text: "resolved as Kafka's FileConfigProvider, DirectoryConfigProvider and EnvVarConfigProvider would; other providers are refused by name"},

	// Kafka Connect's transforms after the router (transforms_*.go).
	{Name: "RegexRouter: regex, replacement", Scope: ScopeTransform, Status: WithNote, Text: "a topic the regex matches whole becomes its replaceFirst; RE2 syntax (lookaround and backreferences refused), Java's replacement syntax"},
	{Name: "TimestampRouter: topic.format, timestamp.format", Scope: ScopeTransform, Default: "${topic}-${timestamp}, yyyyMMdd", Status: WithNote, Text: "the record timestamp (the commit time, or the timestamp column) in UTC, SimpleDateFormat's letters and English names; w, W and Y (the locale's weeks) are refused"},
	{Name: "InsertHeader: header, value.literal", Scope: ScopeTransform, Status: WithNote, Text: "added last, typed as Values.parseString types it: null, boolean, INT8 to INT64, FLOAT32/FLOAT64, text; a literal it would read as an array, map, date, time or decimal is refused"},
	{Name: "DropHeaders: headers", Scope: ScopeTransform, Status: Same, Text: "every header of a listed name"},
	{Name: "HeaderFrom$Key, HeaderFrom$Value: fields, headers, operation, replace.null.with.default", Scope: ScopeTransform, Default: "replace.null.with.default true", Status: WithNote, Text: "move or copy struct fields to headers (added last, each with its field's schema); needs a struct: envelope fields or an expanded payload for $Value, a ValueToKey before it for $Key"},
	{Name: "InsertField$Key, InsertField$Value: topic.field, partition.field, timestamp.field, static.field, static.value, replace.null.with.default", Scope: ScopeTransform, Status: WithNote, Text: "fields after the struct's own (optional, or required with a ! suffix); partition only with a partition placement, as the record has none otherwise; offset.field is refused (sink records only, it fails every source record); a struct as for HeaderFrom"},
	{Name: "ReplaceField$Key, ReplaceField$Value: exclude, include, renames, replace.null.with.default", Scope: ScopeTransform, Status: Same, Text: "exclude wins over include, renames from:to; a struct as for HeaderFrom; blacklist and whitelist (removed in Kafka 4.0) are refused"},
	{Name: "ValueToKey: fields, replace.null.with.default", Scope: ScopeTransform, Status: WithNote, Text: "the key becomes an unnamed struct of the value's fields, and is partitioned by as any key; needs envelope fields or an expanded payload; a tombstone fails, as in Kafka Connect"},
	{Name: "Filter", Scope: ScopeTransform, Status: WithNote, Text: "drops the record its predicate selects: no record is written and the event counts as published"},
	{Name: "predicate, negate (on any of these)", Scope: ScopeTransform, Status: Same, Text: "`routing.predicates`: TopicNameMatches (pattern, RE2 syntax, matched against the whole topic), HasHeaderKey (name), RecordIsTombstone (a null value, with or without a schema); other predicates are refused"},
	{Name: "transforms.<name>.* (others)", Scope: ScopeTransform, Status: No, Text: "any other transform or option is refused, naming it; so are ones Kafka Connect's would fail on every record with (a struct transform on a value that is the payload column)", Report: Unsupported},

	// Debezium Server.
	{Name: "debezium.source.*", Scope: ScopeServer, Status: Same, Text: "the connector options above"},
	{Name: "debezium.transforms, debezium.predicates", Scope: ScopeServer, Status: Same, Text: "as transforms and predicates"},
	{Name: "debezium.format.key, debezium.format.value", Scope: ScopeServer, Default: "json", Status: Same, Text: "json, jsonbytearray (json+schema unless .schemas.enable=false), simplestring (string)"},
	{Name: "debezium.format.header", Scope: ScopeServer, Default: "json", Status: Same, Text: "json, jsonbytearray (json+schema unless debezium.format.header.schemas.enable=false)"},
	{Name: "debezium.sink.type", Scope: ScopeServer, Default: "(required)", Status: Same, Text: "kafka only"},
	{Name: "debezium.sink.kafka.producer.bootstrap.servers", Scope: ScopeServer, Status: Same, Text: "`kafka.brokers`"},
	{Name: "debezium.sink.kafka.producer.*", Scope: ScopeServer, Status: WithNote, Text: "as producer.override.* above"},
	{Name: "record timestamp", Scope: ScopeServer, Status: WithNote, Text: "Debezium Server leaves it to the producer (the send time); outboxrelay writes the commit time or routing.timestamp_column"},
	{Name: "${NAME} and ${NAME:default}", Scope: ScopeServer, Status: WithNote, Text: "expanded from the file and the environment; an expression that resolves nowhere stays as written"},
}

// CompatibilityTable is the table of Debezium options in docs/debezium.md.
func CompatibilityTable() string {
	var b strings.Builder
	b.WriteString("| option | Debezium default | status | in outboxrelay |\n|---|---|---|---|\n")
	for _, o := range Options {
		def := o.Default
		if def == "" {
			def = "(none)"
		}
		fmt.Fprintf(&b, "| %s: `%s` | %s | %s | %s |\n", shortScope(o.Scope), o.Name, strings.ReplaceAll(def, "|", `\|`), o.Status, o.Text)
	}
	return b.String()
}

func shortScope(s Scope) string {
	switch s {
	case ScopeRouter:
		return "router"
	case ScopeConnector:
		return "connector"
	case ScopeConnect:
		return "Connect"
	case ScopeTransform:
		return "transform"
	}
	return "Server"
}

// lookup finds the catalogue entry an option falls under: by its name, as
// one of a comma-separated list of names, or by a name ending in ".*".
func lookup(scope Scope, name string) (Option, bool) {
	for _, o := range Options {
		if o.Scope != scope {
			continue
		}
		for n := range strings.SplitSeq(o.Name, ",") {
			n = strings.TrimSpace(n)
			if n == name || (strings.HasSuffix(n, ".*") && strings.HasPrefix(name, strings.TrimSuffix(n, "*"))) {
				return o, true
			}
		}
	}
	return Option{}, false
}
