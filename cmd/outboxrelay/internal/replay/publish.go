package replay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/app"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/sink"
)

// publisher sends batches of records to Kafka and, with them, the state
// record that says they were sent: with kafka.delivery exactly_once in one
// Kafka transaction per batch, under a transactional id of its own (never
// the relay's, which it would fence), so that a read_committed consumer
// sees a batch whole or not at all, and the state says exactly which;
// otherwise the state is written once Kafka has acknowledged the batch.
//
// A batch is sent from one goroutine, one at a time.
type publisher struct {
	snk *sink.Sink
	txn bool
	log *slog.Logger
}

// newPublisher opens the sink of cfg, with transactionalSuffix after the
// relay's transactional id when it publishes in transactions, and fences
// whoever used that id before (an earlier run of the same replay).
func newPublisher(ctx context.Context, cfg *config.Config, transactionalSuffix string, log *slog.Logger) (*publisher, error) {
	sc := cfg.SinkConfig()
	if sc.TransactionalID != "" {
		sc.TransactionalID += transactionalSuffix
	}
	quiet := app.ClientLogger(log, cfg.Log.Level, "kafka")
	snk, err := sink.New(sc, sink.WithLogger(log), sink.WithClientOptions(kgo.WithLogger(kslog.New(quiet))))
	if err != nil {
		return nil, err
	}
	p := &publisher{snk: snk, txn: snk.Transactions(), log: log}
	if err := snk.Fence(ctx); err != nil {
		snk.Close()
		return nil, err
	}
	return p, nil
}

func (p *publisher) Close() { p.snk.Close() }

// refusal decides what becomes of a record the sink refuses at once as
// one Kafka can never take (larger than its topic takes): the record to
// send in its place (a dead letter), or an error that stops the batch.
type refusal func(i int, cause *connector.EventError) (*connector.Message, error)

// send publishes msgs and then the record state makes (nil: none), and
// returns once Kafka has them all
// (in a transaction: once it committed). A refusal by the broker after a
// record was sent (a limit the sink did not know) fails the batch, naming
// the event: in a transaction nothing of it is seen; otherwise the records
// acknowledged stay, and the state is not written, so the next run sends
// the batch again.
func (p *publisher) send(ctx context.Context, msgs []*connector.Message, state func() *connector.Message, refuse refusal) error {
	var mu sync.Mutex
	var failed error
	done := func(err error) {
		if err != nil {
			mu.Lock()
			failed = errors.Join(failed, err)
			mu.Unlock()
		}
	}
	for i, m := range msgs {
		if err := p.publish(ctx, i, m, done, refuse); err != nil {
			if p.txn {
				_ = p.snk.Abort(context.WithoutCancel(ctx))
			}
			return err
		}
	}
	if p.txn {
		if err := p.snk.Commit(ctx, state()); err != nil {
			return explainRefusal(err)
		}
		return nil
	}
	if err := p.snk.Flush(ctx); err != nil {
		return fmt.Errorf("wait for Kafka to acknowledge the batch: %w", err)
	}
	mu.Lock()
	err := failed
	mu.Unlock()
	if err != nil {
		return explainRefusal(err)
	}
	mark := state()
	if mark == nil {
		return nil
	}
	saved := make(chan error, 1)
	if err := p.snk.Publish(ctx, mark, func(err error) { saved <- err }); err != nil {
		return fmt.Errorf("write the replay's state: %w", err)
	}
	if err := p.snk.Flush(ctx); err != nil {
		return fmt.Errorf("write the replay's state: %w", err)
	}
	if err := <-saved; err != nil {
		return fmt.Errorf("write the replay's state: %w", err)
	}
	return nil
}

// publish hands m to the sink; a record the sink refuses at once is
// replaced by what refuse says, which, a dead letter too large itself, is
// cut to fit as the runner cuts it.
func (p *publisher) publish(ctx context.Context, i int, m *connector.Message, done func(error), refuse refusal) error {
	err := p.snk.Publish(ctx, m, done)
	var ee *connector.EventError
	if err == nil || !errors.As(err, &ee) {
		return err
	}
	dl, err := refuse(i, ee)
	if err != nil || dl == nil {
		return err
	}
	err = p.snk.Publish(ctx, dl, done)
	var tl *connector.RecordTooLargeError
	if !errors.As(err, &tl) {
		return err
	}
	if !connector.FitDeadLetter(dl, tl.Limit) {
		return fmt.Errorf("event %s cannot be published (%v), and its dead letter record is larger than topic %s takes even cut down: %w", ee.EventID, ee.Err, dl.Topic, err)
	}
	return p.snk.Publish(ctx, dl, done)
}

// explainRefusal says what to do about a batch the broker refused.
func explainRefusal(err error) error {
	var ee *connector.EventError
	if errors.As(err, &ee) {
		return fmt.Errorf("the broker refused the record of event %s, which the sink had let through: %w; raise the topic's max.message.bytes, or leave the event out, and --resume", ee.EventID, err)
	}
	return err
}
