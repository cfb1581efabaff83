package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gopkg.in/yaml.v3"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/metrics"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
	"github.com/outboxrelay/outboxrelay/poller"
	"github.com/outboxrelay/outboxrelay/sink"
)

// Config is the whole configuration file.
type Config struct {
	Postgres Postgres `yaml:"postgres"`
	Outbox   Outbox   `yaml:"outbox"`
	Source   Source   `yaml:"source" doc:"Where events come from: cdc (logical replication) or poll."`
	// The sources' sections are their own configs, which name, document,
	// default and validate every key; the postgres and outbox keys they
	// share are filled in from those sections (CDCConfig, PollConfigs).
	CDC     cdc.Config    `yaml:"cdc"`
	Poll    poller.Config `yaml:"poll"`
	Kafka   Kafka         `yaml:"kafka"`
	Routing Routing       `yaml:"routing"`
	// SchemaRegistry serves format avro (registry.go).
	SchemaRegistry SchemaRegistry `yaml:"schema_registry"`
	Log            Log            `yaml:"log"`
	Shutdown       Shutdown       `yaml:"shutdown"`
	HTTP           HTTP           `yaml:"http"`
	Metrics        Metrics        `yaml:"metrics"`
}

// Postgres is the database connection.
type Postgres struct {
	URL string `yaml:"url" doc:"PostgreSQL connection URL or key=value string; the role needs REPLICATION for cdc." default:"(required)"`
	// URLFile and PasswordFile read secrets from files (security.go).
	URLFile      string `yaml:"url_file" doc:"Read postgres.url from this file instead (a mounted secret); a trailing newline is dropped." default:"(none)"`
	PasswordFile string `yaml:"password_file" doc:"Read the password from this file and add it to postgres.url, which must then have none." default:"(none)"`
	// Net is the bounds on a silent or unanswering connection
	// (docs/connections.md), keys of this section.
	Net pgsql.Network `yaml:",inline"`
}

// Network is the bounds on silent connections every PostgreSQL user of
// the relay applies.
func (p Postgres) Network() pgsql.Network { return p.Net }

// Outbox is the outbox table.
type Outbox struct {
	Table  string        `yaml:"table" doc:"The outbox table, schema.table."`
	Tables []OutboxTable `yaml:"tables" doc:"Several outbox tables, instead of outbox.table: each schema.table, or {name, columns, routing} with the columns and routing (topic_prefix, topic, type_header) in which it differs (in the environment: the names, comma-separated). Source cdc reads them from one slot and one publication; source poll polls each, with its own dead-letter table." default:"(none)"`
	// TablePatterns are Debezium's table.include.list as patterns
	// (cdc.Config.TablePatterns).
	TablePatterns []string            `yaml:"table_patterns" doc:"Regular expressions (RE2), each matched against the whole schema.table of a table, ignoring case, as Debezium's table.include.list: every matching table is an outbox table with outbox.columns, besides outbox.table(s). Matched against the catalog at every start; while the relay runs, a matching table created later is added to the publication (cdc.create_publication) and relayed from the transaction after that; rows it held before are reported at ERROR (a FOR ALL TABLES publication, or adding the table in the transaction that creates it, leaves no gap). Source cdc only. In the environment the list is comma-separated, so a pattern there cannot hold a comma." default:"(none)"`
	Columns       connector.ColumnMap `yaml:"columns"`
}

// tableNames are the names in outbox.tables; nil when it is empty.
func (o Outbox) tableNames() []string {
	if len(o.Tables) == 0 {
		return nil
	}
	return o.TableNames()
}

// TableNames are the outbox tables: outbox.tables, or outbox.table; none
// when only outbox.table_patterns name them.
func (o Outbox) TableNames() []string {
	if len(o.Tables) == 0 {
		if o.Table == "" && len(o.TablePatterns) > 0 {
			return nil
		}
		return []string{o.Table}
	}
	names := make([]string, len(o.Tables))
	for i, t := range o.Tables {
		names[i] = t.Name
	}
	return names
}

// Kafka is the producer.
type Kafka struct {
	// Config is the producer's own keys, which the sink names, documents,
	// defaults and validates.
	sink.Config         `yaml:",inline"`
	CheckpointTopic     string        `yaml:"checkpoint_topic" doc:"Compacted topic where the CDC relay records what Kafka has acknowledged (one small record per relay, keyed by cluster, database and slot), and reads it back on start to tell a slot that is merely behind from one that was lost; created with cleanup.policy=compact when missing (docs/checkpoint.md)."`
	Delivery            Delivery      `yaml:"delivery" doc:"at_least_once, or exactly_once: the relay publishes in Kafka transactions, each committing its events with the checkpoint that covers them (the poller: with the claim's rows marked just before), so read_committed consumers see every event once, in order, across crashes and takeovers (docs/exactly-once.md)."`
	TransactionalID     string        `yaml:"transactional_id" doc:"With exactly_once, the transactional.id: the same on every instance of one CDC relay, so the one that takes over fences the others. With the poller, the prefix of each instance's own id, <prefix>-<instance number>; its default is then outboxrelay-poll-<database>." default:"(outboxrelay-<database>-<cdc.slot>)"`
	TransactionInterval time.Duration `yaml:"transaction_interval" doc:"With exactly_once, how long a transaction stays open before it commits at the next transaction boundary: what read_committed consumers wait at most, besides Kafka's own latency."`
	DeadLetterTopic     string        `yaml:"dead_letter_topic" doc:"Topic for events that can never be published (bad topic name, too large, NULL id); empty stops the relay on such an event with an error naming it." default:"(none)"`
	// TLS, SASL and AllowPlaintextSASL secure the connection (security.go).
	TLS                KafkaTLS  `yaml:"tls"`
	SASL               KafkaSASL `yaml:"sasl"`
	AllowPlaintextSASL bool      `yaml:"allow_plaintext_sasl" doc:"Allow SASL PLAIN without TLS, which sends the password in the clear; only on a network you trust." default:"false"`
}

// Routing is how an event becomes a record: the runner's routing, whose
// keys connector.Routing names, documents and defaults, and the keys that
// reproduce Debezium's records (debezium.go).
type Routing struct {
	connector.Routing `yaml:",inline"`
	Debezium          DebeziumRouting `yaml:",inline"`
}

// Log is the logger.
type Log struct {
	Level  LogLevel  `yaml:"level" doc:"Least level logged."`
	Format LogFormat `yaml:"format" doc:"Log line format."`
}

// Shutdown is the graceful stop.
type Shutdown struct {
	Timeout time.Duration `yaml:"timeout" doc:"How long a stop waits for in-flight events to be acknowledged."`
}

// EnvPrefix starts every environment variable that sets a key.
const EnvPrefix = "OUTBOXRELAY"

// Load reads the file at path (none when path is empty), applies the
// environment, sets defaults and validates.
func Load(path string, environ []string) (*Config, error) {
	return load(nil, path, environ, true)
}

// load builds a configuration from layers, each over the one before: base
// (a translated Debezium configuration, or nil), the file at path (none
// when empty), the environment, secret files, then the defaults. validate
// says whether to validate the result.
func load(base []byte, path string, environ []string, validate bool) (*Config, error) {
	var c Config
	// Every problem found is reported at once, so a user fixes a file in
	// one round rather than one error per start.
	var errs []error
	if base != nil {
		if err := Parse(base, &c); err != nil {
			return nil, fmt.Errorf("translated Debezium config: %w", err)
		}
	}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read config: %w", err)
		}
		if err := Parse(data, &c); err != nil {
			// An unknown key or a value of the wrong type leaves the rest
			// of the file decoded, so the checks below can still find the
			// other problems; a syntax error leaves nothing to check.
			var te *yaml.TypeError
			if !errors.As(err, &te) {
				return nil, fmt.Errorf("config %s: %w", path, err)
			}
			errs = append(errs, fmt.Errorf("config %s: %w", path, err))
		}
	}
	errs = append(errs, applyEnv(&c, environ), c.readSecretFiles())
	c.setDefaults()
	if validate {
		errs = append(errs, c.Validate())
	}
	if err := joinDistinct(errs...); err != nil {
		return nil, err
	}
	return &c, nil
}

// Parse decodes YAML into c, refusing unknown keys so a typo is an error.
func Parse(data []byte, c *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(c)
	var te *yaml.TypeError
	switch {
	case err == nil || errors.Is(err, io.EOF):
		return nil
	case errors.As(err, &te):
		return explainTypos(te)
	}
	return err
}

// setDefaults fills in every default, each from the SetDefaults of the
// component that owns the key, so that the relay, the dump and the
// reference (Reference) all read the same values.
func (c *Config) setDefaults() {
	if c.Source == "" {
		c.Source = SourceCDC
	}
	if len(c.Outbox.Tables) == 1 && c.Outbox.Table == "" && !c.Outbox.Tables[0].overrides() {
		// One table in the list is outbox.table.
		c.Outbox.Table, c.Outbox.Tables = c.Outbox.Tables[0].Name, nil
	}
	if c.Outbox.Table == "" && len(c.Outbox.Tables) == 0 && len(c.Outbox.TablePatterns) == 0 {
		c.Outbox.Table = "public.outbox"
	}
	c.Outbox.Columns = c.Outbox.Columns.WithDefaults()
	c.Postgres.Net.SetDefaults()
	c.CDC.SetDefaults()
	// The poll section's dead-letter table is named after the outbox
	// table; with several, each has its own and the section's stays as
	// written (validatePoll refuses one).
	dlt := c.Poll.DeadLetterTable
	c.Poll.Table = c.Outbox.Table
	c.Poll.SetDefaults()
	if len(c.Outbox.Tables) > 0 {
		c.Poll.DeadLetterTable = dlt
	}
	c.Kafka.Config.SetDefaults()
	if c.Metrics.MaxTopics == 0 {
		c.Metrics.MaxTopics = metrics.DefaultMaxTopics
	}
	if c.Kafka.CheckpointTopic == "" {
		c.Kafka.CheckpointTopic = sink.DefaultCheckpointTopic
	}
	if c.Kafka.Delivery == "" {
		c.Kafka.Delivery = AtLeastOnce
	}
	c.Routing.Routing = c.Routing.Routing.WithDefaults()
	// kafka.transaction_interval and shutdown.timeout are the runner's;
	// its defaults are its own.
	rc := c.RunnerConfig()
	rc.SetDefaults()
	c.Kafka.TransactionInterval, c.Shutdown.Timeout = rc.TransactionInterval, rc.ShutdownTimeout
	if c.Log.Level == "" {
		c.Log.Level = LevelInfo
	}
	if c.Log.Format == "" {
		c.Log.Format = FormatJSON
	}
	c.HTTP.setDefaults()
}

// Validate reports every problem of every section at once, checking each
// part with the validation of the package that uses it.
//
// A source's own section is checked only when that source is chosen: a CDC
// relay does not use what poll: holds. When source itself is wrong, which
// section was meant cannot be known, so both are checked; otherwise fixing
// the source would only reveal the next problem at the next start.
func (c *Config) Validate() error {
	var errs []error
	checkCDC, checkPoll := c.Source == "cdc", c.Source == "poll"
	if !checkCDC && !checkPoll {
		errs = append(errs, fmt.Errorf("source: %q is not cdc or poll", c.Source))
		checkCDC, checkPoll = true, true
	}
	if checkCDC {
		cc := c.CDCConfig()
		cc.SetDefaults()
		errs = append(errs, cc.Validate())
	}
	if checkPoll {
		errs = append(errs, c.validatePoll())
		if c.Source == "poll" && len(c.CDC.MessagePrefixes) > 0 {
			errs = append(errs, fmt.Errorf("cdc.message_prefixes (%s) needs source cdc: the poller reads rows, not the WAL, so no logical decoding message would ever be relayed", strings.Join(c.CDC.MessagePrefixes, ", ")))
		}
	}
	sc := c.SinkConfig()
	sc.SetDefaults()
	if err := sc.Validate(); err != nil {
		errs = append(errs, err)
	}
	rc := c.RunnerConfig()
	rc.SetDefaults()
	if err := rc.Validate(); err != nil {
		errs = append(errs, err)
	}
	switch c.Kafka.Delivery {
	case "", AtLeastOnce:
	case ExactlyOnce:
		if c.Source == "poll" {
			errs = append(errs, c.validatePollExactlyOnce()...)
		}
	default:
		errs = append(errs, fmt.Errorf("kafka.delivery: %q is neither %s nor %s", c.Kafka.Delivery, AtLeastOnce, ExactlyOnce))
	}
	errs = append(errs, c.validateTables()...)
	if err := c.validateDebezium(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Metrics.validate(); err != nil {
		errs = append(errs, err)
	}
	hc := c.HTTP
	hc.setDefaults()
	if err := hc.validate(); err != nil {
		errs = append(errs, err)
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log.level: %q is not debug, info, warn or error", c.Log.Level))
	}
	switch c.Log.Format {
	case "json", "text":
	default:
		errs = append(errs, fmt.Errorf("log.format: %q is not json or text", c.Log.Format))
	}
	// Both sources check postgres.url and the outbox table and columns,
	// each name with pgident; when both sections are checked, each such
	// problem is said once.
	return joinDistinct(errs...)
}

// CDCConfig is the CDC source's part of c: its section, with the
// postgres and outbox keys it shares.
func (c *Config) CDCConfig() cdc.Config {
	cc := c.CDC
	cc.URL = c.Postgres.URL
	cc.Table, cc.Tables, cc.TablePatterns = c.Outbox.Table, c.Outbox.tableNames(), c.Outbox.TablePatterns
	cc.TableColumns, cc.Columns = c.TableColumns(), c.Outbox.Columns
	cc.Network = c.Postgres.Net
	return cc
}

// SinkConfig is the Kafka sink's part of c: the producer's keys, with the
// connection's security and, with kafka.delivery exactly_once, the
// transaction's id and timeout.
func (c *Config) SinkConfig() sink.Config {
	sc := c.Kafka.Config
	sc.TLS, sc.SASL, sc.AllowPlaintextSASL = c.Kafka.TLS.sink(), c.Kafka.SASL.sink(), c.Kafka.AllowPlaintextSASL
	sc.TransactionalID, sc.TransactionTimeout = c.TransactionalID(), c.transactionTimeout()
	return sc
}

// transactionTimeout is the Kafka transaction timeout: the sink's default,
// or shorter where the poller needs it so.
func (c *Config) transactionTimeout() time.Duration {
	if c.Source != "poll" || c.Kafka.Delivery != ExactlyOnce {
		return 0
	}
	return min(30*time.Second, poller.MaxTransactionTimeout(c.Postgres.Net))
}

// TransactionalID is the sink's transactional id with kafka.delivery
// exactly_once, else empty: kafka.transactional_id, or one made of the
// database and the slot, which every instance of the relay shares. With
// the poller it is the prefix of each instance's own id
// (poller.Instance), by default outboxrelay-poll-<database>.
func (c *Config) TransactionalID() string {
	if c.Kafka.Delivery != ExactlyOnce {
		return ""
	}
	if c.Kafka.TransactionalID != "" {
		return c.Kafka.TransactionalID
	}
	db := ""
	if pc, err := pgconn.ParseConfig(c.Postgres.URL); err == nil {
		db = pc.Database
	}
	if c.Source == "poll" {
		return "outboxrelay-poll-" + db
	}
	cc := c.CDCConfig()
	cc.SetDefaults()
	return "outboxrelay-" + db + "-" + cc.Slot
}

// validatePollExactlyOnce checks what the poller needs to publish exactly
// once: that PostgreSQL ends a frozen instance's claim only after the
// broker has aborted its Kafka transaction.
func (c *Config) validatePollExactlyOnce() []error {
	var errs []error
	if pc, err := pgconn.ParseConfig(c.Postgres.URL); err == nil {
		if v, ok := pc.RuntimeParams["idle_in_transaction_session_timeout"]; ok {
			errs = append(errs, fmt.Errorf("postgres.url sets idle_in_transaction_session_timeout=%s: with source poll and kafka.delivery exactly_once the poller sets it itself, to 4 x postgres.query_timeout, so that the broker aborts a frozen instance's Kafka transaction before PostgreSQL hands its rows to another; remove it from the URL", v))
		}
	}
	if poller.MaxTransactionTimeout(c.Postgres.Net) < time.Second {
		errs = append(errs, fmt.Errorf("postgres.query_timeout %s: with source poll and kafka.delivery exactly_once it must be at least 500ms, so that a Kafka transaction may last at least 1s (half of 4 x postgres.query_timeout)", c.Postgres.Net.QueryTimeout))
	}
	return errs
}

// RunnerConfig is the runner's part of c.
func (c *Config) RunnerConfig() connector.RunnerConfig {
	return connector.RunnerConfig{
		Routing:             c.Routing.Routing,
		DeadLetterTopic:     c.Kafka.DeadLetterTopic,
		ShutdownTimeout:     c.Shutdown.Timeout,
		TransactionInterval: c.Kafka.TransactionInterval,
	}
}
