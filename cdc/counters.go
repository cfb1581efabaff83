package cdc

import (
	"sync"
	"sync/atomic"
)

// counters are what the source counts for its metrics: the stream, the
// cleanup goroutine and Run's goroutine add to them, and scrapes read
// them from any goroutine.
type counters struct {
	skipped     atomic.Int64 // UPDATE, DELETE and TRUNCATE changes skipped
	cleaned     atomic.Int64 // rows cdc.cleanup deleted (cleanup.go)
	cleanupErrs atomic.Int64 // cdc.cleanup rounds that failed

	// losses counts the slot losses detected (slotloss.go); lost is set
	// when one stopped the source.
	losses atomic.Int64
	lost   atomic.Bool
	// mu guards the counts per cause and the cause that stopped the
	// source.
	mu        sync.Mutex
	byCause   map[SlotLossCause]int64
	lostCause SlotLossCause
}

// loss counts a slot loss of cause; stopped: it stops the source.
func (c *counters) loss(cause SlotLossCause, stopped bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byCause == nil {
		c.byCause = map[SlotLossCause]int64{}
	}
	c.byCause[cause]++
	c.losses.Add(1)
	if stopped {
		c.lostCause = cause
		c.lost.Store(true)
	}
}

// lossFound counts a slot loss that a backfill found and fills: it stops
// nothing, and is no cause's.
func (c *counters) lossFound() { c.losses.Add(1) }

// SkippedChanges counts the UPDATE, DELETE and TRUNCATE changes of the
// outbox table that the source skipped.
func (s *Source) SkippedChanges() int64 { return s.count.skipped.Load() }

// CleanedRows counts the outbox rows cleanup deleted.
func (s *Source) CleanedRows() int64 { return s.count.cleaned.Load() }

// CleanupErrors counts the cleanup rounds that failed.
func (s *Source) CleanupErrors() int64 { return s.count.cleanupErrs.Load() }

// SlotLosses counts the slot losses the source has detected, with either
// cdc.on_slot_loss.
func (s *Source) SlotLosses() int64 { return s.count.losses.Load() }

// SlotLossesByCause counts the slot losses the source has detected, per
// cause; every cause is there, most at 0.
func (s *Source) SlotLossesByCause() map[string]int64 {
	c := &s.count
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int64, len(SlotLossCauses))
	for _, cause := range SlotLossCauses {
		m[string(cause)] = c.byCause[cause]
	}
	return m
}

// SlotLost reports whether the source stopped on a lost slot
// (cdc.on_slot_loss fail) and waits for someone to act.
func (s *Source) SlotLost() bool { return s.count.lost.Load() }

// SlotLostCause is the cause of the slot loss that stopped the source;
// empty when none did.
func (s *Source) SlotLostCause() string {
	s.count.mu.Lock()
	defer s.count.mu.Unlock()
	return string(s.count.lostCause)
}
