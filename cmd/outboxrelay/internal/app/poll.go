package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/poller"
)

// newPoller builds the polling source; with several outbox tables it
// polls each (poller.Sources). An event that can never be published and
// has no dead letter topic goes into the poller's quarantine (its
// dead-letter table, after poll.max_attempts), which the runner asks for
// (connector.Batch.Quarantine).
func newPoller(cfg *config.Config, log *slog.Logger) (connector.Source, error) {
	var ps poller.Sources
	for _, pc := range cfg.PollConfigs() {
		p, err := poller.New(pc, poller.WithLogger(log))
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	if len(ps) == 1 {
		return ps[0], nil
	}
	return ps, nil
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
