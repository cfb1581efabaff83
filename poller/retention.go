package poller

import (
	"context"
	"fmt"
	"time"
)

// retentionEvery is how often the retention job runs: a quarter of the
// retention, between a second and a minute.
func (c *Config) retentionEvery() time.Duration {
	return min(max(c.Retention/4, time.Second), time.Minute)
}

// retain deletes rows published more than Retention ago, in small batches,
// until ctx is done. Failures are logged and tried again next round: the
// rows are already in Kafka, and waiting costs only disk.
func (s *Source) retain(ctx context.Context) {
	ticker := time.NewTicker(s.cfg.retentionEvery())
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if n, err := s.retainOnce(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("retention: cannot delete published rows; trying again later", "err", err, "deleted", n)
		} else if n > 0 {
			s.log.Debug("retention: deleted published rows", "deleted", n, "retention", s.cfg.Retention)
		}
	}
}

// retainOnce deletes every row published more than Retention ago and
// returns how many. SKIP LOCKED lets several instances share the work; the
// rows are published, so skipping one costs nothing.
func (s *Source) retainOnce(ctx context.Context) (int64, error) {
	conn, err := s.connect(ctx, false)
	if err != nil {
		return 0, err
	}
	defer closeConn(ctx, conn)
	n := &s.n
	sql := fmt.Sprintf(`DELETE FROM %s WHERE ctid = ANY(ARRAY(
		SELECT ctid FROM %s WHERE %s < now() - make_interval(secs => $1) LIMIT %d FOR UPDATE SKIP LOCKED))`,
		n.tbl, n.tbl, n.published, s.cfg.RetentionBatchSize)
	var total int64
	for ctx.Err() == nil {
		qctx, cancel := s.cfg.Network.Query(ctx)
		tag, err := conn.Exec(qctx, sql, s.cfg.Retention.Seconds())
		cancel()
		if err != nil {
			return total, classify("delete published rows", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(s.cfg.RetentionBatchSize) {
			break
		}
	}
	return total, nil
}
