package metrics

import (
	"context"
	"time"

	"github.com/outboxrelay/outboxrelay/connector"
)

// What the status page shows beside the metrics, kept as the runner and
// the sink report it, each bounded: the last event read and the last
// acknowledged, the last dead letters, the rate of acknowledgements over
// the last minutes, the last failure the runner restarted from.

const (
	// RateInterval is how often the rate of acknowledged events is
	// sampled for the status page, and RateSamples how many samples are
	// kept: ten minutes.
	RateInterval = 5 * time.Second
	RateSamples  = 120
	// RecentDeadLetters is how many dead letters the status keeps, the
	// newest.
	RecentDeadLetters = 20
)

// Status is what the metrics know of the relay at one moment, for the
// status page.
type Status struct {
	// SourceRunning, SourceUp and SourceStandby are as in [Progress].
	SourceRunning, SourceUp, SourceStandby bool
	// Restarts counts the restarts of the source after the first start.
	Restarts int
	// LastFailure is the last failure the runner restarted the source
	// from, or with which the source's last run ended; nil when none.
	LastFailure *Failure
	// InFlight counts messages handed to Kafka and not yet acknowledged.
	InFlight int
	// Oldest is the record timestamp of the oldest event not yet in
	// Kafka, as outboxrelay_oldest_unpublished_event_age_seconds dates it;
	// zero when there is none.
	Oldest time.Time
	// Backlogs are the poller's unpublished rows per table (nil for cdc),
	// and BacklogErr why they could not be counted.
	Backlogs   []connector.Backlog
	BacklogErr error
	// Acknowledged counts the records Kafka acknowledged (dead letter
	// records included); DeadLettered the dead letters among them.
	Acknowledged, DeadLettered int64
	// LastRead is the newest event handed to Kafka, LastAcknowledged the
	// newest Kafka acknowledged; nil before the first.
	LastRead, LastAcknowledged *Seen
	// DeadLetters are the last [RecentDeadLetters] dead letters, newest
	// first.
	DeadLetters []DeadLetterSeen
	// Rate is the rate of acknowledged records, one sample every
	// [RateInterval], oldest first, at most [RateSamples].
	Rate []RateSample
	// ConfirmedLSN is the position the source confirms ([LSNConfirmer]);
	// nil for a source without one.
	ConfirmedLSN *uint64
}

// Failure is an error and when it happened.
type Failure struct {
	Err error
	At  time.Time
}

// Seen is an event on its way: its id and topic, its record timestamp
// (by default its commit in PostgreSQL), and when the relay handed it to
// Kafka or Kafka acknowledged it.
type Seen struct {
	EventID, Topic string
	Timestamp, At  time.Time
}

// DeadLetterSeen is a dead letter Kafka acknowledged, and when.
type DeadLetterSeen struct {
	connector.DeadLetter
	At time.Time
}

// RateSample is the rate of acknowledged records over the interval that
// ends At.
type RateSample struct {
	At        time.Time
	PerSecond float64
}

// statusState is what Metrics keeps for Status, under m.mu.
type statusState struct {
	acked, dead         int64
	lastRead, lastAcked Seen
	hasRead, hasAcked   bool
	lastFailure         Failure
	deadLetters         ring[DeadLetterSeen]
	rate                ring[RateSample]
	// sampledAt is when the last rate sample was taken, with acked then.
	sampledAt    time.Time
	sampledAcked int64
}

// ring keeps the last len(buf) values pushed; its zero value keeps none
// until made with newRing.
type ring[T any] struct {
	buf  []T
	next int
	full bool
}

func newRing[T any](n int) ring[T] { return ring[T]{buf: make([]T, n)} }

func (r *ring[T]) push(v T) {
	r.buf[r.next] = v
	r.next = (r.next + 1) % len(r.buf)
	r.full = r.full || r.next == 0
}

// values returns what the ring holds, oldest first.
func (r *ring[T]) values() []T {
	if !r.full {
		return append([]T(nil), r.buf[:r.next]...)
	}
	return append(append([]T(nil), r.buf[r.next:]...), r.buf[:r.next]...)
}

// sampleRateLocked adds a rate sample when RateInterval has passed since
// the last one. m.mu is held.
func (m *Metrics) sampleRateLocked(now time.Time) {
	s := &m.status
	if s.sampledAt.IsZero() {
		s.sampledAt, s.sampledAcked = now, s.acked
		return
	}
	d := now.Sub(s.sampledAt)
	if d < RateInterval {
		return
	}
	s.rate.push(RateSample{At: now, PerSecond: float64(s.acked-s.sampledAcked) / d.Seconds()})
	s.sampledAt, s.sampledAcked = now, s.acked
}

// Status returns what the metrics know of the relay now; ctx bounds the
// queries it makes (the poller's backlog, the slot's standstill).
func (m *Metrics) Status(ctx context.Context) Status {
	m.mu.Lock()
	m.observeLocked()
	st := m.status
	s := Status{
		SourceRunning: m.running,
		Restarts:      max(m.runs-1, 0),
		InFlight:      m.inflight.n,
		Acknowledged:  st.acked,
		DeadLettered:  st.dead,
		DeadLetters:   st.deadLetters.values(),
		Rate:          st.rate.values(),
	}
	s.SourceUp, s.SourceStandby = m.upLocked()
	lsn := m.stats.lsn
	if st.lastFailure.Err != nil {
		f := st.lastFailure
		s.LastFailure = &f
	}
	if st.hasRead {
		r := st.lastRead
		s.LastRead = &r
	}
	if st.hasAcked {
		a := st.lastAcked
		s.LastAcknowledged = &a
	}
	m.mu.Unlock()
	if lsn != nil {
		v := uint64(lsn.ConfirmedLSN())
		s.ConfirmedLSN = &v
	}
	// Newest first.
	for i, j := 0, len(s.DeadLetters)-1; i < j; i, j = i+1, j-1 {
		s.DeadLetters[i], s.DeadLetters[j] = s.DeadLetters[j], s.DeadLetters[i]
	}
	s.Oldest, s.Backlogs, s.BacklogErr = m.oldestUnpublished(ctx)
	return s
}

// oldestUnpublished is the record timestamp of the oldest event not yet in
// Kafka (in flight; while the cdc source is down, at least as old as the
// slot's standstill; for the poller, in the table), zero when none, with
// the poller's backlogs.
func (m *Metrics) oldestUnpublished(ctx context.Context) (time.Time, []connector.Backlog, error) {
	m.mu.Lock()
	backlog, slot := m.stats.backlog, m.slot
	running, _ := m.upLocked()
	m.mu.Unlock()
	now := m.now()
	oldest := m.oldestCommit()
	if slot != nil && !running {
		// The relay holds nothing while it is down, yet events wait in
		// the slot: they are at least as old as the time it stood still.
		sctx, cancel := context.WithTimeout(ctx, backlogTimeout)
		if d := slot(sctx); d > 0 && (oldest.IsZero() || now.Add(-d).Before(oldest)) {
			oldest = now.Add(-d)
		}
		cancel()
	}
	if backlog == nil {
		return oldest, nil, nil
	}
	bctx, cancel := context.WithTimeout(ctx, backlogTimeout)
	defer cancel()
	backlogs, err := backlog.Backlogs(bctx)
	for _, b := range backlogs {
		if !b.Oldest.IsZero() && (oldest.IsZero() || b.Oldest.Before(oldest)) {
			oldest = b.Oldest
		}
	}
	return oldest, backlogs, err
}
