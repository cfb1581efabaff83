package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxrelay/outboxrelay/connector"
)

// The numbers only some sources know. [Metrics.Source] looks for these
// interfaces on the source it decorates and exports what it finds; each
// method is called on every scrape, concurrently with the source's Run.

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

// ErrNotTaken is given to the Done of a batch that the source handed to the
// decorator of [Metrics.Source] and that the runner never took, because it
// was stopping. The source offers it again on its next Run, as it would a
// batch the runner had not taken from it directly.
var ErrNotTaken = errors.New("batch not taken: the relay was stopping")

// Source returns src counting the batches it hands on and its restarts,
// and exports the numbers src knows through the interfaces above.
//
// The decorator stands between src and the runner: it takes each batch
// from src, counts it, and offers it to the runner. So that every batch
// src handed over still gets exactly one Done, a batch the runner never
// takes (it was stopping) gets Done(ErrNotTaken); by then the runner has
// settled every batch it took, so the order of Done calls holds.
func (m *Metrics) Source(src connector.Source) connector.Source {
	m.mu.Lock()
	m.stats = sourceStats{}
	m.stats.skips, _ = src.(SkipCounter)
	m.stats.cleaner, _ = src.(Cleaner)
	m.stats.lsn, _ = src.(LSNConfirmer)
	m.stats.backlog, _ = src.(Backlogger)
	m.stats.streamer, _ = src.(Streamer)
	m.stats.slotLosses, _ = src.(SlotLossCounter)
	m.mu.Unlock()
	return &source{src: src, m: m}
}

type source struct {
	src connector.Source
	m   *Metrics
}

func (s *source) Run(ctx context.Context, out chan<- connector.Batch) error {
	s.m.started()
	in := make(chan connector.Batch)
	res := make(chan error, 1)
	go func() { res <- s.src.Run(ctx, in) }()
	// The source's state is looked at every second, so that how long it
	// has been down is known to within a second when a probe asks.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var err error
loop:
	for {
		select {
		case <-tick.C:
			s.m.mu.Lock()
			s.m.observeLocked()
			s.m.mu.Unlock()
		case b := <-in:
			s.m.offered(len(b.Events))
			select {
			case out <- b:
				s.m.taken()
			case <-ctx.Done():
				s.m.taken()
				if b.Done != nil {
					b.Done(ErrNotTaken)
				}
				err = <-res
				break loop
			}
		case err = <-res:
			break loop
		}
	}
	s.m.stopped(err)
	return err
}

func (m *Metrics) started() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.runs > 0 {
		m.restarts.Inc()
	}
	m.runs++
	m.running, m.runningSince, m.lastErr = true, m.now(), nil
	m.observeLocked()
}

func (m *Metrics) stopped(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.observeLocked()
	m.running, m.lastErr = false, err
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

func (m *Metrics) offered(events int) {
	if events > 0 {
		m.batchEvents.Observe(float64(events))
	}
	m.mu.Lock()
	m.waitingSince = m.now()
	m.mu.Unlock()
}

func (m *Metrics) taken() {
	m.mu.Lock()
	m.waitingSince = time.Time{}
	m.mu.Unlock()
}
