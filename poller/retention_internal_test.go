package poller

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestRetentionBatches: the retention job deletes published rows older
// than poll.retention in DELETEs of at most poll.retention_batch_size rows,
// each a statement of its own, until none is left; younger and unpublished
// rows stay. A statement-level trigger records how many rows each DELETE
// removed.
func TestRetentionBatches(t *testing.T) {
	ctx := context.Background()
	ct := newClaimTable(t, Config{Table: "public.retention_batches", Retention: time.Hour, RetentionBatchSize: 7})
	n := &ct.s.n
	for _, sql := range []string{
		`CREATE TABLE retention_deletes (seq serial, n bigint)`,
		`CREATE FUNCTION retention_count() RETURNS trigger LANGUAGE plpgsql AS
			$$BEGIN INSERT INTO retention_deletes (n) SELECT count(*) FROM old; RETURN NULL; END$$`,
		fmt.Sprintf(`CREATE TRIGGER retention_count AFTER DELETE ON %s REFERENCING OLD TABLE AS old
			FOR EACH STATEMENT EXECUTE FUNCTION retention_count()`, n.tbl),
		// 20 rows published two hours ago, 3 a minute ago, 2 not yet.
		fmt.Sprintf(`INSERT INTO %s (id, aggregatetype, aggregateid, type, payload, %s)
			SELECT 'old' || i, 'order', 'o1', 't', '{}', now() - interval '2 hours' FROM generate_series(1, 20) i`, n.tbl, n.published),
		fmt.Sprintf(`INSERT INTO %s (id, aggregatetype, aggregateid, type, payload, %s)
			SELECT 'young' || i, 'order', 'o1', 't', '{}', now() - interval '1 minute' FROM generate_series(1, 3) i`, n.tbl, n.published),
		fmt.Sprintf(`INSERT INTO %s (id, aggregatetype, aggregateid, type, payload)
			SELECT 'new' || i, 'order', 'o1', 't', '{}' FROM generate_series(1, 2) i`, n.tbl),
	} {
		if _, err := ct.conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	deleted, err := ct.s.retainOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if deleted != 20 {
		t.Errorf("retainOnce deleted %d rows, want the 20 published two hours ago", deleted)
	}
	rows, err := ct.conn.Query(ctx, `SELECT n FROM retention_deletes ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	var batches []int64
	for rows.Next() {
		var k int64
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		batches = append(batches, k)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []int64{7, 7, 6}; !slices.Equal(batches, want) {
		t.Errorf("rows per DELETE %v, want %v (poll.retention_batch_size 7)", batches, want)
	}
	var left int
	if err := ct.conn.QueryRow(ctx, "SELECT count(*) FROM "+n.tbl).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 5 {
		t.Errorf("%d rows left, want the 3 published a minute ago and the 2 unpublished", left)
	}
}
