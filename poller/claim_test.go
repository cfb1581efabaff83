package poller_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/poller"
)

// TestClaimBoundedByBytes: a claim holds at most poll.max_batch_bytes of
// column values, or one row when that row alone is larger, whatever the
// payload's type; every row still arrives, each aggregate in order.
// jsonb is the case where PostgreSQL's own size (compressed) is far below
// what arrives, which the relay's count must catch.
func TestClaimBoundedByBytes(t *testing.T) {
	const bound = 1 << 20
	url := testenv.Postgres(t)
	for _, tc := range []struct {
		name, typ string
		// value is the payload of row i, of about size bytes.
		value func(i, size int) string
	}{
		// md5 text does not compress much; PostgreSQL knows its size.
		{"text", "text", func(i, size int) string {
			return fmt.Sprintf("repeat(md5(%d::text), %d)", i, size/32)
		}},
		{"bytea", "bytea", func(i, size int) string {
			return fmt.Sprintf("convert_to(repeat(md5(%d::text), %d), 'UTF8')", i, size/32)
		}},
		// One character repeated compresses to almost nothing.
		{"compressed jsonb", "jsonb", func(i, size int) string {
			return fmt.Sprintf("jsonb_build_object('seq', %d, 'data', repeat('x', %d))", i, size)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			table := "bytes_" + strconv.Itoa(int(time.Now().UnixNano()%1e9))
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			cfg := poller.Config{URL: url, Table: "public." + table, MaxBatchBytes: bound, Claims: 1,
				Interval: 50 * time.Millisecond, MaxInterval: 200 * time.Millisecond}
			if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
				aggregatetype text NOT NULL, aggregateid text NOT NULL, type text NOT NULL, payload %s)`, table, tc.typ)); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx, poller.DDL(cfg)); err != nil {
				t.Fatal(err)
			}
			// 30 rows of 300 KB over 3 aggregates (three fit under the
			// bound, four do not), then one of 3 MiB, then 5 more.
			sizes := make([]int, 0, 36)
			for range 30 {
				sizes = append(sizes, 300<<10)
			}
			sizes = append(sizes, 3<<20)
			for range 5 {
				sizes = append(sizes, 300<<10)
			}
			for i, size := range sizes {
				if _, err := conn.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (aggregatetype, aggregateid, type, payload) VALUES ('order', 'agg-%d', '%d', %s)`,
					table, i%3, i, tc.value(i, size))); err != nil {
					t.Fatal(err)
				}
			}

			src, err := poller.New(cfg, poller.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			if err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			out := make(chan connector.Batch)
			ran := make(chan error, 1)
			go func() { ran <- src.Run(rctx, out) }()
			var order []int
			batches := 0
			for len(order) < len(sizes) {
				var b connector.Batch
				select {
				case b = <-out:
				case err := <-ran:
					t.Fatalf("source stopped after %d of %d events: %v", len(order), len(sizes), err)
				case <-rctx.Done():
					t.Fatalf("%d of %d events arrived in 2m", len(order), len(sizes))
				}
				held := 0
				for _, e := range b.Events {
					held += len(e.Payload) + len(e.ID) + len(e.AggregateType) + len(e.AggregateID) + len(e.Type)
					n, _ := strconv.Atoi(e.Type)
					order = append(order, n)
				}
				// The claim counts the order column too: a few bytes a row.
				if len(b.Events) > 1 && held > bound {
					t.Errorf("a claim held %d events of %d bytes, over poll.max_batch_bytes (%d)", len(b.Events), held, bound)
				}
				if len(b.Events) > 3 {
					t.Errorf("a claim held %d events of 300 KB; three fit under %d bytes", len(b.Events), bound)
				}
				batches++
				b.Done(nil)
			}
			cancel()
			if err := <-ran; err != nil && rctx.Err() == nil {
				t.Errorf("source: %v", err)
			}
			// Each aggregate in order, and the large row alone came through.
			last := map[int]int{}
			for _, n := range order {
				if p, ok := last[n%3]; ok && n < p {
					t.Errorf("aggregate agg-%d: event %d after %d", n%3, n, p)
				}
				last[n%3] = n
			}
			if batches < len(sizes)/3 {
				t.Errorf("%d claims for %d events; the bound allows at most three a claim", batches, len(sizes))
			}
			t.Logf("%d events in %d claims", len(order), batches)
		})
	}
}
