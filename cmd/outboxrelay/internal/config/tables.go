package config

import (
	"bytes"
	"cmp"
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
)

// OutboxTable is an entry of outbox.tables: a table, schema.table, given
// by its name alone, or with the columns and routing in which it differs
// from outbox.columns and the routing section:
//
//	tables:
//	  - sales.outbox
//	  - name: billing.outbox
//	    columns: {aggregateid: account_id}
//	    routing: {topic_prefix: billing.}
//
// In the environment, outbox.tables is the names, comma-separated.
type OutboxTable struct {
	Name    string              `yaml:"name"`
	Columns connector.ColumnMap `yaml:"columns,omitempty"`
	Routing TableRouting        `yaml:"routing,omitempty"`
}

// TableRouting is what an outbox table may route differently.
type TableRouting struct {
	TopicPrefix string `yaml:"topic_prefix,omitempty"`
	Topic       string `yaml:"topic,omitempty"`
	TypeHeader  string `yaml:"type_header,omitempty"`
}

// overrides reports whether t sets anything besides its name.
func (t OutboxTable) overrides() bool {
	return t.Columns != (connector.ColumnMap{}) || t.Routing != (TableRouting{})
}

// UnmarshalYAML takes a name or a mapping, refusing keys it does not know
// as the rest of the file does.
func (t *OutboxTable) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*t = OutboxTable{Name: n.Value}
		return nil
	}
	b, err := yaml.Marshal(n)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	type plain OutboxTable
	if err := dec.Decode((*plain)(t)); err != nil {
		return fmt.Errorf("outbox.tables: an entry is a table name or {name, columns, routing}: %w", err)
	}
	return nil
}

// MarshalYAML writes an entry without overrides as its name.
func (t OutboxTable) MarshalYAML() (any, error) {
	if !t.overrides() {
		return t.Name, nil
	}
	type plain OutboxTable
	return plain(t), nil
}

// UnmarshalText is an entry from the environment: a name.
func (t *OutboxTable) UnmarshalText(b []byte) error {
	*t = OutboxTable{Name: string(b)}
	return nil
}

// qualified is name as schema.table, or name itself when it is not one.
func qualified(name string) string {
	schema, table, err := cdc.SplitTable(name)
	if err != nil {
		return name
	}
	return schema + "." + table
}

// columns are t's columns: its own over outbox.columns.
func (c *Config) columns(t OutboxTable) connector.ColumnMap {
	m, over := c.Outbox.Columns, t.Columns
	m.ID = cmp.Or(over.ID, m.ID)
	m.AggregateType = cmp.Or(over.AggregateType, m.AggregateType)
	m.AggregateID = cmp.Or(over.AggregateID, m.AggregateID)
	m.Type = cmp.Or(over.Type, m.Type)
	m.Payload = cmp.Or(over.Payload, m.Payload)
	return m
}

// routing is t's routing: its own over the routing section.
func (c *Config) routing(t OutboxTable) connector.Routing {
	r := c.RunnerConfig().Routing
	r.TopicPrefix = cmp.Or(t.Routing.TopicPrefix, r.TopicPrefix)
	r.Topic = cmp.Or(t.Routing.Topic, r.Topic)
	r.TypeHeader = cmp.Or(t.Routing.TypeHeader, r.TypeHeader)
	return r
}

// TableColumns are the columns of each outbox table that sets its own,
// by schema.table; nil when none does.
func (c *Config) TableColumns() map[string]connector.ColumnMap {
	var m map[string]connector.ColumnMap
	for _, t := range c.Outbox.Tables {
		if t.Columns == (connector.ColumnMap{}) {
			continue
		}
		if m == nil {
			m = map[string]connector.ColumnMap{}
		}
		m[qualified(t.Name)] = c.columns(t)
	}
	return m
}

// ColumnsOf are the columns of the outbox table name: its own, over
// outbox.columns.
func (c *Config) ColumnsOf(name string) connector.ColumnMap {
	q := qualified(name)
	for _, t := range c.Outbox.Tables {
		if qualified(t.Name) == q {
			return c.columns(t)
		}
	}
	return c.Outbox.Columns
}

// TableRoutings are the routings of the outbox tables that set their own,
// by schema.table; nil when none does.
func (c *Config) TableRoutings() map[string]connector.Routing {
	var m map[string]connector.Routing
	for _, t := range c.Outbox.Tables {
		if t.Routing == (TableRouting{}) {
			continue
		}
		if m == nil {
			m = map[string]connector.Routing{}
		}
		m[qualified(t.Name)] = c.routing(t)
	}
	return m
}

// validateTables checks the entries' overrides.
func (c *Config) validateTables() []error {
	var errs []error
	for _, t := range c.Outbox.Tables {
		if !t.overrides() {
			continue
		}
		if c.Routing.Debezium.used() {
			errs = append(errs, fmt.Errorf("outbox.tables: %s sets its own columns or routing, which Debezium's record formats (the Debezium routing keys) do not take per table; give every table the same", t.Name))
		}
		if t.Columns != (connector.ColumnMap{}) {
			if err := c.columns(t).WithDefaults().Validate(); err != nil {
				errs = append(errs, fmt.Errorf("outbox.tables: %s: %w", t.Name, err))
			}
		}
		if t.Routing == (TableRouting{}) {
			continue
		}
		if err := c.routing(t).WithDefaults().Validate(); err != nil {
			errs = append(errs, fmt.Errorf("outbox.tables: %s: routing: %w", t.Name, err))
		}
	}
	return errs
}
