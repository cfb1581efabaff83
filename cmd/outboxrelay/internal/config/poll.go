package config

import (
	"errors"
	"fmt"

	"github.com/outboxrelay/outboxrelay/poller"
)

// PollConfig is the polling source's part of c: its section, with the
// postgres and outbox keys it shares.
func (c *Config) PollConfig() poller.Config {
	pc := c.Poll
	pc.URL, pc.Table, pc.Columns, pc.Network = c.Postgres.URL, c.Outbox.Table, c.Outbox.Columns, c.Postgres.Net
	return pc
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
	if len(c.Outbox.TablePatterns) > 0 {
		errs = append(errs, errors.New("outbox.table_patterns: source poll polls tables it is given by name; list them in outbox.tables"))
	}
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
