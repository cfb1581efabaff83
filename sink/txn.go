package sink

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/connector"
)

// With a transactional id the sink publishes in Kafka transactions
// (kafka.delivery exactly_once): the runner commits each with the
// checkpoint that covers its events ([connector.Transactional]), so a
// read_committed consumer sees an event only once it and everything before
// it are in Kafka for good, and never an event of a transaction that
// failed. A message's done waits for the commit; a refusal is reported at
// once, and dooms the transaction.

var _ connector.Transactional = (*Sink)(nil)

var errAborted = errors.New("the Kafka transaction was aborted")

// txnState is the open transaction: the dones that wait for its commit and
// the first refusal in it.
type txnState struct {
	mu      sync.Mutex
	open    bool
	waiting []func(error)
	failed  error
}

// Transactions implements [connector.Transactional].
func (s *Sink) Transactions() bool { return s.txn != nil }

// Fence makes this sink the one writer of its transactional id: it loads a
// producer id, which bumps the id's epoch, so that any other instance
// using the id can no longer write or commit, and the broker aborts the
// transaction it left open. Call it on taking over, before reading the
// checkpoint.
func (s *Sink) Fence(ctx context.Context) error {
	if s.txn == nil {
		return nil
	}
	if _, _, err := s.client().ProducerID(ctx); err != nil {
		return fenced(fmt.Errorf("take over transactional id %q (InitProducerID): %w%s", s.cfg.TransactionalID, err, txnACLHint(err, s.cfg.TransactionalID)))
	}
	return nil
}

func (s *Sink) produceInTxn(ctx context.Context, rec *kgo.Record, outcome func(error) error, done func(error)) error {
	t := s.txn
	t.mu.Lock()
	if !t.open {
		if err := s.client().BeginTransaction(); err != nil {
			t.mu.Unlock()
			return fenced(fmt.Errorf("begin a Kafka transaction: %w", err))
		}
		t.open = true
	}
	t.mu.Unlock()
	s.p.Produce(ctx, rec, func(_ *kgo.Record, err error) {
		if err = fenced(outcome(err)); err != nil {
			t.mu.Lock()
			if t.failed == nil {
				t.failed = err
			}
			t.mu.Unlock()
			done(err)
			return
		}
		t.mu.Lock()
		t.waiting = append(t.waiting, done)
		t.mu.Unlock()
	})
	return nil
}

// Commit implements [connector.Transactional].
func (s *Sink) Commit(ctx context.Context, mark *connector.Message) error {
	t := s.txn
	if mark != nil {
		rec := &kgo.Record{Topic: mark.Topic, Key: mark.Key, Value: mark.Value, Timestamp: mark.Timestamp}
		partitioned := withPartition(ctx, rec, mark)
		if err := s.produceInTxn(ctx, rec, partitioned, func(error) {}); err != nil {
			return err
		}
	}
	if err := s.client().Flush(ctx); err != nil {
		return s.failTxn(ctx, fmt.Errorf("flush the Kafka transaction: %w", err))
	}
	t.mu.Lock()
	failed, open := t.failed, t.open
	t.mu.Unlock()
	if failed != nil {
		return s.failTxn(ctx, fmt.Errorf("a record of the Kafka transaction was refused, so it is aborted: %w", failed))
	}
	if !open {
		return nil
	}
	if err := s.client().EndTransaction(ctx, kgo.TryCommit); err != nil {
		return s.failTxn(ctx, fmt.Errorf("commit the Kafka transaction: %w%s", err, txnACLHint(err, s.cfg.TransactionalID)))
	}
	t.mu.Lock()
	waiting := t.waiting
	t.waiting, t.failed, t.open = nil, nil, false
	t.mu.Unlock()
	for _, done := range waiting {
		done(nil)
	}
	return nil
}

// failTxn aborts the transaction after err and returns err.
func (s *Sink) failTxn(ctx context.Context, err error) error {
	if aerr := s.abortTxn(ctx, err); aerr != nil {
		s.log.Warn("abort the Kafka transaction", "err", aerr)
	}
	return fenced(err)
}

// fenced marks an error that says another instance took over the
// transactional id as permanent: this client can never write again, and
// the relay stops rather than retry (restarted, it waits as a standby).
func fenced(err error) error {
	switch {
	case errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch):
		return connector.Permanent(fmt.Errorf("%w; another instance of this relay took over its transactional id, so this one stops: restarted, a CDC relay waits as a standby and a poller takes a free instance number", err))
	case errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		return connector.Permanent(err)
	}
	return err
}

// abortTxn aborts the open transaction: the records not yet sent are
// dropped, the broker discards the others, and every done still waiting
// gets cause.
func (s *Sink) abortTxn(ctx context.Context, cause error) error {
	t := s.txn
	err := s.client().AbortBufferedRecords(ctx)
	if eerr := s.client().EndTransaction(ctx, kgo.TryAbort); eerr != nil && err == nil {
		err = fmt.Errorf("abort the Kafka transaction: %w", eerr)
	}
	t.mu.Lock()
	waiting := t.waiting
	t.waiting, t.failed, t.open = nil, nil, false
	t.mu.Unlock()
	for _, done := range waiting {
		done(fmt.Errorf("%w: %w", errAborted, cause))
	}
	s.log.Info("aborted the Kafka transaction: read_committed consumers never see its records, and its events are published again from the checkpoint",
		"records", len(waiting), "cause", cause)
	return err
}

// txnACLHint names the ACL a transactional producer needs when err says
// one is missing.
func txnACLHint(err error, id string) string {
	if errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
		return fmt.Sprintf("; grant the relay's principal WRITE and DESCRIBE on transactional id %q", id)
	}
	return ""
}
