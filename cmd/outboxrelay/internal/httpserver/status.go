package httpserver

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// Status is where the relay stands, as GET /status gives it in JSON and
// GET / shows it. Its fields are documented in docs/status.md, which a
// test keeps in step with the JSON names here. Nothing in it is secret
// (connection strings come redacted, error texts scrubbed of the
// configured secrets), and reading it changes nothing.
type Status struct {
	// Version is the relay's version, as outboxrelay_build_info has it.
	Version string `json:"version"`
	// Time is when this status was taken; StartedAt when the relay
	// started.
	Time      time.Time `json:"time"`
	StartedAt time.Time `json:"started_at"`
	// Source is cdc or poll; Tables the outbox tables it reads;
	// Postgres the connection string, redacted; Brokers Kafka's.
	Source   string   `json:"source"`
	Tables   []string `json:"tables"`
	Postgres string   `json:"postgres"`
	Brokers  []string `json:"brokers"`
	// Ready is whether /readyz passes, and Readiness its checks, in the
	// order /readyz gives them. The handler fills both in.
	Ready     bool          `json:"ready"`
	Readiness []CheckResult `json:"readiness"`
	// SourceUp: the source is connected (cdc: streams from the slot;
	// poll: claims). Standby: it waits for another session to let go of
	// the slot.
	SourceUp bool `json:"source_up"`
	Standby  bool `json:"standby"`
	// Slot is the replication slot (cdc), Poll the poller's claims and
	// backlog (poll); the other is absent.
	Slot *Slot `json:"slot,omitempty"`
	Poll *Poll `json:"poll,omitempty"`
	// Lag is how far behind the database the relay is.
	Lag Lag `json:"lag"`
	// EventsInFlight are handed to Kafka and not yet acknowledged;
	// EventsAcknowledged counts the records Kafka acknowledged since the
	// relay started (dead letter records included).
	EventsInFlight     int   `json:"events_in_flight"`
	EventsAcknowledged int64 `json:"events_acknowledged"`
	// Rate is the rate of acknowledged records over the last minutes.
	Rate Rate `json:"rate"`
	// LastCommitted is the newest event the relay has read and handed to
	// Kafka; LastPublished the newest Kafka acknowledged. Null before the
	// first.
	LastCommitted *Event `json:"last_committed"`
	LastPublished *Event `json:"last_published"`
	// DeadLetters are the events sent to the dead letter topic.
	DeadLetters DeadLetters `json:"dead_letters"`
	// Restarts counts the restarts of the source from the last
	// checkpoint; LastError is the last failure, or null.
	Restarts  int        `json:"restarts"`
	LastError *TimedText `json:"last_error"`
}

// CheckResult is one readiness check.
type CheckResult struct {
	Name string `json:"name"`
	// OK: it passes. Message says what is wrong, or a note when it
	// passes (a standby).
	OK      bool   `json:"ok"`
	Message string `json:"message,omitempty"`
}

// Slot is the cdc source's replication slot, as PostgreSQL reports it.
type Slot struct {
	Name string `json:"name"`
	// Error is why PostgreSQL did not answer; the fields below it are
	// then unknown.
	Error  string `json:"error,omitempty"`
	Exists bool   `json:"exists"`
	// Active: a session streams from it; ActivePID is the session that
	// holds it, or null.
	Active    bool   `json:"active"`
	ActivePID *int32 `json:"active_pid"`
	// ConfirmedFlushLSN is the slot's position as the server has it;
	// RelayConfirmedLSN the position up to which Kafka has everything and
	// the relay confirms (it may be ahead until the next status update).
	ConfirmedFlushLSN string `json:"confirmed_flush_lsn,omitempty"`
	RelayConfirmedLSN string `json:"relay_confirmed_lsn,omitempty"`
	// WALStatus is reserved, extended, unreserved or lost.
	WALStatus string `json:"wal_status,omitempty"`
	// SafeWALSizeBytes is the WAL the server may still write before the
	// slot is in danger of invalidation; null when MaxWALKeepSizeBytes is
	// -1 (unbounded) or the slot is lost.
	SafeWALSizeBytes    *int64 `json:"safe_wal_size_bytes"`
	MaxWALKeepSizeBytes int64  `json:"max_slot_wal_keep_size_bytes"`
	// Failover: a failover slot (null before PostgreSQL 17); Synced: on
	// a standby, synchronized from the primary (null on a primary).
	Failover *bool `json:"failover"`
	Synced   *bool `json:"synced"`
}

// Poll is what the poller claims: its settings and the rows waiting.
type Poll struct {
	Mode     string  `json:"mode"`
	Interval string  `json:"interval"`
	Buckets  int     `json:"buckets"`
	Tables   []Table `json:"tables"`
	// Error is why the rows could not be counted.
	Error string `json:"error,omitempty"`
}

// Table is one outbox table's rows not yet published.
type Table struct {
	Name        string `json:"name"`
	Unpublished int64  `json:"unpublished"`
	// OldestUnpublished is the oldest waiting row's time, when its
	// ordering column is a timestamptz; null otherwise.
	OldestUnpublished *time.Time `json:"oldest_unpublished"`
}

// Lag is how far behind the database the relay is.
type Lag struct {
	// Bytes is the WAL the slot holds back (cdc); null for poll.
	Bytes *uint64 `json:"bytes"`
	// Seconds is the age of the oldest event not yet in Kafka, 0 when
	// there is none; OldestUnpublished is its record timestamp.
	Seconds           float64    `json:"seconds"`
	OldestUnpublished *time.Time `json:"oldest_unpublished"`
}

// Rate is the rate of acknowledged records.
type Rate struct {
	// IntervalSeconds is the time between two samples.
	IntervalSeconds float64 `json:"interval_seconds"`
	// EventsPerSecond is the newest sample's rate, 0 before the first.
	EventsPerSecond float64 `json:"events_per_second"`
	// Samples are oldest first, ten minutes at most.
	Samples []RateSample `json:"samples"`
}

// RateSample is the rate over the interval that ends At.
type RateSample struct {
	At              time.Time `json:"at"`
	EventsPerSecond float64   `json:"events_per_second"`
}

// Event is an event on its way.
type Event struct {
	ID    string `json:"id"`
	Topic string `json:"topic"`
	// Timestamp is its record timestamp (by default its commit in
	// PostgreSQL); At when the relay handed it to Kafka (LastCommitted)
	// or Kafka acknowledged it (LastPublished).
	Timestamp time.Time `json:"timestamp"`
	At        time.Time `json:"at"`
}

// DeadLetters are the events sent to the dead letter topic.
type DeadLetters struct {
	// Topic is kafka.dead_letter_topic; empty when there is none (an
	// event that cannot be published stops the relay, or for poll goes
	// to its dead-letter table).
	Topic string `json:"topic"`
	// Total counts them since the relay started; Recent are the last 20,
	// newest first.
	Total  int64        `json:"total"`
	Recent []DeadLetter `json:"recent"`
	// Command is outboxrelay dead-letters with the relay's configuration
	// flags: with list, show ID or redrive it reads them, or sends them on
	// once the routing is fixed (docs/replay.md#dead-letters).
	Command string `json:"command"`
}

// DeadLetter is one event sent to the dead letter topic.
type DeadLetter struct {
	ID string `json:"id"`
	// Topic is the topic the event was routed to; empty when routing
	// did not get that far.
	Topic  string    `json:"topic"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// TimedText is a message and when it was said.
type TimedText struct {
	Message string    `json:"message"`
	At      time.Time `json:"at"`
}

// status returns the relay's status with its readiness.
func status(ctx context.Context, cfg Config) Status {
	s := cfg.Status(ctx)
	s.Ready = true
	for _, r := range runChecks(ctx, cfg.Ready) {
		s.Ready = s.Ready && r.OK
		s.Readiness = append(s.Readiness, r)
	}
	return s
}

// statusJSON serves GET /status.
func statusJSON(cfg Config) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), checkTimeout)
		defer cancel()
		s := status(ctx, cfg)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s)
	})
}
