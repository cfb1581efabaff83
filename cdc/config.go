package cdc

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgident"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// Config is what a user sets for the CDC source.
//
// It is the cdc: section of the configuration file: a field's yaml and doc
// tags are its key and its text in docs/configuration.md, SetDefaults its
// default, Validate its checks. Fields tagged yaml:"-" are filled in from
// the postgres and outbox sections.
type Config struct {
	// URL is the PostgreSQL connection string. Required. The role needs
	// the REPLICATION attribute and SELECT on the table.
	URL string `yaml:"-"`
	// Table is the outbox table, schema.table. Default "public.outbox",
	// unless Tables is set.
	Table string `yaml:"-"`
	// Tables are several outbox tables, each schema.table, relayed from
	// one slot and one publication, with Columns unless TableColumns says
	// otherwise; set either Table or Tables.
	Tables []string `yaml:"-"`
	// TablePatterns are regular expressions, each matched against the
	// whole schema.table of a table, ignoring case, as Debezium's
	// table.include.list: every table that matches is an outbox table
	// with Columns, besides Table or Tables. They are resolved against the
	// catalog at every start, and while streaming a matching table created
	// later joins the publication and the stream. Default none.
	TablePatterns []string `yaml:"-"`
	// Columns names the outbox columns. Default Debezium's names.
	Columns connector.ColumnMap `yaml:"-"`
	// TableColumns are the columns of those of Tables whose differ from
	// Columns, by schema.table.
	TableColumns map[string]connector.ColumnMap `yaml:"-"`
	// Slot is the logical replication slot, created when missing.
	// Default "outboxrelay".
	Slot string `yaml:"slot" doc:"Logical replication slot (pgoutput); created when missing."`
	// Publication is the publication, created when missing as
	// FOR TABLE <Table> WITH (publish = 'insert'). Default "outboxrelay".
	Publication string `yaml:"publication" doc:"Publication; created when missing as FOR TABLE <table> WITH (publish = 'insert')."`
	// CreatePublication creates the publication when it is missing.
	// Default true.
	CreatePublication *bool `yaml:"create_publication" doc:"Create the publication when it is missing."`
	// StatusInterval is how often the confirmed position is sent to
	// PostgreSQL, at least (every third of ReceiveTimeout when that is
	// sooner), and how often a checkpoint follows the server's WAL while
	// the outbox is idle. Default 10s.
	StatusInterval time.Duration `yaml:"status_interval" doc:"How often, at least, the confirmed LSN is reported (every third of cdc.receive_timeout when that is sooner), and how often the checkpoint follows the server's WAL while the outbox is idle."`
	// CheckpointInterval is how often, while the position moves, the
	// source saves a checkpoint of what Kafka has acknowledged and then
	// confirms it to the slot: a crash repeats only about this much.
	// (StatusInterval is the update sent whether or not it moves.)
	// Default 200ms.
	CheckpointInterval time.Duration `yaml:"checkpoint_interval" doc:"How often, while the position moves, the relay saves a checkpoint of what Kafka has acknowledged (kafka.checkpoint_topic) and then confirms it to the slot: a crash repeats only about this much."`
	// MaxBatchEvents and MaxBatchBytes bound one batch handed to the
	// runner: a larger transaction goes in several. The bytes are every
	// value the events keep; a batch ends once it reaches them, so it
	// holds at most MaxBatchBytes and one event. Defaults 1000 and 1 MiB.
	MaxBatchEvents int `yaml:"max_batch_events" doc:"Most events handed on at once; a larger transaction goes in several batches."`
	MaxBatchBytes  int `yaml:"max_batch_bytes" doc:"Most payload bytes handed on at once."`
	// HeartbeatInterval, when positive, is how often the source writes a
	// logical decoding message on an ordinary connection (heartbeat.go), so
	// that the slot advances while the outbox table is idle. Default 0: off.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval" doc:"Write a tiny logical message (pg_logical_emit_message) this often so the slot advances while the outbox is idle, like Debezium's heartbeat.interval.ms; 0 turns it off." default:"0s (off)"`
	// MessagePrefixes, when set, makes the logical decoding messages
	// written with these prefixes, in a transaction
	// (pg_logical_emit_message(true, prefix, content)), events too: a
	// table-less outbox (message.go). PostgreSQL 14 and later. Default
	// none.
	MessagePrefixes []string `yaml:"message_prefixes" doc:"Also relay, as events, the logical decoding messages written in a transaction with one of these prefixes (pg_logical_emit_message(true, prefix, content)): an outbox without rows, in commit order with the table's events; the content is a JSON object (docs/outbox-messages.md). PostgreSQL 14 and later; like Debezium's message.prefix.include.list with its DecodeLogicalDecodingMessageContent transform." default:"(none)"`
	// Cleanup deletes rows the checkpoint proves are in Kafka
	// (cleanup.go). Default off.
	Cleanup Cleanup `yaml:"cleanup"`
	// HeartbeatQuery is SQL the heartbeat runs after its message, on its
	// own connection, every HeartbeatInterval: Debezium's
	// heartbeat.action.query. It is the operator's own SQL, run as
	// written, as Debezium runs it. Default none.
	HeartbeatQuery string `yaml:"heartbeat_query" doc:"SQL run as written on the heartbeat's connection at every heartbeat, after its message, in one implicit transaction (Debezium's heartbeat.action.query, e.g. an INSERT into a heartbeat table): the operator's own SQL, never built from data. Needs cdc.heartbeat_interval; a failure is logged at ERROR with its SQLSTATE and tried again at the next heartbeat." default:"(none)"`
	// ReceiveTimeout is how long the replication stream may stay silent
	// before the source takes the connection for dead, closes it and
	// reconnects. The source speaks to the server, asking for an answer,
	// every third of it at least (more often than StatusInterval when
	// that is longer), so a live server is never silent that long, idle
	// or busy: a busy walsender answers between the changes it decodes.
	// It is also the session's wal_sender_timeout. Default 8s.
	ReceiveTimeout time.Duration `yaml:"receive_timeout" doc:"Silence on the replication stream after which the connection is taken for dead, closed and reopened. The relay asks the server to answer at every status update, and at least every third of this timeout, so a live server, idle or busy, speaks well within it. The relay sets its replication session's wal_sender_timeout to it (PostgreSQL 12+), so the server gives up on a dead session as soon. At least 1s."`
	// OnSlotLoss is what the source does when its slot cannot carry on
	// from its checkpoint: the slot is gone, invalidated (wal_status
	// lost), ahead of the checkpoint (advanced, or dropped and created
	// again by someone else), or the checkpoint was written by another
	// cluster. Events committed since the checkpoint may be missing.
	// "fail" stops with an error that says what happened and what to do,
	// creating no slot; "recreate" logs the gap at ERROR, counts it,
	// goes on from the slot as it is (creating one when it is gone) and
	// saves a new checkpoint there. Default "fail".
	OnSlotLoss OnSlotLoss `yaml:"on_slot_loss" doc:"What to do when the slot cannot carry on from the checkpoint (gone, invalidated, ahead of the checkpoint, or the checkpoint is another cluster's), so events committed since may be missing: fail stops relaying with an error saying what happened and what to do, fails /readyz and sets outboxrelay_replication_slot_lost; recreate logs the gap at ERROR, counts it in outboxrelay_replication_slot_losses_total, goes on from the slot as it is (creating one when it is gone) and checkpoints there."`
	// Snapshot is what the source does with the rows already in the
	// table when it creates its slot: "never" leaves them (a slot captures
	// only what commits after it exists, and the source says how many it
	// left); "initial" creates the slot with an exported snapshot and
	// publishes the rows visible in it before streaming, so that none
	// falls between the two and none is read twice. Default "never".
	Snapshot Snapshot `yaml:"snapshot" doc:"The rows already in the table when the relay creates its slot: never leaves them (a slot captures only what commits after it exists; the relay logs how many it left); initial creates the slot with an exported snapshot and publishes the rows visible in it before streaming, none missed and none twice (Debezium's snapshot.mode initial)."`
	// TakeoverAfter, when set, lets a standby end the session holding the
	// slot once the server has heard nothing from its client for this
	// long (pg_stat_replication.reply_time), rather than wait for the
	// server's wal_sender_timeout. 0: off.
	TakeoverAfter time.Duration `yaml:"takeover_after" doc:"A standby ends the session holding the slot once the server has heard nothing from its client for this long (pg_stat_replication.reply_time), instead of waiting for the server's wal_sender_timeout; the role must be allowed to end it (the same role, or pg_signal_backend). 0 turns it off; otherwise longer than twice how often the relay speaks to the server (cdc.status_interval, or a third of cdc.receive_timeout when sooner)." default:"0s (off)"`
	// FailoverSlot creates the slot as a failover slot, which a promoted
	// standby keeps (PostgreSQL 17 and later, with sync_replication_slots
	// on the standby; with synchronized_standby_slots on the primary, the
	// standby is never behind the relay). Default true where the server
	// supports it; ignored before 17.
	FailoverSlot *bool `yaml:"failover_slot" doc:"Create the slot as a failover slot, which a promoted standby keeps (PostgreSQL 17 and later, with sync_replication_slots on the standby, and synchronized_standby_slots on the primary naming it, or a standby behind the relay makes the relay stop on a lost slot); ignored before 17. See docs/database.md#failover-slots." default:"(true on PostgreSQL 17 and later, decided at start)"`
	// OnUpdate is what the source does with an UPDATE of an outbox row:
	// "skip" counts it and warns once a minute; "fail" makes it an event
	// that cannot be published, named by its row, which stops the relay
	// (or goes to kafka.dead_letter_topic), as Debezium's
	// table.op.invalid.behavior=fatal stops the task. With "fail" the
	// publication must publish updates: one the source creates does.
	// Default "skip".
	OnUpdate OnUpdate `yaml:"on_update" doc:"An UPDATE of an outbox row: skip counts it and warns once a minute; fail stops relaying with an error naming the row (or sends it to kafka.dead_letter_topic), after every event committed before it, as Debezium's table.op.invalid.behavior=fatal. With fail the publication must publish updates: one the relay creates does, an existing one without them is refused at start with the ALTER PUBLICATION to run."`
	// Network bounds every connection's silence and round trips.
	Network pgsql.Network `yaml:"-"`
}

// OnSlotLoss is what the source does when its slot cannot carry on from
// its checkpoint (Config.OnSlotLoss).
type OnSlotLoss string

// What OnSlotLoss may be.
const (
	SlotLossFail     OnSlotLoss = "fail"
	SlotLossRecreate OnSlotLoss = "recreate"
)

// Values lists every OnSlotLoss.
func (OnSlotLoss) Values() []string { return []string{string(SlotLossFail), string(SlotLossRecreate)} }

// OnUpdate is what the source does with an UPDATE of an outbox row
// (Config.OnUpdate).
type OnUpdate string

// What OnUpdate may be.
const (
	UpdateSkip OnUpdate = "skip"
	UpdateFail OnUpdate = "fail"
)

// Values lists every OnUpdate.
func (OnUpdate) Values() []string { return []string{string(UpdateSkip), string(UpdateFail)} }

func (c *Config) SetDefaults() {
	if c.Table == "" && len(c.Tables) == 0 && len(c.TablePatterns) == 0 {
		c.Table = "public.outbox"
	}
	c.Columns = c.Columns.WithDefaults()
	if c.Slot == "" {
		c.Slot = "outboxrelay"
	}
	if c.Publication == "" {
		c.Publication = "outboxrelay"
	}
	if c.CreatePublication == nil {
		t := true
		c.CreatePublication = &t
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = 10 * time.Second
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = 200 * time.Millisecond
	}
	if c.ReceiveTimeout == 0 {
		c.ReceiveTimeout = DefaultReceiveTimeout
	}
	c.Network.SetDefaults()
	if c.OnSlotLoss == "" {
		c.OnSlotLoss = SlotLossFail
	}
	if c.Snapshot == "" {
		c.Snapshot = SnapshotNever
	}
	c.Cleanup.SetDefaults()
	if c.OnUpdate == "" {
		c.OnUpdate = UpdateSkip
	}
	if c.MaxBatchEvents == 0 {
		c.MaxBatchEvents = 1000
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = 1 << 20
	}
}

// DefaultReceiveTimeout is Config.ReceiveTimeout's default: a dead
// replication connection is noticed within it.
const DefaultReceiveTimeout = 8 * time.Second

// speakEvery is how often the stream sends a status update, asking the
// server to answer: every status interval, or every third of the receive
// timeout when that is sooner, so that a live server's answers and the
// relay's own updates come well within both sides' timeouts.
func (c *Config) speakEvery() time.Duration {
	return min(c.StatusInterval, (c.ReceiveTimeout / 3).Truncate(time.Millisecond))
}

// slotName is what PostgreSQL accepts as a replication slot name.
var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// Validate reports every problem with c at once.
func (c *Config) Validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("postgres.url is required"))
	} else if _, err := pgconn.ParseConfig(c.URL); err != nil {
		errs = append(errs, fmt.Errorf("postgres.url: %w", redactErr(err)))
	}
	if c.Table != "" && len(c.Tables) > 0 {
		errs = append(errs, fmt.Errorf("outbox.table (%s) and outbox.tables (%s) are both set; give one", c.Table, strings.Join(c.Tables, ", ")))
	}
	errs = append(errs, c.ValidateNames())
	if _, err := pgsql.CompileTablePatterns("outbox.table_patterns", c.TablePatterns); err != nil {
		errs = append(errs, err)
	}
	if c.StatusInterval < 0 {
		errs = append(errs, fmt.Errorf("cdc.status_interval: %s is negative", c.StatusInterval))
	}
	if c.CheckpointInterval < 0 {
		errs = append(errs, fmt.Errorf("cdc.checkpoint_interval: %s is negative", c.CheckpointInterval))
	}
	if c.ReceiveTimeout < time.Second {
		errs = append(errs, fmt.Errorf("cdc.receive_timeout (%s) must be at least 1s: the relay asks the server to answer every third of it, and a server busy decoding answers between changes, not at once", c.ReceiveTimeout))
	}
	if err := c.Network.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.OnSlotLoss != SlotLossFail && c.OnSlotLoss != SlotLossRecreate {
		errs = append(errs, fmt.Errorf("cdc.on_slot_loss: %q is neither %q nor %q", c.OnSlotLoss, SlotLossFail, SlotLossRecreate))
	}
	if c.Snapshot != SnapshotNever && c.Snapshot != SnapshotInitial {
		errs = append(errs, fmt.Errorf("cdc.snapshot: %q is neither %q nor %q", c.Snapshot, SnapshotNever, SnapshotInitial))
	}
	if c.OnUpdate != UpdateSkip && c.OnUpdate != UpdateFail {
		errs = append(errs, fmt.Errorf("cdc.on_update: %q is neither %q nor %q", c.OnUpdate, UpdateSkip, UpdateFail))
	}
	if c.TakeoverAfter < 0 || (c.TakeoverAfter > 0 && c.TakeoverAfter <= 2*c.speakEvery()) {
		errs = append(errs, fmt.Errorf("cdc.takeover_after (%s) must be 0 (off) or longer than twice %s, how often a live relay speaks to the server (cdc.status_interval, or a third of cdc.receive_timeout when that is shorter)", c.TakeoverAfter, c.speakEvery()))
	}
	if c.HeartbeatInterval < 0 {
		errs = append(errs, fmt.Errorf("cdc.heartbeat_interval: %s is negative; use 0 to turn the heartbeat off", c.HeartbeatInterval))
	}
	errs = append(errs, c.Cleanup.Validate())
	seenPrefix := map[string]bool{}
	for _, p := range c.MessagePrefixes {
		switch {
		case p == "":
			errs = append(errs, errors.New("cdc.message_prefixes: a prefix is empty; give the prefix the application passes to pg_logical_emit_message"))
		case p == HeartbeatPrefix:
			errs = append(errs, fmt.Errorf("cdc.message_prefixes: %q is the relay's heartbeat's prefix; choose another", p))
		case seenPrefix[p]:
			errs = append(errs, fmt.Errorf("cdc.message_prefixes: %q is listed twice", p))
		case strings.ContainsRune(p, 0):
			errs = append(errs, fmt.Errorf("cdc.message_prefixes: %q holds a NUL byte, which no prefix can", p))
		}
		seenPrefix[p] = true
	}
	if strings.TrimSpace(c.HeartbeatQuery) != "" && c.HeartbeatInterval <= 0 {
		errs = append(errs, errors.New("cdc.heartbeat_query is set but cdc.heartbeat_interval is 0: the query runs at every heartbeat; set cdc.heartbeat_interval"))
	}
	if c.MaxBatchEvents < 0 || c.MaxBatchBytes < 0 {
		errs = append(errs, fmt.Errorf("cdc.max_batch_events (%d) and cdc.max_batch_bytes (%d) must not be negative", c.MaxBatchEvents, c.MaxBatchBytes))
	}
	return errors.Join(errs...)
}

// ValidateNames reports every problem with the names c puts into SQL:
// the tables, their columns, the slot and the publication. Each must be a
// name PostgreSQL keeps as written, with no character that could end a
// line of the SQL printed for it (init prints this source's).
func (c *Config) ValidateNames() error {
	var errs []error
	key := "outbox.table"
	if len(c.Tables) > 0 {
		key = "outbox.tables"
	}
	seen := map[string]bool{}
	for _, name := range c.tableNames() {
		schema, table, err := SplitTable(name)
		switch {
		case err != nil:
			errs = append(errs, err)
			continue
		case seen[schema+"."+table]:
			errs = append(errs, fmt.Errorf("outbox.tables: %s.%s is listed twice", schema, table))
		}
		seen[schema+"."+table] = true
		errs = append(errs, pgident.CheckKey(key, name, schema, table))
	}
	errs = append(errs, checkColumns("outbox.columns.", c.Columns))
	if err := c.Columns.Validate(); err != nil {
		errs = append(errs, err)
	}
	for _, name := range slices.Sorted(maps.Keys(c.TableColumns)) {
		m := c.TableColumns[name].WithDefaults()
		errs = append(errs, checkColumns(fmt.Sprintf("outbox.tables (%q) columns.", name), m))
		if err := m.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	if !slotName.MatchString(c.Slot) {
		errs = append(errs, fmt.Errorf("cdc.slot: %q is not a valid slot name; use 1 to 63 lower-case letters, digits and underscores", c.Slot))
	}
	errs = append(errs, pgident.CheckKey("cdc.publication", c.Publication))
	return errors.Join(errs...)
}

// checkColumns checks the names of m's columns, each under prefix plus
// its role as the key.
func checkColumns(prefix string, m connector.ColumnMap) error {
	return errors.Join(
		pgident.CheckKey(prefix+"id", m.ID),
		pgident.CheckKey(prefix+"aggregatetype", m.AggregateType),
		pgident.CheckKey(prefix+"aggregateid", m.AggregateID),
		pgident.CheckKey(prefix+"type", m.Type),
		pgident.CheckKey(prefix+"payload", m.Payload),
	)
}

// tableNames are the outbox tables as configured.
func (c *Config) tableNames() []string {
	if len(c.Tables) > 0 {
		return c.Tables
	}
	if c.Table == "" && len(c.TablePatterns) > 0 {
		return nil // only the patterns' tables
	}
	return []string{c.Table}
}

// table is an outbox table; qualified is schema.name.
type table struct {
	schema, name, qualified string
	columns                 connector.ColumnMap
	// oid is the table's, once the publication is checked: the stream
	// knows the table by it when its name changes.
	oid uint32
	// matched: an outbox.table_patterns match, not a configured name;
	// matched again at every start, so a dropped one drops out.
	matched bool
}

// ident is the table's name quoted for SQL.
func (t table) ident() string { return pgx.Identifier{t.schema, t.name}.Sanitize() }

func (t table) String() string { return t.qualified }

// SplitTable splits "schema.table" (or "table", in schema public) into its
// parts; see [pgsql.SplitTable].
func SplitTable(name string) (schema, table string, err error) { return pgsql.SplitTable(name) }
