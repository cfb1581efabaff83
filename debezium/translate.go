package debezium

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Translation is a Debezium configuration in outboxrelay's terms: native
// configuration keys, and a note for every option that is not simply
// mapped.
type Translation struct {
	Kind  Kind
	Name  string
	Notes []Note

	settings []setting
	// secrets are left out of YAML(false): the database password and the
	// client key's passphrase (put in postgres.url) and other native
	// keys' values.
	password, sslPassword string
	secrets               map[string]string
	// mapped are the options the translation used, for tests that check
	// every option is either mapped or noted.
	mapped []string
}

// setting is one native key, in the order the translation wrote it.
type setting struct {
	key   string
	value any // string, bool, int, []string or a *yaml.Node
}

// Err reports every unsupported option at once, each an [*OptionError]
// naming it; nil when the configuration can run.
func (t *Translation) Err() error {
	var errs []error
	for _, n := range t.Notes {
		if n.Severity == Unsupported {
			errs = append(errs, &OptionError{Option: n.Option, Err: errors.New(n.Text)})
		}
	}
	return errors.Join(errs...)
}

// Setting returns the native value written for key, for tests and tools.
func (t *Translation) Setting(key string) (any, bool) {
	for _, s := range t.settings {
		if s.key == key {
			return s.value, true
		}
	}
	return nil, false
}

func (t *Translation) hasSetting(key string) bool {
	_, ok := t.Setting(key)
	return ok
}

// YAML renders the native configuration. With secrets false the database
// password is left out of postgres.url (libpq's PGPASSWORD or a
// ~/.pgpass file supplies it, or OUTBOXRELAY_POSTGRES_URL replaces the
// URL); notes become comments at the top.
func (t *Translation) YAML(secrets bool) ([]byte, error) {
	root := &yaml.Node{Kind: yaml.MappingNode}
	var head strings.Builder
	fmt.Fprintf(&head, "Translated from a %s", t.Kind)
	if t.Name != "" {
		fmt.Fprintf(&head, " (connector %q)", t.Name)
	}
	head.WriteString(" by `outboxrelay debezium translate`.")
	if len(t.Notes) > 0 {
		head.WriteString("\nNotes:")
		for _, n := range t.Notes {
			head.WriteString("\n  " + n.String())
		}
	}
	root.HeadComment = commentText(head.String())
	for _, s := range t.settings {
		v := s.value
		if s.key == "postgres.url" && secrets {
			if u, err := t.withSecrets(v.(string)); err == nil {
				v = u
			}
		}
		put(root, strings.Split(s.key, "."), v)
	}
	if secrets {
		for _, k := range slices.Sorted(maps.Keys(t.secrets)) {
			put(root, strings.Split(k, "."), t.secrets[k])
		}
	}
	doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}
	var b strings.Builder
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return []byte(b.String()), enc.Close()
}

// commentText escapes what a YAML comment cannot hold, as Go would quote
// it: control characters but the newlines between lines, and bytes that
// are not UTF-8. A properties file can name an option with one ("\u0000"
// in a key), and the translation's YAML must still load.
func commentText(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r != '\n' && (unicode.IsControl(r) || r == 0xFEFF || r == 0xFFFE || r == 0xFFFF):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func put(m *yaml.Node, path []string, v any) {
	for i := 0; i < len(m.Content); i += 2 {
		if m.Content[i].Value == path[0] {
			if len(path) == 1 {
				m.Content[i+1] = valueNode(v)
			} else {
				put(m.Content[i+1], path[1:], v)
			}
			return
		}
	}
	k := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: path[0]}
	if len(path) == 1 {
		m.Content = append(m.Content, k, valueNode(v))
		return
	}
	child := &yaml.Node{Kind: yaml.MappingNode}
	m.Content = append(m.Content, k, child)
	put(child, path[1:], v)
}

func valueNode(v any) *yaml.Node {
	switch x := v.(type) {
	case *yaml.Node:
		return x
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(x)}
	case int:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(x)}
	case []string:
		n := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, s := range x {
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s})
		}
		return n
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: fmt.Sprint(v)}
}

// translator holds the state of one translation.
type translator struct {
	t   *Translation
	env Env

	conn      *Properties // connector options
	used      map[string]bool
	router    string // the outbox router's transform name
	routerPfx string // its option prefix in conn
	server    bool
	formats   map[string]string // debezium.format.* (Server)
	producer  *Properties       // producer settings
	prodLabel string            // how producer options are named in notes
	// decode is the DecodeLogicalDecodingMessageContent transform's name
	// when it comes before the router (translate_messages.go).
	decode string
	// chain are the transforms after the router, and preds the
	// predicates they name (translate_transforms.go).
	chain []Transform
	preds []Predicate
}

// Translate maps a Debezium configuration to outboxrelay's. Options
// outboxrelay cannot honour are notes of severity [Unsupported], which
// [Translation.Err] reports; the rest are mapped or noted.
func Translate(f *File, env Env) *Translation {
	tr := &translator{
		t:        &Translation{Kind: f.Kind, Name: f.Name, secrets: map[string]string{}},
		env:      env,
		conn:     NewProperties(),
		used:     map[string]bool{},
		formats:  map[string]string{},
		producer: NewProperties(),
	}
	if f.Kind == ServerProperties {
		tr.server = true
		tr.splitServer(f.Props)
	} else {
		tr.splitConnect(f.Props)
	}
	tr.connector()
	tr.transforms()
	tr.messages()
	tr.converters()
	tr.producerOptions()
	tr.topicCreation()
	tr.leftovers()
	for _, k := range tr.conn.Keys() {
		if tr.used[k] {
			tr.t.mapped = append(tr.t.mapped, k)
		}
	}
	for _, k := range tr.producer.Keys() {
		tr.t.mapped = append(tr.t.mapped, tr.prodLabel+k)
	}
	return tr.t
}

func (tr *translator) note(option string, sev Severity, format string, args ...any) {
	tr.t.Notes = append(tr.t.Notes, Note{Option: option, Severity: sev, Text: fmt.Sprintf(format, args...)})
}

func (tr *translator) set(key string, v any) {
	for i, s := range tr.t.settings {
		if s.key == key {
			tr.t.settings[i].value = v
			return
		}
	}
	tr.t.settings = append(tr.t.settings, setting{key: key, value: v})
}

// get returns a connector option, marking it used.
func (tr *translator) get(key string) (string, bool) {
	v, ok := tr.conn.Get(key)
	if ok {
		tr.used[key] = true
	}
	return v, ok
}

// resolve applies config providers to one value.
func (tr *translator) resolve(option, v string) string {
	out, err := resolveProviders(option, v, tr.env, tr.server)
	if err != nil {
		tr.note(option, Unsupported, "%v", errors.Unwrap(err))
	}
	return out
}

func (tr *translator) splitConnect(p *Properties) {
	for _, k := range p.Keys() {
		v, _ := p.Get(k)
		v = tr.resolve(k, v)
		if rest, ok := strings.CutPrefix(k, "producer.override."); ok {
			tr.producer.Set(rest, v)
			continue
		}
		tr.conn.Set(k, v)
	}
	tr.prodLabel = "producer.override."
}

func (tr *translator) splitServer(p *Properties) {
	tr.server = true
	tr.prodLabel = "debezium.sink.kafka.producer."
	for _, k := range p.Keys() {
		v, _ := p.Get(k)
		v = tr.resolve(k, v)
		v, unresolved := expandServer(v, p, tr.env)
		for _, ref := range unresolved {
			tr.note(k, Warning, "%s resolves to no property or environment variable and stays as written (Debezium Server would not start)", ref)
		}
		switch {
		case strings.HasPrefix(k, "debezium.source."):
			tr.conn.Set(strings.TrimPrefix(k, "debezium.source."), v)
		case k == "debezium.transforms" || strings.HasPrefix(k, "debezium.transforms.") ||
			k == "debezium.predicates" || strings.HasPrefix(k, "debezium.predicates."):
			tr.conn.Set(strings.TrimPrefix(k, "debezium."), v)
		case strings.HasPrefix(k, "debezium.format."):
			tr.formats[strings.TrimPrefix(k, "debezium.format.")] = v
		case strings.HasPrefix(k, "debezium.sink.kafka.producer."):
			tr.producer.Set(strings.TrimPrefix(k, "debezium.sink.kafka.producer."), v)
		case k == "debezium.sink.type":
			if v != "kafka" {
				tr.note(k, Unsupported, "sink %q is not supported; outboxrelay writes to Kafka (debezium.sink.type=kafka)", v)
			}
		case strings.HasPrefix(k, "quarkus."), strings.HasPrefix(k, "debezium.api."), strings.HasPrefix(k, "debezium.sink.kafka."):
			tr.note(k, Info, "Debezium Server's own setting; no effect on records")
		default:
			tr.note(k, Warning, "unknown Debezium Server option; ignored")
		}
	}
	if _, ok := p.Get("debezium.sink.type"); !ok {
		tr.note("debezium.sink.type", Unsupported, "not set; outboxrelay needs debezium.sink.type=kafka")
	}
}

// connector maps the PostgreSQL connector's options.
func (tr *translator) connector() {
	tr.connectorClass()
	tr.postgresURL()
	tr.set("source", "cdc")
	table := tr.outboxTables()
	tr.pluginName()
	tr.slotAndPublication(table)
	if v, ok := tr.get("status.update.interval.ms"); ok {
		if d, ok := tr.millis("status.update.interval.ms", v); ok {
			tr.set("cdc.status_interval", d)
		}
	}
	tr.heartbeat()
	for _, k := range []string{"topic.prefix", "database.server.name"} {
		if v, ok := tr.get(k); ok {
			tr.set("routing.schema_topic_prefix", v)
			break
		}
	}
	if _, ok := tr.t.Setting("routing.schema_topic_prefix"); !ok {
		tr.note("topic.prefix", Warning, "not set (Debezium requires it): envelope struct schemas are named <schema>.<table>.<aggregate type>.Value")
	}
	tr.snapshotMode()
	tr.versionedOptions()
	tr.contextHeaders()
	tr.valueModes()
}

// connectorClass checks connector.class and names the producer's client
// id after the connector, as Kafka Connect does.
func (tr *translator) connectorClass() {
	if v, ok := tr.get("connector.class"); ok && v != "io.debezium.connector.postgresql.PostgresConnector" {
		tr.note("connector.class", Unsupported, "%s is not Debezium's PostgreSQL connector (io.debezium.connector.postgresql.PostgresConnector)", v)
	} else if !ok {
		tr.note("connector.class", Warning, "not set; taken to be io.debezium.connector.postgresql.PostgresConnector")
	}
	if name, ok := tr.get("name"); ok && !tr.server {
		tr.set("kafka.client_id", "connector-producer-"+name+"-0")
	} else if tr.t.Name != "" && !tr.server {
		tr.set("kafka.client_id", "connector-producer-"+tr.t.Name+"-0")
	}
}

// outboxTables maps the table filters onto the outbox tables and
// patterns, and returns how notes name them.
func (tr *translator) outboxTables() string {
	tables, patterns := tr.tables()
	switch {
	case len(tables) == 1:
		tr.set("outbox.table", tables[0])
	case len(tables) > 1:
		tr.set("outbox.tables", tables)
	}
	if len(patterns) > 0 {
		tr.set("outbox.table_patterns", patterns)
	}
	table := strings.Join(tables, ", ")
	if len(patterns) > 0 {
		table = strings.TrimPrefix(table+", the tables matching "+strings.Join(patterns, ", "), ", ")
	}
	return table
}

// pluginName checks plugin.name: outboxrelay reads pgoutput slots only.
func (tr *translator) pluginName() {
	switch plugin, ok := tr.get("plugin.name"); {
	case !ok:
		tr.note("plugin.name", Warning, "not set, and Debezium's default is decoderbufs, which outboxrelay cannot read: outboxrelay creates the slot with pgoutput when it is missing, and stops with an error if the slot exists with another plugin (switch Debezium to plugin.name=pgoutput with a new slot first)")
	case plugin == "pgoutput":
	case plugin == "decoderbufs":
		tr.note("plugin.name", Unsupported, "decoderbufs slots cannot be read by outboxrelay, which speaks pgoutput: switch Debezium to plugin.name=pgoutput (with a new slot.name; let it run until the old slot is drained), then take over that slot")
	default:
		tr.note("plugin.name", Unsupported, "%q is not supported; outboxrelay reads pgoutput slots only: switch Debezium to plugin.name=pgoutput first", plugin)
	}
}

// slotAndPublication maps the slot, the publication and how it is
// created; table names the outbox tables in notes.
func (tr *translator) slotAndPublication(table string) {
	slot, ok := tr.get("slot.name")
	if !ok {
		slot = "debezium"
	}
	tr.set("cdc.slot", slot)
	pub, ok := tr.get("publication.name")
	if !ok {
		pub = "dbz_publication"
	}
	tr.set("cdc.publication", pub)
	switch mode, _ := tr.get("publication.autocreate.mode"); mode {
	case "", "all_tables", "filtered":
		tr.set("cdc.create_publication", true)
		if mode != "filtered" {
			tr.note("publication.autocreate.mode", Info, "a missing publication %s is created FOR TABLE %s WITH (publish = 'insert'), not FOR ALL TABLES; an existing one is used as it is", pub, table)
		}
		if len(tr.t.TablePatterns()) > 0 {
			// Debezium's all_tables publication holds a new table from its
			// creation; one FOR TABLE gets it only when the relay adds it.
			tr.note("publication.autocreate.mode", Warning, "with table patterns, a matching table created later is added to %s within seconds, and rows committed in it before that are reported, not relayed: create %s FOR ALL TABLES first, as Debezium's all_tables does, or add each new outbox table to it in the transaction that creates it", pub, pub)
		}
	case "disabled", "no_tables":
		tr.set("cdc.create_publication", false)
		if mode == "no_tables" {
			tr.note("publication.autocreate.mode", Info, "no_tables: the publication is not created; it must include %s", table)
		}
	default:
		tr.note("publication.autocreate.mode", Unsupported, "%q is not all_tables, filtered, disabled or no_tables", mode)
	}
}

// heartbeat maps heartbeat.interval.ms and heartbeat.action.query.
func (tr *translator) heartbeat() {
	beating := false
	if v, ok := tr.get("heartbeat.interval.ms"); ok && v != "0" {
		if d, ok := tr.millis("heartbeat.interval.ms", v); ok {
			tr.set("cdc.heartbeat_interval", d)
			beating = true
			tr.note("heartbeat.interval.ms", Info, "cdc.heartbeat_interval: a logical message (pg_logical_emit_message) keeps the slot moving while the outbox is idle; no records go to __debezium-heartbeat.<topic.prefix>")
		}
	}
	tr.heartbeatQuery(beating)
}

// snapshotMode maps snapshot.mode: outboxrelay snapshots only a slot it
// creates.
func (tr *translator) snapshotMode() {
	mode, ok := tr.get("snapshot.mode")
	if !ok {
		mode = "initial" // Debezium's default
	}
	// Debezium's EnumeratedValue.parse trims and ignores case.
	switch mode = strings.ToLower(strings.TrimSpace(mode)); mode {
	case "initial", "when_needed":
		tr.set("cdc.snapshot", "initial")
		tr.note("snapshot.mode", Info, "%s: cdc.snapshot initial: when outboxrelay creates the slot, it first publishes the rows already in the table, from the slot's exported snapshot; an existing slot (taken over from Debezium) is streamed from its confirmed position without a snapshot", mode)
	case "no_data":
		tr.set("cdc.snapshot", "never")
	case "never":
		tr.set("cdc.snapshot", "never")
		tr.note("snapshot.mode", Info, "never: removed in Debezium 3.3, which refuses it (no_data replaced it in 2.6); read as no_data: cdc.snapshot never")
	case "when_needed_no_data":
		tr.note("snapshot.mode", Unsupported, "when_needed_no_data is a mode of Debezium's SQL Server connector (3.6 and later), which its PostgreSQL connector refuses")
	default:
		tr.note("snapshot.mode", Unsupported, "%q: outboxrelay snapshots only when it creates the slot (initial, when_needed) or never (never, no_data)", mode)
	}
}

// contextHeaders maps extended.headers.enabled (CommonConnectorConfig,
// Debezium 3.2.1 and later, default true): EventDispatcher.
// getExtendedHeaders adds DebeziumHeaderProducer.contextHeaders to every
// change event, and the outbox router keeps the record's headers, adding
// its own after them. Older Debezium versions have no such option and no
// such headers.
func (tr *translator) contextHeaders() {
	v, ok := tr.get("extended.headers.enabled")
	if _, prefixed := tr.t.Setting("routing.schema_topic_prefix"); !prefixed && (!ok || strings.EqualFold(strings.TrimSpace(v), "true")) {
		// Debezium refuses to start without topic.prefix, the
		// connectorLogicalName header's value.
		tr.note("extended.headers.enabled", Warning, "without topic.prefix there is no connectorLogicalName: the __debezium.context.* headers are left out")
		return
	}
	if !ok {
		tr.set("routing.context_headers", true)
		tr.note("extended.headers.enabled", Info, "not set: true since Debezium 3.2, so every record starts with the __debezium.context.* headers, as Debezium 3.4 and later write them (runId new at each start; 3.2 and 3.3 have no runId); set it false if your Debezium is older than 3.2")
		return
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true":
		tr.set("routing.context_headers", true)
	case "false":
		tr.set("routing.context_headers", false)
	default:
		tr.note("extended.headers.enabled", Unsupported, "%q is not true or false", v)
	}
}

// valueModes maps the connector options that type columns.
func (tr *translator) valueModes() {
	for _, m := range []struct {
		option, native string
		allowed        []string
	}{
		{"time.precision.mode", "routing.time_precision", []string{"adaptive", "adaptive_time_microseconds", "connect"}},
		{"decimal.handling.mode", "routing.decimal_handling", []string{"precise", "double", "string"}},
		{"interval.handling.mode", "routing.interval_handling", []string{"numeric", "string"}},
		{"binary.handling.mode", "", []string{"bytes"}},
	} {
		v, ok := tr.get(m.option)
		if !ok {
			continue
		}
		// Debezium's EnumeratedValue.parse trims and ignores case.
		v = strings.ToLower(strings.TrimSpace(v))
		if !slices.Contains(m.allowed, v) {
			o, _ := lookup(ScopeConnector, m.option)
			tr.note(m.option, Unsupported, "%q: %s", v, o.Text)
			continue
		}
		if m.native != "" {
			tr.set(m.native, v)
		}
	}
}

// heartbeatQuery maps heartbeat.action.query. Debezium runs it only with
// a heartbeat (HeartbeatFactory.getScheduledHeartbeat returns no heartbeat
// when heartbeat.interval.ms is 0) and only when it is not blank
// (DatabaseHeartbeatFactory), on a connection of its own, at every
// heartbeat (CompositeHeartbeat), with JDBC's execute and commit
// (DatabaseHeartbeatImpl, JdbcConnection.execute).
func (tr *translator) heartbeatQuery(beating bool) {
	q, ok := tr.get("heartbeat.action.query")
	switch {
	case !ok || strings.TrimSpace(q) == "":
	case !beating:
		tr.note("heartbeat.action.query", Info, "not run: heartbeat.interval.ms is 0 or unset, and Debezium runs the query only at a heartbeat")
	default:
		tr.set("cdc.heartbeat_query", q)
		tr.note("heartbeat.action.query", Info, "cdc.heartbeat_query: run as written at every heartbeat, after its logical message, on the heartbeat's connection; a failure is logged at ERROR and the relay goes on (Debezium stops the task on undefined_table and admin_shutdown)")
	}
}
