package debezium

import (
	"context"
	"errors"
	"time"

	"github.com/outboxrelay/outboxrelay/connector"
)

// tableMeta is the outbox table's catalog entry: what Debezium's
// connector reads through JDBC to type each column.
type tableMeta struct {
	schema, table string
	columns       []*column
}

func (t *tableMeta) column(name string) *column {
	for _, c := range t.columns {
		if c.name == name {
			return c
		}
	}
	return nil
}

// catalog says what an outbox table's columns are: name, type, typmod,
// NOT NULL and default, in table order. The router calls it from its one
// goroutine, at [Router.Check] and when a row has a column the catalog it
// has lacks; it does no other I/O. A table that does not exist is a
// permanent error ([connector.Permanent]); a catalog that cannot be read
// now is any other error, and is asked again with a later event. ctx
// bounds the read.
type catalog interface {
	table(ctx context.Context, name string) (*tableMeta, error)
}

// catalogFunc is a [catalog] made of a function.
type catalogFunc func(ctx context.Context, name string) (*tableMeta, error)

func (f catalogFunc) table(ctx context.Context, name string) (*tableMeta, error) { return f(ctx, name) }

// readTimeout bounds one read of the catalogs, whatever the caller's
// context allows: a catalog that cannot be read within it is tried again
// with a later event.
const readTimeout = 30 * time.Second

// tables are the router's outbox tables: what their catalogs said when
// last read, and whether the configuration fits them. Used from the
// router's one goroutine.
type tables struct {
	catalog catalog
	// names are the outbox tables, schema.table; the first is the one of
	// an event that does not name its table.
	names []string
	// fits reports every column the configuration needs that a table
	// lacks or cannot write.
	fits func(*tableMeta) error
	read map[string]*readTable // by schema.table
}

// readTable is an outbox table's catalog and when it was read.
type readTable struct {
	meta *tableMeta
	at   time.Time
}

// check reads every table's catalog: see [Router.Check].
func (ts *tables) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	var errs []error
	for _, name := range ts.names {
		t, err := ts.catalog.table(ctx, name)
		if err != nil {
			return err
		}
		if err := ts.fits(t); err != nil {
			errs = append(errs, err)
			continue
		}
		ts.read[name] = &readTable{meta: t, at: time.Now()}
	}
	if err := errors.Join(errs...); err != nil {
		return connector.Permanent(err)
	}
	return nil
}

// of returns the catalog entry of the event's table, reading it again
// when the row has a column it does not know (the table was altered), at
// most once a second.
func (ts *tables) of(ctx context.Context, e *connector.Event) (*tableMeta, error) {
	name := e.Table
	if name == "" {
		name = ts.names[0]
	}
	rt := ts.read[name]
	stale := rt == nil
	if !stale {
		for _, c := range e.Extra {
			if rt.meta.column(c.Name) == nil {
				stale = true
				break
			}
		}
	}
	if !stale || (rt != nil && time.Since(rt.at) < time.Second) {
		return rt.meta, nil
	}
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	t, err := ts.catalog.table(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := ts.fits(t); err != nil {
		return nil, connector.Permanent(err)
	}
	ts.read[name] = &readTable{meta: t, at: time.Now()}
	return t, nil
}
