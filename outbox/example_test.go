package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx" driver
	"go.opentelemetry.io/otel"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// The event is written in the transaction of the business row it
// describes, into the table README.md and outboxrelay init make
// (Debezium's five columns). With the relay's defaults it becomes a record
// on topic outbox.event.order, key "42", the payload as its value and the
// event id as its one header.
func ExampleWrite() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, "postgres://app@localhost:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)

	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, total) VALUES ($1, $2)`, 42, 1999); err != nil {
			return err
		}
		return outbox.Write(ctx, tx, outbox.Event{
			AggregateType: "order",
			AggregateID:   "42",
			Type:          "OrderPlaced",
			Payload:       []byte(`{"id": 42, "total": 1999}`),
		})
	})
	if err != nil {
		log.Fatal(err)
	}
}

// Headers, and the trace context of the request's span, need a headers
// column in the table (Writer.DDL adds it: ALTER TABLE public.outbox ADD
// COLUMN headers jsonb) and the relay told to read it, with one key of its
// configuration:
//
//	routing:
//	  headers_column: headers
//
// The record then has the headers tenant, traceparent and tracestate
// after id, and the relay's span, and the consumer's, continue the trace.
func ExampleHeadersColumn() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, "postgres://app@localhost:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	w, err := outbox.New(outbox.HeadersColumn("headers"))
	if err != nil {
		log.Fatal(err)
	}

	ctx, span := otel.Tracer("shop").Start(ctx, "place order")
	defer span.End()
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, total) VALUES ($1, $2)`, 42, 1999); err != nil {
			return err
		}
		return w.Write(ctx, tx, outbox.Event{
			AggregateType: "order",
			AggregateID:   "42",
			Type:          "OrderPlaced",
			Payload:       []byte(`{"id": 42, "total": 1999}`),
			Headers:       map[string]string{"tenant": "acme"},
		})
	})
	if err != nil {
		log.Fatal(err)
	}
}

// With database/sql, and without a table: the event is a logical
// decoding message of the prefix the relay reads (cdc.message_prefixes:
// [outbox]), and becomes the same record as a row would. The message
// carries the trace context and any Headers in its "headers" member,
// which become record headers only with the relay's
// routing.headers_column: headers.
func ExampleMessages() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://app@localhost:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	w, err := outbox.New(outbox.Messages("outbox"))
	if err != nil {
		log.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE orders SET paid = true WHERE id = $1`, 42); err != nil {
		log.Fatal(err)
	}
	if err := w.Write(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: "42", Type: "OrderPaid", Payload: []byte(`{"id": 42}`)}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
}

// The table the writer writes to, as the relay reads it by default.
func ExampleWriter_DDL() {
	w, err := outbox.New(outbox.Table("public.outbox"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(w.DDL()) // run it with your migrations
	// Output:
	// CREATE TABLE IF NOT EXISTS "public"."outbox" (
	// 	id            uuid PRIMARY KEY,
	// 	aggregatetype text NOT NULL,
	// 	aggregateid   text NOT NULL,
	// 	type          text NOT NULL,
	// 	payload       jsonb,
	// 	created_at    timestamptz NOT NULL DEFAULT now()
	// )
}

// With a headers column: run on a table made without it, the second
// statement adds it.
func ExampleWriter_DDL_headersColumn() {
	w, err := outbox.New(outbox.HeadersColumn("headers"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(w.DDL())
	// Output:
	// CREATE TABLE IF NOT EXISTS "public"."outbox" (
	// 	id            uuid PRIMARY KEY,
	// 	aggregatetype text NOT NULL,
	// 	aggregateid   text NOT NULL,
	// 	type          text NOT NULL,
	// 	payload       jsonb,
	// 	"headers"     jsonb,
	// 	created_at    timestamptz NOT NULL DEFAULT now()
	// );
	// ALTER TABLE "public"."outbox" ADD COLUMN IF NOT EXISTS "headers" jsonb
}
