package config

import (
	"errors"
	"fmt"
	"time"

	"github.com/outboxrelay/outboxrelay/poller"
)

// Poll is the polling source.
type Poll struct {
	Interval        time.Duration `yaml:"interval" doc:"How long an idle poller waits before looking again when no notification wakes it." default:"500ms"`
	MaxInterval     time.Duration `yaml:"max_interval" doc:"Cap of the wait, which doubles while the table stays empty." default:"5s"`
	BatchSize       int           `yaml:"batch_size" doc:"Most rows one claim takes (and holds locked until Kafka has them)." default:"1000"`
	MaxBatchBytes   int           `yaml:"max_batch_bytes" doc:"Most bytes of column values one claim holds (always at least one row); claims times this bounds the rows in memory (docs/operations.md#memory-sizing)." default:"16777216"`
	Claims          int           `yaml:"claims" doc:"Claims one instance keeps going at once, each on a connection of its own, so that the next reads while another waits for Kafka; they take different buckets, as instances do." default:"2"`
	Mode            string        `yaml:"mode" doc:"mark (set the published column, delete after poll.retention) or delete (delete once published)." default:"mark"`
	OrderColumn     string        `yaml:"order_column" doc:"Column that grows in the order events are inserted (an identity column); orders each aggregate's events." default:"seq"`
	PublishedColumn string        `yaml:"published_column" doc:"Column that is NULL until the row is published, then the time (mode mark)." default:"published_at"`
	AttemptsColumn  string        `yaml:"attempts_column" doc:"Column counting failed attempts to publish a row Kafka can never take." default:"publish_attempts"`
	Retention       time.Duration `yaml:"retention" doc:"How long published rows are kept before they are deleted in small batches (mode mark)." default:"24h"`
	MaxAttempts     int           `yaml:"max_attempts" doc:"Attempts at a row Kafka can never take before it moves to the dead-letter table." default:"3"`
	DeadLetterTable string        `yaml:"dead_letter_table" doc:"Table for rows that failed poll.max_attempts times, with the reason; schema.table or a table in the outbox's schema." default:"the outbox table's name + _dead_letter"`
	NotifyChannel   string        `yaml:"notify_channel" doc:"Channel the outbox table's trigger notifies; the poller LISTENs on it to wake at once." default:"outboxrelay"`
	Buckets         int           `yaml:"buckets" doc:"Parts the aggregates are hashed into, which instances share; a power of two up to 1024, the same on every instance." default:"64"`
}

// PollConfig is the polling source's part of c.
func (c *Config) PollConfig() poller.Config {
	return poller.Config{
		URL:             c.Postgres.URL,
		Table:           c.Outbox.Table,
		Columns:         c.Outbox.Columns,
		Interval:        c.Poll.Interval,
		MaxInterval:     c.Poll.MaxInterval,
		BatchSize:       c.Poll.BatchSize,
		MaxBatchBytes:   c.Poll.MaxBatchBytes,
		Claims:          c.Poll.Claims,
		Mode:            c.Poll.Mode,
		OrderColumn:     c.Poll.OrderColumn,
		PublishedColumn: c.Poll.PublishedColumn,
		AttemptsColumn:  c.Poll.AttemptsColumn,
		Retention:       c.Poll.Retention,
		MaxAttempts:     c.Poll.MaxAttempts,
		DeadLetterTable: c.Poll.DeadLetterTable,
		NotifyChannel:   c.Poll.NotifyChannel,
		Buckets:         c.Poll.Buckets,
		Network:         c.Postgres.Network(),
	}
}

// PollConfigs are the polling sources' parts of c: one per outbox table.
func (c *Config) PollConfigs() []poller.Config {
	var pcs []poller.Config
	for _, t := range c.Outbox.TableNames() {
		pc := c.PollConfig()
		pc.Table, pc.Columns = t, c.ColumnsOf(t)
		pcs = append(pcs, pc)
	}
	return pcs
}

// validatePoll checks the poll section as the pollers will.
func (c *Config) validatePoll() error {
	var errs []error
	if len(c.Outbox.Tables) > 1 && c.Poll.DeadLetterTable != "" {
		errs = append(errs, fmt.Errorf("poll.dead_letter_table: with several outbox tables each has its own, <table>_dead_letter; leave it unset"))
	}
	for _, pc := range c.PollConfigs() {
		pc.SetDefaults()
		errs = append(errs, pc.Validate())
	}
	return errors.Join(errs...)
}

// Read reads the file at path (none when path is empty) and the
// environment and sets defaults, like Load, but does not validate: for
// commands that use only part of the configuration, such as poll-ddl.
func Read(path string, environ []string) (*Config, error) {
	return load(nil, path, environ, false)
}
