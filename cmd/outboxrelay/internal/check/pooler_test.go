package check_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/check"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
	"github.com/outboxrelay/outboxrelay/poller"
)

// TestPooler: the report says whether a connection pooler answers
// postgres.url, and judges it as the source does when it starts: the CDC
// source fails behind any pooler (it needs the server's own address), the
// poller behind transaction pooling (it needs session pooling), and both
// pass when PostgreSQL answers. Against Debian's PgBouncer.
func TestPooler(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dbURL := testenv.Postgres(t)
	s := newSetup(ctx, t, dbURL)
	pc := poller.Config{Table: "public.outbox"}
	pc.SetDefaults()
	s.exec(ctx, t, poller.DDL(pc), fmt.Sprintf(`GRANT UPDATE, DELETE ON outbox TO %s`, s.role),
		fmt.Sprintf(`GRANT INSERT ON outbox_dead_letter TO %s`, s.role))
	session := testenv.PgBouncer(t, dbURL, "session")
	transaction := testenv.PgBouncer(t, dbURL, "transaction")
	for _, tc := range []struct {
		name, source, url string
		want              check.Status
		says              []string
	}{
		{"cdc direct", "cdc", dbURL, check.Pass, []string{"directly"}},
		{"cdc through session pooling", "cdc", session, check.Fail,
			[]string{"connection pooler at " + testenv.BouncerHostPort(t, session), "logical replication", "PostgreSQL server's own host and port"}},
		{"poll direct", "poll", dbURL, check.Pass, []string{"directly"}},
		{"poll through session pooling", "poll", session, check.Pass, []string{"session pooling mode"}},
		{"poll through transaction pooling", "poll", transaction, check.Fail,
			[]string{"connection pooler at " + testenv.BouncerHostPort(t, transaction), "transaction pooling mode", "advisory locks", "pool_mode=session"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.adminURL = tc.url
			s.yaml["source"] = "source: " + tc.source + "\n"
			cfg, _ := s.config(t)
			r, _ := run(ctx, t, cfg)
			expect(t, r, check.CheckPooler, tc.want, tc.says...)
			if tc.want == check.Pass {
				onlyFailures(t, r)
			}
		})
	}
}
