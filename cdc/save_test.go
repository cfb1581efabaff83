package cdc_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// fakeStore is a checkpoint store that keeps its checkpoints in memory
// and fails every save once fail is set. With async it saves as
// sink.CheckpointStore does, answering on a goroutine of its own; without,
// it only blocks.
type fakeStore struct {
	async bool
	mu    sync.Mutex
	saved []connector.Checkpoint
	fail  error
}

func (f *fakeStore) Load(context.Context) (connector.Checkpoint, bool, error) {
	return connector.Checkpoint{}, false, nil
}

func (f *fakeStore) Save(_ context.Context, cp connector.Checkpoint) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	f.saved = append(f.saved, cp)
	return nil
}

func (f *fakeStore) Close() {}

func (f *fakeStore) failFromNow(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

func (f *fakeStore) last() (connector.Checkpoint, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.saved) == 0 {
		return connector.Checkpoint{}, 0
	}
	return f.saved[len(f.saved)-1], len(f.saved)
}

// asyncStore is a fakeStore that can save without blocking its caller.
type asyncStore struct{ *fakeStore }

func (a asyncStore) SaveAsync(ctx context.Context, cp connector.Checkpoint, done func(error)) {
	go func() { done(a.Save(ctx, cp)) }()
}

// TestCheckpointSaves: while the stream runs it saves what Kafka
// acknowledged and confirms the slot up to it; once a save fails, the
// relay stops with an error that says the slot is confirmed only up to a
// saved checkpoint, and confirms nothing past the last one saved. Both
// for a store that answers saves on its own goroutine and one that can
// only block.
func TestCheckpointSaves(t *testing.T) {
	for _, async := range []bool{true, false} {
		name, slot := "blocking store", "save_blocking_slot"
		if async {
			name, slot = "async store", "save_async_slot"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			url := testenv.Postgres(t)
			admin := connect(ctx, t, url)
			exec(ctx, t, admin, createOutbox, `CREATE PUBLICATION save_pub FOR TABLE outbox WITH (publish = 'insert')`)
			f := &fakeStore{}
			var store connector.CheckpointStore = f
			if async {
				store = asyncStore{f}
			}
			open := func(context.Context, connector.CheckpointKey) (connector.CheckpointStore, error) { return store, nil }
			src, err := cdc.New(cdc.Config{URL: url, Slot: slot, Publication: "save_pub", CheckpointInterval: 20 * time.Millisecond},
				cdc.WithCheckpoints(open, "test"))
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			out := make(chan connector.Batch)
			done := make(chan error, 1)
			go func() { done <- src.Run(ctx, out) }()
			waitForSlot(ctx, t, admin, slot)

			insertEvent(ctx, t, admin, "a")
			deliver(ctx, t, out, "a")
			waitFor(ctx, t, "a checkpoint of the first event, confirmed to the slot", func() bool {
				cp, _ := f.last()
				return cp.Events == 1 && uint64(slotConfirmed(ctx, t, admin, slot)) >= cp.EndLSN
			})

			f.failFromNow(errors.New("the checkpoint topic is gone"))
			insertEvent(ctx, t, admin, "b")
			deliver(ctx, t, out, "b")
			var runErr error
			select {
			case runErr = <-done:
			case <-ctx.Done():
				t.Fatal("the source went on streaming after its checkpoint could not be saved")
			}
			if runErr == nil || !strings.Contains(runErr.Error(), "the checkpoint topic is gone") ||
				!strings.Contains(runErr.Error(), "the slot is confirmed only up to a saved checkpoint") {
				t.Fatalf("Run: %v, want the failed save, and that the slot is confirmed only up to a saved checkpoint", runErr)
			}
			last, _ := f.last()
			if last.Events != 1 {
				t.Errorf("the last checkpoint saved counts %d events, want 1: b's was never saved", last.Events)
			}
			if got := src.ConfirmedLSN(); uint64(got) != last.EndLSN {
				t.Errorf("confirmed %s after the failed save, want the last saved checkpoint's %d", got, last.EndLSN)
			}
			if src.AcknowledgedLSN() <= src.ConfirmedLSN() {
				t.Errorf("acknowledged %s, confirmed %s: b's acknowledgement is not past the checkpoint", src.AcknowledgedLSN(), src.ConfirmedLSN())
			}
			if got := slotConfirmed(ctx, t, admin, slot); uint64(got) > last.EndLSN {
				t.Errorf("the slot is confirmed at %s, past the last saved checkpoint %d", got, last.EndLSN)
			}
		})
	}
}

// deliver acknowledges every batch until the one with the event of
// aggregate id, that one too.
func deliver(ctx context.Context, t *testing.T, out <-chan connector.Batch, id string) {
	t.Helper()
	for {
		select {
		case b := <-out:
			if b.Done != nil {
				b.Done(nil)
			}
			for _, e := range b.Events {
				if e.AggregateID == id {
					return
				}
			}
		case <-ctx.Done():
			t.Fatalf("no batch with the event of aggregate %s", id)
		}
	}
}

// slotConfirmed is the slot's confirmed_flush_lsn, 0/0 when none.
func slotConfirmed(ctx context.Context, t *testing.T, conn *pgx.Conn, slot string) pglogrepl.LSN {
	t.Helper()
	var s *string
	if err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&s); err != nil {
		t.Fatal(err)
	}
	if s == nil {
		return 0
	}
	lsn, err := pglogrepl.ParseLSN(*s)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}
