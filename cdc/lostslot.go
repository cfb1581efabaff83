package cdc

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxrelay/outboxrelay/internal/pgsql"
)

// A stream that ends because its slot was lost under it (dropped by a
// DBA, who ends its walsender first; invalidated, which ends it too)
// leaves batches on their way to Kafka. Once the runner hears the source
// has ended, it drops what the producer has not sent, in case another
// instance has taken over the slot, and the records already sent land
// without the acknowledgement a checkpoint needs; a backfill from the
// checkpoint then publishes them all again. So before it ends, a stream
// the server ended looks at the slot, and when it is lost, no one can be
// streaming past this relay from it: it waits, up to the shutdown
// timeout, for Kafka to acknowledge the batches it handed on, and the
// checkpoint it saves as it ends holds them. The next session reports the
// loss as ever. A stream that went silent, or whose slot is there, ends
// at once: the look costs one short query on a server that just spoke.

// DefaultDrainTimeout is WithDrainTimeout's default, the runner's
// shutdown timeout's.
const DefaultDrainTimeout = 30 * time.Second

// lostSlotLook bounds the look at the slot: the runner's producer goes on
// sending while it lasts.
const lostSlotLook = 2 * time.Second

// WithDrainTimeout sets how long a stream whose slot was lost under it
// waits for Kafka to acknowledge what it handed on (the relay's
// shutdown.timeout). Default DefaultDrainTimeout.
func WithDrainTimeout(d time.Duration) Option {
	return func(s *Source) { s.drainTimeout = d }
}

// handedOn counts the batches with a Done that the source handed to the
// runner and whose Done has not been called yet.
type handedOn struct{ n atomic.Int64 }

// track counts one more batch handed on with done, and returns the Done
// to hand on in its place.
func (h *handedOn) track(done func(error)) func(error) {
	if done == nil {
		return nil
	}
	h.n.Add(1)
	return func(err error) {
		h.n.Add(-1)
		done(err)
	}
}

// untrack takes back a batch that was not handed on after all.
func (h *handedOn) untrack() { h.n.Add(-1) }

// drainIfLost waits for what the ended stream handed on when err, its
// end, came from the server and the slot is lost; see above.
func (s *Source) drainIfLost(ctx context.Context, err error) {
	var dead *deadConnError
	var cpErr *checkpointError
	if ctx.Err() != nil || err == nil || errors.As(err, &dead) || errors.As(err, &cpErr) || s.handed.n.Load() == 0 {
		return
	}
	if !s.slotLostNow(ctx) {
		return
	}
	timeout := s.drainTimeout
	if timeout <= 0 {
		timeout = DefaultDrainTimeout
	}
	s.log.Info("the replication slot was lost under the stream: waiting for Kafka to acknowledge what is on its way, so that the checkpoint holds it",
		"slot", s.cfg.Slot, "batches", s.handed.n.Load(), "acknowledged_lsn", s.AcknowledgedLSN(), "timeout", timeout.String())
	deadline := time.Now().Add(timeout)
	for s.handed.n.Load() > 0 && time.Now().Before(deadline) {
		if sleep(ctx, 10*time.Millisecond) != nil {
			return
		}
	}
	if n := s.handed.n.Load(); n > 0 {
		s.log.Warn("Kafka did not acknowledge everything on its way within the timeout; a backfill publishes those events again",
			"slot", s.cfg.Slot, "batches", n, "acknowledged_lsn", s.AcknowledgedLSN())
	}
}

// slotLostNow reports whether the slot is lost, as the next session would
// judge it, from a quick look; false when the server does not answer.
func (s *Source) slotLostNow(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, lostSlotLook)
	defer cancel()
	conn, err := pgsql.Connect(ctx, s.cfg.URL, s.cfg.Network)
	if err != nil {
		return false
	}
	defer pgsql.Close(ctx, conn)
	slot, err := s.readSlot(ctx, conn)
	if err != nil {
		return false
	}
	v, cause, _ := s.judge(slot, nil)
	if v == slotLost {
		s.log.Debug("the slot is lost", "slot", s.cfg.Slot, "cause", string(cause), "confirmed_lsn", pglogrepl.LSN(slot.confirmed))
	}
	return v == slotLost
}
