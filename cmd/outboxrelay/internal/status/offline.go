package status

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/httpserver"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/pgsql"
	"github.com/outboxrelay/outboxrelay/internal/secret"
	"github.com/outboxrelay/outboxrelay/poller"
	"github.com/outboxrelay/outboxrelay/sink"
)

// Report is what PostgreSQL and the checkpoint topic say of a relay that
// does not answer: where its slot stands and whether a session holds it,
// and the last checkpoint it saved (cdc), or the rows waiting (poll).
type Report struct {
	Source   string   `json:"source"`
	Postgres string   `json:"postgres"`
	Tables   []string `json:"tables"`
	// Slot and Checkpoint are the cdc source's; Poll the poller's.
	Slot       *SlotReport        `json:"slot,omitempty"`
	Checkpoint *CheckpointReport  `json:"checkpoint,omitempty"`
	Poll       []httpserver.Table `json:"poll,omitempty"`
	// Problems are what could not be read, and why.
	Problems []string `json:"problems,omitempty"`
}

// SlotReport is the replication slot as pg_replication_slots has it.
type SlotReport struct {
	Name   string `json:"name"`
	Exists bool   `json:"exists"`
	// Holder is the session that holds the slot (a relay streaming from
	// it, wherever it runs), or nil.
	Holder            *Holder `json:"holder"`
	LagBytes          *int64  `json:"lag_bytes"`
	ConfirmedFlushLSN string  `json:"confirmed_flush_lsn,omitempty"`
	WALStatus         string  `json:"wal_status,omitempty"`
	// SafeWALSizeBytes is null while MaxWALKeepSizeBytes is -1.
	SafeWALSizeBytes    *int64 `json:"safe_wal_size_bytes"`
	MaxWALKeepSizeBytes int64  `json:"max_slot_wal_keep_size_bytes"`
}

// Holder is the session that holds a slot.
type Holder struct {
	PID             int32      `json:"pid"`
	ApplicationName string     `json:"application_name"`
	ClientAddr      string     `json:"client_addr,omitempty"`
	Since           *time.Time `json:"since"`
}

// CheckpointReport is the relay's last checkpoint in Kafka.
type CheckpointReport struct {
	Topic string `json:"topic"`
	Key   string `json:"key"`
	// Found is false when the topic holds none for this relay; Foreign
	// that the one found was written by another cluster (same database
	// and slot names).
	Found       bool      `json:"found"`
	Foreign     bool      `json:"foreign,omitempty"`
	EndLSN      string    `json:"end_lsn,omitempty"`
	CommitTime  time.Time `json:"commit_time,omitzero"`
	LastEventID string    `json:"last_event_id,omitempty"`
	Events      int64     `json:"events,omitempty"`
	Written     time.Time `json:"written,omitzero"`
	// AgeSeconds is how long ago it was written.
	AgeSeconds   float64 `json:"age_seconds,omitempty"`
	RelayVersion string  `json:"relay_version,omitempty"`
}

// Offline reads what PostgreSQL and Kafka say of the relay cfg configures,
// changing nothing: no topic is created, no slot touched. What cannot be
// read is a problem of the report, not an error.
func Offline(ctx context.Context, cfg *config.Config) Report {
	r := Report{Source: string(cfg.Source), Postgres: secret.Redact(cfg.Postgres.URL), Tables: cfg.Outbox.TableNames()}
	if cfg.Source != "cdc" {
		r.Poll = r.backlogs(ctx, cfg)
		return r
	}
	cc := cfg.CDCConfig()
	cc.SetDefaults()
	r.Slot = r.readSlot(ctx, cfg, cc.Slot)
	r.Checkpoint = r.readCheckpoint(ctx, cfg, cc.Slot)
	return r
}

func (r *Report) problem(format string, a ...any) {
	r.Problems = append(r.Problems, secret.RedactError(fmt.Errorf(format, a...)).Error())
}

// readSlot reads the slot and who holds it.
func (r *Report) readSlot(ctx context.Context, cfg *config.Config, slot string) *SlotReport {
	s := &SlotReport{Name: slot}
	conn, err := pgsql.Connect(ctx, cfg.Postgres.URL, cfg.Postgres.Network(), pgsql.Param("application_name", "outboxrelay-status"))
	if err != nil {
		r.problem("PostgreSQL: %w", err)
		return s
	}
	defer pgsql.Close(ctx, conn)
	var pid *int32
	var app, addr *string
	var since *time.Time
	err = conn.QueryRow(ctx, `
		SELECT s.active_pid, a.application_name, host(a.client_addr), a.backend_start,
		       pg_wal_lsn_diff(`+pgsql.WALEnd+`, s.confirmed_flush_lsn)::bigint, coalesce(s.confirmed_flush_lsn::text, ''),
		       coalesce(s.wal_status, ''), s.safe_wal_size, pg_size_bytes(current_setting('max_slot_wal_keep_size'))
		FROM pg_replication_slots s LEFT JOIN pg_stat_activity a ON a.pid = s.active_pid
		WHERE s.slot_name = $1`, slot).Scan(&pid, &app, &addr, &since,
		&s.LagBytes, &s.ConfirmedFlushLSN, &s.WALStatus, &s.SafeWALSizeBytes, &s.MaxWALKeepSizeBytes)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return s
	case err != nil:
		r.problem("read replication slot %q: %w", slot, err)
		return s
	}
	s.Exists = true
	if pid != nil {
		s.Holder = &Holder{PID: *pid, Since: since}
		if app != nil {
			s.Holder.ApplicationName = *app
		}
		if addr != nil {
			s.Holder.ClientAddr = *addr
		}
	}
	return s
}

// readCheckpoint reads the relay's last checkpoint from the checkpoint
// topic: the key is the cluster's system identifier (asked on a
// replication connection, as the relay does), the database and the slot.
func (r *Report) readCheckpoint(ctx context.Context, cfg *config.Config, slot string) *CheckpointReport {
	c := &CheckpointReport{Topic: cfg.Kafka.CheckpointTopic}
	id, err := cdc.Identify(ctx, cfg.Postgres.URL, cfg.Postgres.Network())
	if err != nil {
		r.problem("the checkpoint's key: %w", err)
		return c
	}
	key := id.CheckpointKey(slot)
	c.Key = key.String()
	sc := cfg.SinkConfig()
	sc.TransactionalID = ""
	own, found, foreign, err := sink.ReadCheckpoints(ctx, sc, c.Topic, key)
	if err != nil {
		r.problem("checkpoint topic %q: %w", c.Topic, err)
		return c
	}
	cp := own
	if !found {
		// None of this relay's: the latest another cluster wrote for the
		// same database and slot names, if any.
		for _, f := range foreign {
			if !found || f.Written.After(cp.Written) {
				cp, found = f, true
				c.Foreign = true
			}
		}
	}
	if !found {
		return c
	}
	c.Found = true
	c.EndLSN, c.CommitTime, c.LastEventID, c.Events = connector.FormatLSN(cp.EndLSN), cp.CommitTime, cp.LastEventID, cp.Events
	c.Written, c.RelayVersion = cp.Written, cp.RelayVersion
	c.AgeSeconds = max(time.Since(cp.Written), 0).Seconds()
	return c
}

// backlogs counts the rows each poller has not published.
func (r *Report) backlogs(ctx context.Context, cfg *config.Config) []httpserver.Table {
	var out []httpserver.Table
	for _, pc := range cfg.PollConfigs() {
		p, err := poller.New(pc)
		if err != nil {
			r.problem("poller for %s: %w", pc.Table, err)
			continue
		}
		bs, err := p.Backlogs(ctx)
		if err != nil {
			r.problem("count the unpublished rows of %s: %w", pc.Table, err)
			continue
		}
		for _, b := range bs {
			t := httpserver.Table{Name: b.Table, Unpublished: b.Events}
			if !b.Oldest.IsZero() {
				oldest := b.Oldest
				t.OldestUnpublished = &oldest
			}
			out = append(out, t)
		}
	}
	return out
}
