package metrics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxrelay/outboxrelay/internal/pgsql"
	"github.com/outboxrelay/outboxrelay/internal/secret"
)

const (
	// probeTimeout bounds one probe query, and so a scrape or a readiness
	// check while PostgreSQL does not answer.
	probeTimeout = 2 * time.Second
	// probeMaxAge is how long a probe's result is reused, so that scrapes
	// and probes arriving together query the server once.
	probeMaxAge = time.Second
)

var (
	pgUpDesc = prometheus.NewDesc(Namespace+"_postgres_up",
		"1 when PostgreSQL answered the last probe, 0 when it did not.", nil, nil)
	slotLagDesc = prometheus.NewDesc(Namespace+"_replication_slot_lag_bytes",
		"WAL the replication slot holds back: the server's current WAL position minus the slot's confirmed_flush_lsn.", []string{"slot"}, nil)
	slotActiveDesc = prometheus.NewDesc(Namespace+"_replication_slot_active",
		"1 while a session streams from the replication slot, 0 when none does.", []string{"slot"}, nil)
	slotConfirmedDesc = prometheus.NewDesc(Namespace+"_replication_slot_confirmed_flush_lsn",
		"The slot's confirmed_flush_lsn as the server has it, as a number.", []string{"slot"}, nil)
	slotStalledDesc = prometheus.NewDesc(Namespace+"_replication_slot_stalled_seconds",
		"How long the slot's confirmed_flush_lsn has not moved while it holds WAL back (lag above 0), as seen by the probes; 0 while it moves.", []string{"slot"}, nil)
	slotSafeWALDesc = prometheus.NewDesc(Namespace+"_replication_slot_safe_wal_size_bytes",
		"WAL the server may still write before the slot is in danger of invalidation by max_slot_wal_keep_size (pg_replication_slots.safe_wal_size; negative once wal_status is unreserved); +Inf while max_slot_wal_keep_size is -1, 0 once the slot is lost.", []string{"slot"}, nil)
	slotMaxWALDesc = prometheus.NewDesc(Namespace+"_replication_slot_max_wal_keep_size_bytes",
		"The server's max_slot_wal_keep_size in bytes: the most WAL the slot may hold back before PostgreSQL invalidates it; -1 when unbounded.", []string{"slot"}, nil)
	slotWALStatusDesc = prometheus.NewDesc(Namespace+"_replication_slot_wal_status",
		"1 for the slot's wal_status (reserved, extended, unreserved, lost), 0 for the others.", []string{"slot", "status"}, nil)
	slotFailoverDesc = prometheus.NewDesc(Namespace+"_replication_slot_failover",
		"1 when the slot is a failover slot, which a standby with sync_replication_slots keeps (PostgreSQL 17 and later; absent before).", []string{"slot"}, nil)
	slotSyncedDesc = prometheus.NewDesc(Namespace+"_replication_slot_synced",
		"On a standby (PostgreSQL 17 and later): 1 when the slot is synchronized from the primary, which a promotion keeps; absent on a primary.", []string{"slot"}, nil)
)

// WALStatuses are the values of pg_replication_slots.wal_status, in order
// of danger, which outboxrelay_replication_slot_wal_status labels.
var WALStatuses = []string{"reserved", "extended", "unreserved", "lost"}

// ProbeOption configures a [PostgresProbe].
type ProbeOption func(*probeOptions)

type probeOptions struct {
	network *pgsql.Network
}

// WithNetwork bounds the probe's connection as n says: keepalive,
// TCP_USER_TIMEOUT, connect timeout.
func WithNetwork(n pgsql.Network) ProbeOption {
	return func(o *probeOptions) { o.network = &n }
}

// PostgresProbe watches the relay from PostgreSQL's side, on a pool of its
// own with at most one connection: whether the server answers and, for a
// replication slot, whether a session streams from it and how much WAL it
// holds back. It queries when scraped or asked by a health check, at most
// once a second. Its methods may be called concurrently.
type PostgresProbe struct {
	pool *pgxpool.Pool
	slot string

	mu   sync.Mutex
	at   time.Time
	last probeResult
	// seenAt is when a probe first saw the slot's confirmed position
	// prevConfirm; stalledSince is seenAt while the slot holds WAL back,
	// zero while it holds nothing.
	seenAt, stalledSince time.Time
	prevConfirm          float64
}

type probeResult struct {
	err       error
	found     bool // the slot exists
	active    bool
	lag       *float64
	confirmed *float64
	headroom  Headroom
}

// Headroom is what PostgreSQL says of how much longer it keeps a slot's
// WAL: the columns of pg_replication_slots and the setting that bound it.
type Headroom struct {
	// ActivePID is the session that holds the slot, streaming or not;
	// nil when none does.
	ActivePID *int32
	// WALStatus is the slot's wal_status (see [WALStatuses]); empty when
	// the server does not say.
	WALStatus string
	// SafeWALSize is how much WAL the server may still write before the
	// slot is in danger of being invalidated; nil while MaxWALKeepSize is
	// unbounded, or once the slot is lost.
	SafeWALSize *int64
	// MaxWALKeepSize is max_slot_wal_keep_size in bytes; -1: unbounded.
	MaxWALKeepSize int64
	// Failover reports whether the slot is a failover slot; nil before
	// PostgreSQL 17. Synced, on a standby of 17 or later, whether it is
	// synchronized from the primary; nil on a primary.
	Failover, Synced *bool
}

// NewPostgresProbe returns a probe of the server at url and, unless slot
// is empty, of that replication slot. It does not connect until asked.
func NewPostgresProbe(url, slot string, opts ...ProbeOption) (*PostgresProbe, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// Its message quotes the connection string, password and all.
		return nil, fmt.Errorf("postgres.url: %w", secret.RedactError(err))
	}
	cfg.MaxConns = 1
	// The probe's query is the test of the connection; the pool's own
	// ping of an idle one, before handing it out, would fail on a dead
	// connection out of the probe's reach (see query).
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	cfg.MinConns = 0
	cfg.MaxConnIdleTime = time.Minute
	var po probeOptions
	for _, o := range opts {
		o(&po)
	}
	name := pgsql.Param("application_name", "outboxrelay-probe")
	if po.network != nil {
		pgsql.Configure(&cfg.ConnConfig.Config, *po.network, name)
	} else {
		name(&cfg.ConnConfig.Config)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres probe: %w", err)
	}
	return &PostgresProbe{pool: pool, slot: slot}, nil
}

// Close closes the probe's connection.
func (p *PostgresProbe) Close() { p.pool.Close() }

// probe returns a result at most probeMaxAge old, querying when needed.
func (p *PostgresProbe) probe(ctx context.Context) probeResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.at.IsZero() && time.Since(p.at) < probeMaxAge {
		return p.last
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	p.last = p.query(ctx)
	p.at = time.Now()
	r := p.last
	if r.confirmed != nil && (p.seenAt.IsZero() || *r.confirmed != p.prevConfirm) {
		p.prevConfirm, p.seenAt = *r.confirmed, p.at
	}
	if r.found && r.lag != nil && *r.lag > 0 && r.confirmed != nil {
		p.stalledSince = p.seenAt
	} else {
		p.stalledSince = time.Time{}
	}
	return p.last
}

// SlotStalled is how long the slot's confirmed position has not moved
// while it holds WAL back, as of the last probe (which it may run). The
// relay's own count of what it holds cannot see events it never received;
// this can: with a dead replication connection, the slot stands still
// while the outbox fills.
func (p *PostgresProbe) SlotStalled(ctx context.Context) time.Duration {
	if p.slot == "" {
		return 0
	}
	p.probe(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalledSince.IsZero() {
		return 0
	}
	return time.Since(p.stalledSince)
}

func (p *PostgresProbe) query(ctx context.Context) probeResult {
	c, err := p.pool.Acquire(ctx)
	if err != nil {
		return probeResult{err: err}
	}
	defer c.Release()
	r := p.queryOn(ctx, c.Conn())
	if c.Conn().IsClosed() {
		// pgx closes a connection that missed its deadline in the
		// background, first reading what the server may still send for
		// up to 15s; on a dead connection nothing comes, and the pool
		// (and so the relay's stop) waits the whole time. Nothing more
		// is wanted from it: close the socket now.
		_ = c.Conn().PgConn().Conn().Close()
	}
	return r
}

func (p *PostgresProbe) queryOn(ctx context.Context, conn *pgx.Conn) probeResult {
	if p.slot == "" {
		var one int
		return probeResult{err: conn.QueryRow(ctx, "SELECT 1").Scan(&one)}
	}
	var r probeResult
	// The lag runs to where the server's WAL has reached (pgsql.WALEnd;
	// PostgreSQL 16 decodes on a standby too). A slot counts as
	// active only when a walsender streams from it: while it is being
	// created, the creating session holds it too, and what commits then,
	// before its consistent point, is not captured. failover and synced
	// came with PostgreSQL 17: read through to_jsonb, they are NULL on an
	// older server rather than an error, in one query for every version.
	h := &r.headroom
	var inRecovery bool
	err := conn.QueryRow(ctx, `
		SELECT active AND EXISTS (SELECT 1 FROM pg_stat_replication r WHERE r.pid = s.active_pid),
		       active_pid,
		       pg_wal_lsn_diff(`+pgsql.WALEnd+`, confirmed_flush_lsn)::float8,
		       pg_wal_lsn_diff(confirmed_flush_lsn, '0/0')::float8,
		       coalesce(wal_status, ''), safe_wal_size,
		       pg_size_bytes(current_setting('max_slot_wal_keep_size')),
		       (to_jsonb(s) ->> 'failover')::bool, (to_jsonb(s) ->> 'synced')::bool,
		       pg_is_in_recovery()
		FROM pg_replication_slots s WHERE slot_name = $1`, p.slot).Scan(&r.active, &h.ActivePID, &r.lag, &r.confirmed,
		&h.WALStatus, &h.SafeWALSize, &h.MaxWALKeepSize, &h.Failover, &h.Synced, &inRecovery)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return probeResult{}
	case err != nil:
		return probeResult{err: err}
	}
	if !inRecovery {
		h.Synced = nil
	}
	r.found = true
	return r
}

// SlotState is what the probe last learnt of the replication slot.
type SlotState struct {
	// Name is the slot's; empty for a probe of no slot (the poller).
	Name string
	// Err is why PostgreSQL did not answer; the rest is then unknown.
	Err error
	// Found: the slot exists. Active: a session streams from it.
	Found, Active bool
	// LagBytes is the WAL it holds back; ConfirmedFlushLSN its
	// confirmed_flush_lsn. Nil when not known.
	LagBytes, ConfirmedFlushLSN *uint64
	Headroom
}

// Slot returns what the probe knows of the slot, at most a second old
// (it may query).
func (p *PostgresProbe) Slot(ctx context.Context) SlotState {
	r := p.probe(ctx)
	s := SlotState{Name: p.slot, Err: r.err, Found: r.found, Active: r.active, Headroom: r.headroom}
	u := func(f *float64) *uint64 {
		if f == nil {
			return nil
		}
		v := uint64(max(*f, 0))
		return &v
	}
	s.LagBytes, s.ConfirmedFlushLSN = u(r.lag), u(r.confirmed)
	return s
}

// Check is a readiness check: nil when PostgreSQL answers and, with a
// slot, a session streams from it.
func (p *PostgresProbe) Check(ctx context.Context) error {
	r := p.probe(ctx)
	switch {
	case r.err != nil:
		return fmt.Errorf("PostgreSQL does not answer: %w", r.err)
	case p.slot == "":
		return nil
	case !r.found:
		return fmt.Errorf("replication slot %q does not exist (yet)", p.slot)
	case !r.active:
		return fmt.Errorf("no session streams from replication slot %q", p.slot)
	}
	return nil
}

// Describe implements [prometheus.Collector].
func (p *PostgresProbe) Describe(ch chan<- *prometheus.Desc) {
	ch <- pgUpDesc
	ch <- slotLagDesc
	ch <- slotActiveDesc
	ch <- slotConfirmedDesc
	ch <- slotStalledDesc
	ch <- slotSafeWALDesc
	ch <- slotMaxWALDesc
	ch <- slotWALStatusDesc
	ch <- slotFailoverDesc
	ch <- slotSyncedDesc
}

// Collect implements [prometheus.Collector].
func (p *PostgresProbe) Collect(ch chan<- prometheus.Metric) {
	r := p.probe(context.Background())
	up := 1.0
	if r.err != nil {
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(pgUpDesc, prometheus.GaugeValue, up)
	if p.slot == "" || !r.found {
		return
	}
	active := 0.0
	if r.active {
		active = 1
	}
	ch <- prometheus.MustNewConstMetric(slotActiveDesc, prometheus.GaugeValue, active, p.slot)
	if r.lag != nil {
		ch <- prometheus.MustNewConstMetric(slotLagDesc, prometheus.GaugeValue, max(*r.lag, 0), p.slot)
	}
	if r.confirmed != nil {
		ch <- prometheus.MustNewConstMetric(slotConfirmedDesc, prometheus.GaugeValue, *r.confirmed, p.slot)
	}
	ch <- prometheus.MustNewConstMetric(slotStalledDesc, prometheus.GaugeValue, p.SlotStalled(context.Background()).Seconds(), p.slot)
	p.collectHeadroom(ch, r.headroom)
}

// collectHeadroom exports what PostgreSQL says of how much longer it keeps
// the slot's WAL.
func (p *PostgresProbe) collectHeadroom(ch chan<- prometheus.Metric, h Headroom) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{p.slot}, labels...)...)
	}
	if v, ok := h.SafeWAL(); ok {
		gauge(slotSafeWALDesc, v)
	}
	gauge(slotMaxWALDesc, float64(h.MaxWALKeepSize))
	if h.WALStatus != "" {
		for _, s := range WALStatuses {
			gauge(slotWALStatusDesc, b2f(s == h.WALStatus), s)
		}
	}
	if h.Failover != nil {
		gauge(slotFailoverDesc, b2f(*h.Failover))
	}
	if h.Synced != nil {
		gauge(slotSyncedDesc, b2f(*h.Synced))
	}
}

// SafeWAL is SafeWALSize as outboxrelay_replication_slot_safe_wal_size_bytes
// has it: +Inf while the slot may hold back WAL without bound, so that no
// "less than" alert fires on it (the disk is then the limit, which
// OutboxRelaySlotWALRetained watches), and 0 once it is lost. known is
// false when the server does not say (a slot that reserves no WAL yet).
func (h Headroom) SafeWAL() (v float64, known bool) {
	switch {
	case h.SafeWALSize != nil:
		return float64(*h.SafeWALSize), true
	case h.WALStatus == "lost":
		return 0, true
	case h.MaxWALKeepSize < 0:
		return math.Inf(1), true
	}
	return 0, false
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
