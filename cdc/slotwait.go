package cdc

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/connector"
)

// slotWait is the source's wait for a slot another session holds, and
// whether it streams: Run's goroutine moves it, and probes and scrapes
// read state from any goroutine.
type slotWait struct {
	// state is a sourceState.
	state atomic.Int32
	// holder is the PID of the session last seen holding the slot, so
	// that the wait for it is logged once; only Run's goroutine touches
	// it.
	holder int32
	// refused is the holder the standby last failed to end
	// (cdc.takeover_after), so that it says so once; only Run's goroutine
	// touches it.
	refused int32
}

type sourceState int32

const (
	stateDown      sourceState = iota // connecting, or waiting to be restarted
	stateStreaming                    // the replication stream is open
	stateStandby                      // another session holds the slot; waiting for it
)

func (w *slotWait) set(st sourceState) { w.state.Store(int32(st)) }

// Streaming reports whether the source streams from its slot, and whether,
// instead, it waits as a standby for another session to let go of the
// slot. Both false: it is connecting or waits to be restarted.
func (s *Source) Streaming() (streaming, standby bool) {
	st := sourceState(s.wait.state.Load())
	return st == stateStreaming, st == stateStandby
}

// slotPollInterval is how often a source waiting for the slot looks again.
const slotPollInterval = time.Second

// awaitSlot returns once no session streams from the slot. The holder may
// be another relay (this one is then its standby) or this relay's own
// earlier session on a connection that died without a word, which the
// server ends after wal_sender_timeout. Either way the wait is logged once
// per holder at INFO: it is expected, and a WARN every second would bury
// what matters.
func (s *Source) awaitSlot(ctx context.Context, conn *pgx.Conn) (waited bool, err error) {
	var waitingSince time.Time
	for {
		qctx, cancel := s.cfg.Network.Query(ctx)
		var pid *int32
		err = conn.QueryRow(qctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, s.cfg.Slot).Scan(&pid)
		cancel()
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return !waitingSince.IsZero(), nil // gone, or dropped meanwhile; ensureSlot judges
		case err != nil:
			return false, classify("look up who holds the replication slot", err)
		case s.backfill != nil && pid != nil:
			return false, connector.Permanent(fmt.Errorf("a backfill needs the slot to itself: session %d streams from replication slot %q; stop the relay using it, then run the backfill", *pid, s.cfg.Slot))
		case pid == nil:
			s.wait.set(stateDown)
			if !waitingSince.IsZero() {
				s.log.Info("the replication slot is free; taking it over", "slot", s.cfg.Slot,
					"waited", time.Since(waitingSince).Round(time.Millisecond).String())
			}
			return !waitingSince.IsZero(), nil
		}
		if waitingSince.IsZero() {
			waitingSince = time.Now()
		}
		if *pid != s.wait.holder {
			s.wait.holder = *pid
			s.log.Info("another session holds the replication slot; waiting for it to let go, as a standby",
				"slot", s.cfg.Slot, "holder_pid", *pid, "check_every", slotPollInterval.String(),
				"hint", "if it is this relay's own session on a dead connection, the server ends it after wal_sender_timeout")
		}
		if s.cfg.TakeoverAfter > 0 {
			s.endSilentHolder(ctx, conn, *pid)
		}
		s.wait.set(stateStandby)
		if err := sleep(ctx, slotPollInterval); err != nil {
			return false, err
		}
	}
}

// endSilentHolder ends the session holding the slot when the server has
// heard nothing from its client for cdc.takeover_after: a relay frozen or
// cut off, whose session the server would otherwise keep until its
// wal_sender_timeout. A live client answers at least once a status
// interval. Ending it needs the same role or pg_signal_backend; without,
// the standby says so once and waits.
func (s *Source) endSilentHolder(ctx context.Context, conn *pgx.Conn, pid int32) {
	qctx, cancel := s.cfg.Network.Query(ctx)
	defer cancel()
	var silent *float64
	err := conn.QueryRow(qctx, `SELECT extract(epoch FROM clock_timestamp() - reply_time)::float8 FROM pg_stat_replication WHERE pid = $1`, pid).Scan(&silent)
	if err != nil || silent == nil {
		return // gone meanwhile, or no reply yet
	}
	quiet := time.Duration(*silent * float64(time.Second))
	if quiet < s.cfg.TakeoverAfter {
		return
	}
	var ended bool
	if err := conn.QueryRow(qctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&ended); err != nil || !ended {
		if s.wait.refused != pid {
			s.wait.refused = pid
			s.log.Warn("could not end the silent session holding the replication slot (cdc.takeover_after); waiting for the server's wal_sender_timeout",
				"slot", s.cfg.Slot, "holder_pid", pid, "silent_for", quiet.Round(time.Millisecond).String(), "err", err,
				"hint", "the relay's role may end sessions of its own role; for others grant it pg_signal_backend")
		}
		return
	}
	s.log.Warn("ended the session holding the replication slot: its client has not answered the server for longer than cdc.takeover_after",
		"slot", s.cfg.Slot, "holder_pid", pid, "silent_for", quiet.Round(time.Millisecond).String(), "takeover_after", s.cfg.TakeoverAfter.String())
}
