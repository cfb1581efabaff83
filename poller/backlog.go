package poller

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxrelay/outboxrelay/connector"
)

// Backlogs is [Source.Backlog] for the metrics: the one table's.
func (s *Source) Backlogs(ctx context.Context) ([]connector.Backlog, error) {
	n, oldest, err := s.Backlog(ctx)
	if err != nil {
		return nil, err
	}
	return []connector.Backlog{{Table: s.qualified, Events: n, Oldest: oldest}}, nil
}

// Backlog counts the rows waiting to be published and, when the ordering
// column is a timestamptz, returns the oldest one's; otherwise oldest is
// zero, since row order says nothing about time. It opens its own short
// connection, so that a metrics scrape never waits on a claim. The count
// uses the unpublished-rows index the poller's DDL creates.
func (s *Source) Backlog(ctx context.Context) (events int64, oldest time.Time, err error) {
	conn, err := s.connect(ctx, false)
	if err != nil {
		return 0, time.Time{}, err
	}
	defer closeConn(ctx, conn)
	n := &s.n
	var typ uint32
	err = conn.QueryRow(ctx, `SELECT atttypid FROM pg_attribute WHERE attrelid = $1::regclass AND attname = $2 AND NOT attisdropped`,
		n.tbl, s.cfg.OrderColumn).Scan(&typ)
	if err != nil {
		return 0, time.Time{}, classify("look up the ordering column's type", err)
	}
	if typ != timestamptzOID {
		err = conn.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE %s`, n.tbl, n.unpublished)).Scan(&events)
		return events, time.Time{}, classify("count unpublished rows", err)
	}
	var first *time.Time
	err = conn.QueryRow(ctx, fmt.Sprintf(`SELECT count(*), min(%s) FROM %s WHERE %s`, n.order, n.tbl, n.unpublished)).Scan(&events, &first)
	if err != nil {
		return 0, time.Time{}, classify("count unpublished rows", err)
	}
	if first != nil {
		oldest = *first
	}
	return events, oldest, nil
}
