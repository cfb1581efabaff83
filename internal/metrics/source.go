package metrics

import (
	"context"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxrelay/outboxrelay/connector"
)

// The numbers only some sources know. [Metrics.ExportSource] looks for
// these interfaces on the source it is given and exports what it finds;
// each method is called on every scrape or probe, concurrently with the
// source's Run.

// SkipCounter is a source that skips changes which are not events (the CDC
// source: UPDATE, DELETE and TRUNCATE of the outbox table).
type SkipCounter interface {
	// SkippedChanges is the number skipped since the source was made.
	SkippedChanges() int64
}

// Cleaner is a source that deletes outbox rows Kafka has (the CDC source
// with cdc.cleanup).
type Cleaner interface {
	// CleanedRows is the number of rows deleted since the source was made.
	CleanedRows() int64
	// CleanupErrors is the number of cleanup rounds that failed.
	CleanupErrors() int64
}

// SlotLossCounter is a source that notices when its replication slot is
// lost (the CDC source).
type SlotLossCounter interface {
	// SlotLosses is the number of slot losses detected since the source
	// was made.
	SlotLosses() int64
	// SlotLost reports whether a slot loss stopped the source
	// (cdc.on_slot_loss fail): it relays nothing until someone acts.
	SlotLost() bool
}

// SlotLossCauser is a [SlotLossCounter] that knows why its slot was lost
// (the CDC source): the metrics then carry a cause label.
type SlotLossCauser interface {
	// SlotLossesByCause is SlotLosses per cause, with every cause the
	// source knows, most at 0, so that a first loss is an increase.
	SlotLossesByCause() map[string]int64
	// SlotLostCause is the cause of the loss that stopped the source;
	// empty when none did.
	SlotLostCause() string
}

// LSNConfirmer is a source that reads a replication slot (the CDC source).
type LSNConfirmer interface {
	// ConfirmedLSN is the position up to which Kafka has acknowledged
	// everything and a checkpoint holds it: the source confirms it to the
	// slot, or will with its next status update.
	ConfirmedLSN() pglogrepl.LSN
}

// Backlogger is a source that can count the events it has not yet
// published (the poller: outbox rows not yet marked or deleted, those in
// flight included), per outbox table.
type Backlogger interface {
	// Backlogs returns, for each outbox table, how many events are
	// waiting and when the oldest of them was committed (zero when none
	// waits, or when the source cannot tell). It should be a cheap query
	// a table; ctx bounds it.
	Backlogs(ctx context.Context) ([]connector.Backlog, error)
}

// Streamer is a source that knows whether it is connected (the CDC
// source: whether its replication stream is open).
type Streamer interface {
	// Streaming reports whether the source streams, and whether it waits
	// as a standby for another session to let go of what it reads from.
	// Both false: it is connecting, or has lost its connection.
	Streaming() (streaming, standby bool)
}

type sourceStats struct {
	skips    SkipCounter
	cleaner  Cleaner
	lsn      LSNConfirmer
	backlog  Backlogger
	streamer Streamer

	slotLosses SlotLossCounter
}

// ExportSource exports the numbers src knows through the interfaces above,
// read at every scrape, and lets the probes ask src whether it is connected
// (Streamer). It does not wrap src: what src does is told by the runner
// (see [Metrics.Observer]).
func (m *Metrics) ExportSource(src connector.Source) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats = sourceStats{}
	m.stats.skips, _ = src.(SkipCounter)
	m.stats.cleaner, _ = src.(Cleaner)
	m.stats.lsn, _ = src.(LSNConfirmer)
	m.stats.backlog, _ = src.(Backlogger)
	m.stats.streamer, _ = src.(Streamer)
	m.stats.slotLosses, _ = src.(SlotLossCounter)
}

// Observer returns the hooks the runner calls ([connector.WithObserver]):
// they count the batches taken, the restarts of the source and the dead
// letters, and keep for the probes whether the source runs, how its last
// run ended, and since when the runner has held a batch it has not handed
// to the sink in full; for the status page, the last dead letters and the
// last failure. Each takes m's lock for a few assignments, and never
// blocks otherwise.
func (m *Metrics) Observer() connector.Observer { return runnerHooks{m} }

type runnerHooks struct{ m *Metrics }

var _ connector.Observer = runnerHooks{}

func (h runnerHooks) SourceStarted() {
	m := h.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.runs > 0 {
		m.restarts.Inc()
	}
	m.runs++
	m.running, m.lastErr = true, nil
	m.observeLocked()
}

func (h runnerHooks) SourceStopped(err error) {
	m := h.m
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.observeLocked()
	m.running, m.lastErr = false, err
	if err != nil {
		m.status.lastFailure = Failure{Err: err, At: now}
	}
}

func (h runnerHooks) BatchTaken(events int) {
	m := h.m
	if events > 0 {
		m.batchEvents.Observe(float64(events))
	}
	now := m.now()
	m.mu.Lock()
	m.waitingSince = now
	m.mu.Unlock()
}

func (h runnerHooks) BatchHandedOver() {
	m := h.m
	m.mu.Lock()
	m.waitingSince = time.Time{}
	m.mu.Unlock()
}

func (h runnerHooks) DeadLettered(d connector.DeadLetter) {
	m := h.m
	m.deadLettered.Inc()
	now := m.now()
	m.mu.Lock()
	m.status.dead++
	m.status.deadLetters.push(DeadLetterSeen{DeadLetter: d, At: now})
	m.mu.Unlock()
}

func (h runnerHooks) RunFailed(err error, _ time.Duration) {
	m := h.m
	now := m.now()
	m.mu.Lock()
	m.status.lastFailure = Failure{Err: err, At: now}
	m.heldUpLocked(err, now)
	m.mu.Unlock()
}

// Watch looks once a second, until ctx is done, at whether the source is
// up, so that a probe learns how long it has been down to within a second
// however seldom probes and scrapes come: each of them looks too, but
// one that comes after a long quiet would otherwise date the source's
// last moment up to the one before it. It also samples the rate of
// acknowledged records for the status page (RateInterval).
func (m *Metrics) Watch(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			m.mu.Lock()
			m.observeLocked()
			m.sampleRateLocked(now)
			m.mu.Unlock()
		}
	}
}

// upLocked reports whether the source is up: running and, if it can tell,
// connected; and whether it waits as a standby. m.mu is held.
func (m *Metrics) upLocked() (up, standby bool) {
	if !m.running {
		return false, false
	}
	if m.stats.streamer == nil {
		return true, false
	}
	return m.stats.streamer.Streaming()
}

// observeLocked notes the time when the source is up or a standby, which
// is what the liveness probe measures a source that is down from. m.mu is
// held.
func (m *Metrics) observeLocked() {
	if up, standby := m.upLocked(); up || standby {
		m.lastUp = m.now()
	}
}
