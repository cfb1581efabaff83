package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/poller"
)

// newPoller builds the polling source. retry tells whether the runner,
// stopped by an event that can never be published, should run again: the
// poller counts such failures and, after poll.max_attempts, moves the row
// to its dead-letter table, so running again is how the relay goes on.
// With several outbox tables it polls each (poller.Sources).
func newPoller(cfg *config.Config, log *slog.Logger) (src connector.Source, retry func(error) bool, err error) {
	var ps poller.Sources
	for _, pc := range cfg.PollConfigs() {
		p, err := poller.New(pc, poller.WithLogger(log))
		if err != nil {
			return nil, nil, err
		}
		ps = append(ps, p)
	}
	if len(ps) == 1 {
		return ps[0], ps[0].Retries, nil
	}
	return ps, ps.Retries, nil
}

// retryPause is the pause before running again after a counted failure.
const retryPause = time.Second

// runRetrying runs run until it returns nil or an error that retry (when
// not nil) does not take.
func runRetrying(ctx context.Context, run func(context.Context) error, retry func(error) bool, log *slog.Logger) error {
	for {
		err := run(ctx)
		if err == nil || retry == nil || !retry(err) {
			return err
		}
		log.Warn("relay stopped on an event the poller will retry or dead-letter; running again", "component", "app", "err", err, "retry_in", retryPause)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retryPause):
		}
	}
}

// takeInstance takes this poller instance's number (poller.Instance), for
// its own transactional id under prefix. PostgreSQL not answering is
// waited for, as the sources do, until ctx is cancelled (then it returns
// nil, nil).
func takeInstance(ctx context.Context, cfg *config.Config, prefix string, log *slog.Logger) (*poller.Instance, error) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = 500*time.Millisecond, 30*time.Second, 0
	inst, err := backoff.RetryNotifyWithData(func() (*poller.Instance, error) {
		inst, err := poller.TakeInstance(ctx, cfg.Postgres.URL, cfg.Postgres.Network(), prefix)
		if connector.IsPermanent(err) {
			return nil, backoff.Permanent(err)
		}
		return inst, err
	}, backoff.WithContext(bo, ctx), func(err error, wait time.Duration) {
		log.Warn("could not take a poller instance number; trying again", "component", "app", "err", err, "retry_in", wait)
	})
	if ctx.Err() != nil {
		if inst != nil {
			inst.Release(context.WithoutCancel(ctx))
		}
		return nil, nil
	}
	return inst, err
}
