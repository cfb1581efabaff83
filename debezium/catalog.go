package debezium

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// Catalog says what an outbox table's columns are, as PostgreSQL's
// catalog does: what Debezium's connector reads through JDBC to type each
// column, and the defaults that a NULL stands for. The router calls
// Columns from its one routing goroutine (and from [Router.Check] before
// routing starts), never concurrently: at Check; when a row has a column
// that the columns it has lack, at most once a second; and for a table
// not yet read, at every event until a read succeeds. A nil error
// promises the table's columns in table order; none means the table does
// not exist or the role cannot see it. An error wrapped by
// [connector.Permanent] says the table can never be read; any other is
// tried again with a later event. ctx bounds the read.
//
// The sources do not hand these facts with the events: pgoutput's
// Relation message and the poller's row description carry a column's
// type and modifier, but not its NOT NULL or its default, and both shape
// Debezium's schema (an optional field, a field's default). Debezium's
// own pgoutput decoder reads them from the database for the same reason
// (PgOutputMessageDecoder, when a Relation message comes). So the router
// reads them here, behind an interface whose I/O the caller's context
// bounds, and a test gives it a catalog of its own.
type Catalog interface {
	Columns(ctx context.Context, schema, table string) ([]CatalogColumn, error)
}

// CatalogColumn is what the catalog says of one column.
type CatalogColumn struct {
	Name string
	// Type is pg_type.typname: int4, varchar, jsonb, ...
	Type string
	// TypeMod is pg_attribute.atttypmod: -1 for none.
	TypeMod int32
	NotNull bool
	// Default is pg_get_expr of the column default; "" for none.
	Default string
}

// readTimeout bounds one read of the catalogs, whatever the caller's
// context allows: a catalog that cannot be read within it is tried again
// with a later event.
const readTimeout = 30 * time.Second

// tables are the router's outbox tables: what their catalogs said when
// last read, and whether the configuration fits them. Used from the
// router's one goroutine.
type tables struct {
	catalog Catalog
	// names are the outbox tables, schema.table; the first is the one of
	// an event that does not name its table.
	names []string
	// fits reports every column the configuration needs that a table
	// lacks or cannot write.
	fits func(*tableMeta) error
	read map[string]*readTable // by schema.table
	// modes type the columns read.
	modes valueModes
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
		t, err := ts.load(ctx, name)
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
	if name == "" && len(ts.names) > 0 {
		name = ts.names[0]
	}
	if name == "" {
		return nil, connector.Permanent(errors.New("the event names no outbox table, and none is configured (outbox.table_patterns only)"))
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
	t, err := ts.load(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := ts.fits(t); err != nil {
		return nil, connector.Permanent(err)
	}
	ts.read[name] = &readTable{meta: t, at: time.Now()}
	return t, nil
}

// load reads the catalog of name, schema.table.
func (ts *tables) load(ctx context.Context, name string) (*tableMeta, error) {
	schema, table, _ := strings.Cut(name, ".")
	cols, err := ts.catalog.Columns(ctx, schema, table)
	if err != nil {
		return nil, err
	}
	if len(cols) == 0 {
		return nil, connector.Permanent(fmt.Errorf("outbox table %s.%s does not exist, or the role cannot see it", schema, table))
	}
	t := &tableMeta{schema: schema, table: table, columns: make([]*column, len(cols))}
	for i, c := range cols {
		t.columns[i] = &column{name: c.Name, typName: c.Type, typMod: c.TypeMod, notNull: c.NotNull, defaultExpr: c.Default, modes: ts.modes}
	}
	return t, nil
}
