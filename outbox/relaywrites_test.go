package outbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx" driver
	"go.opentelemetry.io/otel/propagation"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// writePlanEnv holds the plan TestWritesForTheRelay carries out. The
// relay's end-to-end tests (integration/writer_test.go in the repository)
// start PostgreSQL, the broker and the relay, and run this package's test
// binary to write with the writer as an application would: the relay's
// module does not import this one, so that neither needs the other to
// build or to be released.
const writePlanEnv = "OUTBOX_TEST_WRITE_PLAN"

// writePlan is one transaction to write. The relay's tests hold a copy of
// these types; the JSON is the contract between them.
type writePlan struct {
	URL string `json:"url"`
	// Driver is "pgx" (a pgx.Tx) or "database/sql" (a *sql.Tx).
	Driver string `json:"driver"`
	// Table, HeadersColumn and Messages are the Writer's options; empty,
	// not given.
	Table         string `json:"table,omitempty"`
	HeadersColumn string `json:"headers_column,omitempty"`
	Messages      string `json:"messages,omitempty"`
	// DDL runs Writer.DDL() before the transaction (not for outbox.Write,
	// which is used when no option is given).
	DDL bool `json:"ddl,omitempty"`
	// Before and After run in the transaction around the Write, After
	// even when Write failed.
	Before []string    `json:"before,omitempty"`
	After  []string    `json:"after,omitempty"`
	Events []planEvent `json:"events"`
	// TraceParent, when set, is the span the Write's ctx carries, as the
	// request's span would be.
	TraceParent string `json:"traceparent,omitempty"`
	Rollback    bool   `json:"rollback,omitempty"`
	// Result is the file the writePlanResult goes to.
	Result string `json:"result"`
}

type planEvent struct {
	ID            string            `json:"id,omitempty"`
	AggregateType string            `json:"aggregatetype"`
	AggregateID   string            `json:"aggregateid"`
	Type          string            `json:"type"`
	Payload       json.RawMessage   `json:"payload,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
}

type writePlanResult struct {
	DDL string `json:"ddl,omitempty"`
	// WriteErr is the error Write returned, "" for none.
	WriteErr string `json:"write_err,omitempty"`
	// CommitErr is the error of the commit (or rollback).
	CommitErr string `json:"commit_err,omitempty"`
	// Before and After bound the commit, for the record's timestamp.
	Before time.Time `json:"before"`
	After  time.Time `json:"after"`
}

// TestWritesForTheRelay carries out the plan in $OUTBOX_TEST_WRITE_PLAN,
// and only then.
func TestWritesForTheRelay(t *testing.T) {
	raw := os.Getenv(writePlanEnv)
	if raw == "" {
		t.Skip("writes for the relay's end-to-end tests (integration/writer_test.go), which set " + writePlanEnv)
	}
	var p writePlan
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		t.Fatalf("%s: %v", writePlanEnv, err)
	}
	res, err := p.run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.Result, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// writer is the Writer of the plan's options; nil without any, for
// outbox.Write itself.
func (p *writePlan) writer() (*outbox.Writer, error) {
	if p.Table == "" && p.HeadersColumn == "" && p.Messages == "" {
		return nil, nil // outbox.Write
	}
	var opts []outbox.Option
	if p.Table != "" {
		opts = append(opts, outbox.Table(p.Table))
	}
	if p.HeadersColumn != "" {
		opts = append(opts, outbox.HeadersColumn(p.HeadersColumn))
	}
	if p.Messages != "" {
		opts = append(opts, outbox.Messages(p.Messages))
	}
	return outbox.New(opts...)
}

func (p *writePlan) events() []outbox.Event {
	events := make([]outbox.Event, len(p.Events))
	for i, e := range p.Events {
		events[i] = outbox.Event{ID: e.ID, AggregateType: e.AggregateType, AggregateID: e.AggregateID, Type: e.Type, Headers: e.Headers}
		if e.Payload != nil {
			events[i].Payload = e.Payload
		}
	}
	return events
}

// run writes the plan's transaction with the plan's driver.
func (p *writePlan) run(ctx context.Context) (writePlanResult, error) {
	w, err := p.writer()
	if err != nil {
		return writePlanResult{}, err
	}
	if p.TraceParent != "" {
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": p.TraceParent})
	}
	write := outbox.Write
	res := writePlanResult{}
	if w != nil {
		write, res.DDL = w.Write, w.DDL()
	}
	switch p.Driver {
	case "pgx":
		err = p.runPgx(ctx, write, &res)
	case "database/sql":
		err = p.runSQL(ctx, write, &res)
	default:
		err = errors.New(`driver is neither "pgx" nor "database/sql"`)
	}
	return res, err
}

// writeFunc is outbox.Write, or a Writer's Write.
type writeFunc func(ctx context.Context, tx any, events ...outbox.Event) error

func (p *writePlan) runPgx(ctx context.Context, write writeFunc, res *writePlanResult) error {
	conn, err := pgx.Connect(ctx, p.URL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if p.DDL {
		if _, err := conn.Exec(ctx, res.DDL); err != nil {
			return err
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	exec := func(q string) error { _, err := tx.Exec(ctx, q); return err }
	return p.inTx(exec, func() error { return write(ctx, tx, p.events()...) }, res,
		func() error { return tx.Commit(ctx) }, func() error { return tx.Rollback(ctx) })
}

func (p *writePlan) runSQL(ctx context.Context, write writeFunc, res *writePlanResult) error {
	db, err := sql.Open("pgx", p.URL)
	if err != nil {
		return err
	}
	defer db.Close()
	if p.DDL {
		if _, err := db.ExecContext(ctx, res.DDL); err != nil {
			return err
		}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	exec := func(q string) error { _, err := tx.ExecContext(ctx, q); return err }
	return p.inTx(exec, func() error { return write(ctx, tx, p.events()...) }, res, tx.Commit, tx.Rollback)
}

// inTx runs Before, the write, After, then commits or rolls back.
func (p *writePlan) inTx(exec func(string) error, write func() error, res *writePlanResult, commit, rollback func() error) error {
	for _, q := range p.Before {
		if err := exec(q); err != nil {
			return err
		}
	}
	if err := write(); err != nil {
		res.WriteErr = err.Error()
	}
	for _, q := range p.After {
		if err := exec(q); err != nil {
			return err
		}
	}
	end := commit
	if p.Rollback {
		end = rollback
	}
	res.Before = time.Now()
	if err := end(); err != nil {
		res.CommitErr = err.Error()
	}
	res.After = time.Now()
	return nil
}
