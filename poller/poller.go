package poller

import (
	"context"
	"hash/fnv"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/errgroup"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// Source is the polling [connector.Source].
type Source struct {
	cfg Config
	n   sqlNames
	log *slog.Logger

	// bucketKey and memberKey are the first halves of the two-part
	// advisory lock keys: bucket locks are (bucketKey, bucket), and each
	// running instance holds (memberKey, Buckets) shared. Both come from
	// the table's name, so pollers of different tables never meet.
	bucketKey, memberKey int32
	// qualified is the table as schema.table, which its events name.
	qualified string

	delivered    atomic.Int64
	deadLettered atomic.Int64
	// polling is true while Run is connected and claiming.
	polling atomic.Bool
}

var _ connector.Source = (*Source)(nil)

// Option wires a source to its surroundings.
type Option func(*Source)

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option {
	return func(s *Source) { s.log = l.With("component", "poll") }
}

// New returns a source for cfg, or every problem with cfg.
func New(cfg Config, opts ...Option) (*Source, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := newSQLNames(&cfg)
	s := &Source{
		qualified: n.schema + "." + n.table,
		cfg:       cfg, n: n, log: slog.New(slog.DiscardHandler),
		bucketKey: lockKey("outboxrelay poll bucket " + n.tbl),
		memberKey: lockKey("outboxrelay poll member " + n.tbl),
	}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

func lockKey(s string) int32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return int32(h.Sum32() & 0x7fffffff)
}

// Delivered counts the events that Kafka acknowledged and this source then
// marked published or deleted.
func (s *Source) Delivered() int64 { return s.delivered.Load() }

// Streaming reports whether the source is connected and claiming; while
// it connects, or after it lost its connection, it is not. A poller is
// never a standby: instances share the table.
func (s *Source) Streaming() (streaming, standby bool) { return s.polling.Load(), false }

// DeadLettered counts the rows this source moved to the dead-letter table.
func (s *Source) DeadLettered() int64 { return s.deadLettered.Load() }

// Run implements [connector.Source]. It checks the table, starts the
// listener (and the retention job in mark mode), and claims batches until
// ctx is cancelled or the connection fails.
func (s *Source) Run(ctx context.Context, out chan<- connector.Batch) error {
	err := s.run(ctx, out)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (s *Source) run(ctx context.Context, out chan<- connector.Batch) error {
	if err := s.checkPooling(ctx); err != nil { // pooler.go
		return err
	}
	conn, err := s.connect(ctx, true)
	if err != nil {
		return err
	}
	defer closeConn(ctx, conn)
	meta, err := s.inspect(ctx, conn)
	if err != nil {
		return err
	}

	// A notification wakes one idle claim loop; a claim that leaves rows
	// waiting wakes another.
	wake := make(chan struct{}, 1)
	// The claim loops after the first get connections of their own.
	claimers := []*claimer{{src: s, conn: conn, sess: s.identify(ctx, conn.PgConn()), meta: meta, out: out, wake: wake}}
	for range s.cfg.Claims - 1 {
		c, err := s.connect(ctx, true)
		if err != nil {
			return err
		}
		defer closeConn(ctx, c)
		claimers = append(claimers, &claimer{src: s, conn: c, sess: s.identify(ctx, c.PgConn()), meta: meta, out: out, wake: wake})
	}

	lis, err := s.openListener(ctx, wake)
	if err != nil {
		return err
	}
	bg, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	fatal := make(chan error, 1)
	wg.Go(func() { lis.run(bg, fatal) })
	if s.cfg.Mode == ModeMark && s.cfg.Retention > 0 {
		wg.Go(func() { s.retain(bg) })
	}

	s.log.Info("polling started", "table", s.cfg.Table, "mode", s.cfg.Mode, "buckets", s.cfg.Buckets, "claims", s.cfg.Claims,
		"notify_channel", s.cfg.NotifyChannel, "trigger", meta.hasTrigger)
	s.polling.Store(true)
	defer s.polling.Store(false)
	// The first loop to fail ends the others: the runner starts the
	// source again on fresh connections.
	g, gctx := errgroup.WithContext(ctx)
	for _, c := range claimers {
		g.Go(func() error {
			err := s.loop(gctx, c, fatal)
			if err == nil && ctx.Err() == nil && gctx.Err() != nil {
				return nil // ended by another loop's error
			}
			return err
		})
	}
	err = g.Wait()
	if ctx.Err() == nil && pgconn.Timeout(err) {
		// A claiming connection went silent, and so, most likely, did its
		// siblings, which were cut short in the middle of their claims:
		// every one of their sessions may still hold rows and buckets.
		// Those closed cleanly are gone already.
		sessions := make([]session, len(claimers))
		for i, c := range claimers {
			sessions[i] = c.sess
		}
		s.endSessions(ctx, "claiming", sessions)
	}
	return err
}

// loop claims batch after batch while rows wait, and otherwise sleeps
// until a notification, the interval, or the end. The wait doubles while
// the table stays empty, up to MaxInterval.
func (s *Source) loop(ctx context.Context, c *claimer, fatal <-chan error) error {
	wait := s.cfg.Interval
	for {
		select {
		case err := <-fatal:
			return err
		default:
		}
		res, err := c.claim(ctx)
		if err != nil {
			if ctx.Err() == nil && pgconn.Timeout(err) {
				s.log.Warn("the claiming connection is dead: PostgreSQL did not answer within postgres.query_timeout; ending its session from a fresh connection, so that the claim's rows go back at once, and reconnecting",
					"table", s.cfg.Table, "query_timeout", s.cfg.Network.QueryTimeout.String(), "err", err)
			}
			return err
		}
		if res.failed {
			// The runner stops after a failed batch and starts the source
			// again; a new claim now would only be handed back.
			<-ctx.Done()
			return nil
		}
		if res.delivered > 0 {
			wait = s.cfg.Interval
			continue
		}
		if res.busy {
			// Rows wait in buckets other instances hold; they may let go
			// of some with their next commit.
			wait = s.cfg.Interval
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case err := <-fatal:
			timer.Stop()
			return err
		case <-c.wake:
			timer.Stop()
			wait = s.cfg.Interval
		case <-timer.C:
			if !res.busy {
				wait = min(2*wait, s.cfg.MaxInterval)
			}
		}
	}
}

// applicationName marks the poller's sessions in pg_stat_activity, unless
// the connection string names its own.
const applicationName = "outboxrelay poll"

// named marks every connection the poller opens with its application
// name, unless the connection string names its own.
var named = pgsql.DefaultParam("application_name", applicationName)

// connect opens an ordinary connection. The claiming connection gets a
// lock_timeout (unless the user set one), so a row another session keeps
// locked delays its buckets, with a warning, instead of hanging the relay.
// These settings are made once connected (pgsql.SessionDefaults), so that
// PgBouncer in session pooling mode, which refuses them in the startup
// packet, lets the poller in.
func (s *Source) connect(ctx context.Context, claiming bool) (*pgx.Conn, error) {
	session := map[string]string{}
	if claiming {
		session["lock_timeout"] = "10s"
	}
	// A claim's transaction holds its rows and buckets while Kafka takes
	// the batch. If the relay's connection dies without a word, nothing
	// else may end that session soon (a proxy or NAT in between answers
	// the server's keepalives), and those buckets would wait for good.
	// The server ends a transaction idle this long; a claim that waited
	// as long for Kafka is then published again (at least once).
	if claiming {
		session["idle_in_transaction_session_timeout"] = strconv.FormatInt(idleInTxTimeout(s.cfg.Network).Milliseconds(), 10)
	}
	// The claim's statements are prepared once per connection. A generic
	// plan chosen while the table was small (a sequential scan for the
	// mark by ctid) then stays until autovacuum analyzes the table, and a
	// table in delete mode may stay small enough never to lose it, and
	// every mark then scans a table that has grown since. A plan per
	// execution costs microseconds and follows the table.
	session["plan_cache_mode"] = "force_custom_plan"
	conn, err := pgsql.Connect(ctx, s.cfg.URL, s.cfg.Network, named, pgsql.SessionDefaults(session))
	if err != nil {
		return nil, pgsql.ConnectFailed(classify("connect to PostgreSQL", err))
	}
	return conn, nil
}

// idleInTxTimeout is how long the server lets a claim's transaction wait
// for its client: four query timeouts, two minutes by default.
func idleInTxTimeout(n pgsql.Network) time.Duration { return 4 * n.QueryTimeout }

// MaxTransactionTimeout is the longest Kafka transaction timeout with
// which the poller publishes exactly once (kafka.delivery exactly_once):
// half the time after which PostgreSQL ends a claim whose client has gone
// quiet. An instance frozen after its claim proved it still held its rows
// (Batch.Prepare) then finds, when it wakes, its Kafka transaction already
// aborted by the broker, before any other instance could claim those rows.
func MaxTransactionTimeout(n pgsql.Network) time.Duration {
	n.SetDefaults()
	return idleInTxTimeout(n) / 2
}

func closeConn(ctx context.Context, conn *pgx.Conn) { pgsql.Close(ctx, conn) }
