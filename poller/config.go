package poller

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgident"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
	"github.com/outboxrelay/outboxrelay/internal/secret"
)

// Mode says what becomes of a row once Kafka has it.
type Mode string

// What Mode may be.
const (
	// ModeMark sets the published column to now() and keeps the row until
	// the retention job deletes it.
	ModeMark Mode = "mark"
	// ModeDelete deletes the row.
	ModeDelete Mode = "delete"
)

// Values lists every Mode.
func (Mode) Values() []string { return []string{string(ModeMark), string(ModeDelete)} }

// Config is what a user sets for the polling source.
//
// It is the poll: section of the configuration file: a field's yaml and doc
// tags are its key and its text in docs/configuration.md, SetDefaults its
// default, Validate its checks. Fields tagged yaml:"-" are filled in from
// the postgres and outbox sections.
type Config struct {
	// URL is the PostgreSQL connection string. Required. The role needs
	// SELECT, UPDATE (mark) or DELETE on the outbox table, INSERT on the
	// dead-letter table, and nothing else: no REPLICATION.
	URL string `yaml:"-"`
	// Table is the outbox table, schema.table. Default "public.outbox".
	Table string `yaml:"-"`
	// Columns names the outbox columns. Default Debezium's names.
	Columns connector.ColumnMap `yaml:"-"`

	// Interval is how long an idle poller waits before looking again when
	// no notification wakes it. Default 500ms.
	Interval time.Duration `yaml:"interval" doc:"How long an idle poller waits before looking again when no notification wakes it."`
	// MaxInterval caps the wait, which doubles from Interval while the
	// table stays empty. Default 5s.
	MaxInterval time.Duration `yaml:"max_interval" doc:"Cap of the wait, which doubles while the table stays empty."`
	// BatchSize is the most rows one claim takes. Default 1000.
	BatchSize int `yaml:"batch_size" doc:"Most rows one claim takes (and holds locked until Kafka has them)."`
	// MaxBatchBytes is the most bytes of column values one claim takes:
	// it stops adding rows once the next would pass it, but always takes
	// one, so a row larger than this still moves, alone. A claim's rows
	// stay in memory until Kafka has them, so this, times Claims, bounds
	// what the poller holds however large the rows are. Default 16 MiB:
	// with the default Claims (2) that fills kafka.max_buffered_bytes
	// (32 MiB) while one claim waits for Kafka, which is all the sink can
	// take; more would only wait in memory.
	MaxBatchBytes int `yaml:"max_batch_bytes" doc:"Most bytes of column values one claim holds (always at least one row); claims times this bounds the rows in memory (docs/operations.md#memory-sizing)."`
	// Claims is how many claims one instance keeps going at once, each on
	// a connection of its own: the next one reads while another waits for
	// Kafka. They take different buckets, as instances do, so order holds
	// whatever each instance sets; claims share the waiting buckets
	// evenly only when every instance sets the same. Default 2.
	Claims int `yaml:"claims" doc:"Claims one instance keeps going at once, each on a connection of its own, so that the next reads while another waits for Kafka; they take different buckets, as instances do."`
	// Mode is ModeMark or ModeDelete. Default ModeMark.
	Mode Mode `yaml:"mode" doc:"mark (set the published column, delete after poll.retention) or delete (delete once published)."`
	// OrderColumn orders an aggregate's events: it must grow in the order
	// the application inserts them (an identity column does). Default
	// "seq".
	OrderColumn string `yaml:"order_column" doc:"Column that grows in the order events are inserted (an identity column); orders each aggregate's events."`
	// PublishedColumn is NULL until the row is published, then the time it
	// was (ModeMark only). Default "published_at".
	PublishedColumn string `yaml:"published_column" doc:"Column that is NULL until the row is published, then the time (mode mark)."`
	// AttemptsColumn counts the failed attempts to publish a row that can
	// never be published. Default "publish_attempts".
	AttemptsColumn string `yaml:"attempts_column" doc:"Column counting failed attempts to publish a row Kafka can never take."`
	// Retention is how long published rows are kept before the retention
	// job deletes them (ModeMark only). Default 24h.
	Retention time.Duration `yaml:"retention" doc:"How long published rows are kept before they are deleted in small batches (mode mark)."`
	// RetentionBatchSize is how many rows one retention DELETE removes:
	// each is a transaction of its own, so a smaller one holds fewer row
	// locks and less WAL at a time, on a busy table. Default 1000.
	RetentionBatchSize int `yaml:"retention_batch_size" doc:"Most rows one retention DELETE removes (mode mark); each batch is a short transaction of its own, so a smaller one holds fewer locks at a time on a busy table."`
	// MaxAttempts is how many times a row that can never be published is
	// tried before it moves to DeadLetterTable. Default 3.
	MaxAttempts int `yaml:"max_attempts" doc:"Attempts at a row Kafka can never take before it moves to the dead-letter table."`
	// DeadLetterTable receives rows that failed MaxAttempts times, schema.table
	// or a table in the outbox table's schema. Default "<table>_dead_letter".
	DeadLetterTable string `yaml:"dead_letter_table" doc:"Table for rows that failed poll.max_attempts times, with the reason; schema.table or a table in the outbox's schema." default:"(the outbox table's name + _dead_letter: outbox_dead_letter)"`
	// NotifyChannel is the channel the table's trigger notifies on insert.
	// Default "outboxrelay".
	NotifyChannel string `yaml:"notify_channel" doc:"Channel the outbox table's trigger notifies; the poller LISTENs on it to wake at once."`
	// Buckets is how many parts the aggregates are hashed into; instances
	// share the table bucket by bucket. A power of two up to 1024, the same
	// on every instance. Default 64.
	Buckets int `yaml:"buckets" doc:"Parts the aggregates are hashed into, which instances share; a power of two up to 1024, the same on every instance."`
	// Network bounds every connection's silence and round trips: a claim
	// or mark that gets no answer within its query timeout fails, the
	// connection is closed, and the source restarts on a fresh one.
	Network pgsql.Network `yaml:"-"`
}

// SetDefaults fills in every zero field.
func (c *Config) SetDefaults() {
	def := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	def(&c.Table, "public.outbox")
	c.Columns = c.Columns.WithDefaults()
	if c.Interval == 0 {
		c.Interval = 500 * time.Millisecond
	}
	if c.MaxInterval == 0 {
		c.MaxInterval = max(5*time.Second, c.Interval)
	}
	if c.BatchSize == 0 {
		c.BatchSize = 1000
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if c.Claims == 0 {
		c.Claims = 2
	}
	if c.Mode == "" {
		c.Mode = ModeMark
	}
	def(&c.OrderColumn, "seq")
	def(&c.PublishedColumn, "published_at")
	def(&c.AttemptsColumn, "publish_attempts")
	if c.Retention == 0 && c.Mode == ModeMark {
		c.Retention = 24 * time.Hour
	}
	if c.RetentionBatchSize == 0 {
		c.RetentionBatchSize = 1000
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 3
	}
	if c.DeadLetterTable == "" {
		_, table, _ := splitTable(c.Table)
		c.DeadLetterTable = table + "_dead_letter"
	}
	def(&c.NotifyChannel, "outboxrelay")
	if c.Buckets == 0 {
		c.Buckets = 64
	}
	c.Network.SetDefaults()
}

// DefaultMaxBatchBytes is MaxBatchBytes' default.
const DefaultMaxBatchBytes = 16 << 20

// MaxBuckets is the largest poll.buckets: every claim may take an advisory
// lock per bucket, and the server's lock table is finite.
const MaxBuckets = 1024

// Validate reports every problem with c at once.
func (c *Config) Validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("postgres.url is required"))
	} else if _, err := pgconn.ParseConfig(c.URL); err != nil {
		errs = append(errs, fmt.Errorf("postgres.url: %w", redactErr(err)))
	}
	return errors.Join(append(errs, c.ValidateTable())...)
}

// ValidateTable is Validate without the connection string: everything
// [DDL] depends on, and the poll settings.
func (c *Config) ValidateTable() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	// Every name goes into SQL, and into the comments of the DDL a user
	// runs with psql: none may hold a character that could end a line.
	tableErr := c.checkTable()
	errs = append(errs, tableErr)
	m := c.Columns
	errs = append(errs,
		pgident.CheckKey("outbox.columns.id", m.ID),
		pgident.CheckKey("outbox.columns.aggregatetype", m.AggregateType),
		pgident.CheckKey("outbox.columns.aggregateid", m.AggregateID),
		pgident.CheckKey("outbox.columns.type", m.Type),
		pgident.CheckKey("outbox.columns.payload", m.Payload),
	)
	if err := c.Columns.Validate(); err != nil {
		errs = append(errs, err)
	}
	switch c.Mode {
	case ModeMark, ModeDelete:
	default:
		add("poll.mode: %q is not %s or %s", c.Mode, ModeMark, ModeDelete)
	}
	// The poller's own columns must be names, and neither each other nor
	// an outbox column: a mark would overwrite the event.
	own := []struct{ key, name string }{{"poll.order_column", c.OrderColumn}, {"poll.attempts_column", c.AttemptsColumn}}
	if c.Mode != ModeDelete {
		own = append(own, struct{ key, name string }{"poll.published_column", c.PublishedColumn})
	}
	mapped := map[string]string{m.ID: "id", m.AggregateType: "aggregatetype", m.AggregateID: "aggregateid", m.Type: "type", m.Payload: "payload"}
	seen := map[string]string{}
	for _, o := range own {
		if err := pgident.CheckKey(o.key, o.name); err != nil {
			errs = append(errs, err)
			continue
		}
		if role, ok := mapped[o.name]; ok && o.key != "poll.order_column" {
			add("%s: %q is the outbox's %s column; the poller needs a column of its own", o.key, o.name, role)
		}
		if other, ok := seen[o.name]; ok {
			add("%s: %q is also %s; each needs its own column", o.key, o.name, other)
		}
		seen[o.name] = o.key
	}
	if c.Interval <= 0 {
		add("poll.interval: %s must be positive", c.Interval)
	}
	if c.MaxInterval < c.Interval {
		add("poll.max_interval: %s is shorter than poll.interval (%s)", c.MaxInterval, c.Interval)
	}
	if c.BatchSize < 1 || c.BatchSize > 100000 {
		add("poll.batch_size: %d is not between 1 and 100000", c.BatchSize)
	}
	if c.MaxBatchBytes < 0 {
		add("poll.max_batch_bytes: %d is negative; leave it unset for the default (%d), or give the most bytes one claim may hold", c.MaxBatchBytes, DefaultMaxBatchBytes)
	}
	if c.Retention < 0 {
		add("poll.retention: %s is negative", c.Retention)
	}
	if c.RetentionBatchSize < 1 || c.RetentionBatchSize > 100000 {
		add("poll.retention_batch_size: %d is not between 1 and 100000", c.RetentionBatchSize)
	}
	if c.Mode == ModeDelete && c.Retention != 0 {
		add("poll.retention: %s applies only to mode %s; with mode %s rows are deleted once published", c.Retention, ModeMark, ModeDelete)
	}
	if c.MaxAttempts < 1 {
		add("poll.max_attempts: %d must be at least 1", c.MaxAttempts)
	}
	_, table, _ := splitTable(c.Table)
	if s, t, err := c.deadLetterName(); err != nil {
		// The default, named after a bad table, is the same problem again.
		if tableErr == nil || c.DeadLetterTable != table+"_dead_letter" {
			errs = append(errs, err)
		}
	} else if ts, tt, _ := splitTable(c.Table); s == ts && t == tt {
		add("poll.dead_letter_table: %q is the outbox table itself", c.DeadLetterTable)
	}
	errs = append(errs, pgident.CheckKey("poll.notify_channel", c.NotifyChannel))
	if c.Claims < 1 || c.Claims > 16 {
		add("poll.claims: %d is not between 1 and 16", c.Claims)
	}
	if c.Buckets < 1 || c.Buckets > MaxBuckets || bits.OnesCount(uint(c.Buckets)) != 1 {
		add("poll.buckets: %d is not a power of two between 1 and %d", c.Buckets, MaxBuckets)
	}
	if err := c.Network.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkTable checks the outbox table's name.
func (c *Config) checkTable() error {
	schema, table, err := splitTable(c.Table)
	if err != nil {
		return err
	}
	return pgident.CheckKey("outbox.table", c.Table, schema, table)
}

// deadLetterName splits DeadLetterTable, which defaults to the outbox
// table's schema.
func (c *Config) deadLetterName() (schema, table string, err error) {
	if !strings.Contains(c.DeadLetterTable, ".") {
		schema, _, _ = splitTable(c.Table)
		if err := pgident.CheckKey("poll.dead_letter_table", c.DeadLetterTable); err != nil {
			return "", "", err
		}
		return schema, c.DeadLetterTable, nil
	}
	schema, table, err = splitTable(c.DeadLetterTable)
	if err != nil {
		return "", "", fmt.Errorf("poll.dead_letter_table: %q is not schema.table (two names, neither empty)", c.DeadLetterTable)
	}
	if err := pgident.CheckKey("poll.dead_letter_table", c.DeadLetterTable, schema, table); err != nil {
		return "", "", err
	}
	return schema, table, nil
}

func splitTable(name string) (schema, table string, err error) { return pgsql.SplitTable(name) }

func redactErr(err error) error { return secret.RedactError(err) }
