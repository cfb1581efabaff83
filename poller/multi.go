package poller

import (
	"context"

	"golang.org/x/sync/errgroup"

	"github.com/outboxrelay/outboxrelay/connector"
)

// Sources are pollers of several outbox tables run as one
// [connector.Source] (outbox.tables): each claims from its own table, with
// its own connections, bucket locks and dead-letter table, and their
// batches share the runner and the sink. Each table's events keep their
// order; the tables' batches interleave.
type Sources []*Source

var _ connector.Source = Sources(nil)

// Run runs every poller until ctx ends or one fails; a failure stops the
// others, and Run returns the first.
func (ss Sources) Run(ctx context.Context, out chan<- connector.Batch) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, s := range ss {
		g.Go(func() error { return s.Run(ctx, out) })
	}
	return g.Wait()
}

// Streaming reports whether every poller is claiming.
func (ss Sources) Streaming() (streaming, standby bool) {
	for _, s := range ss {
		if on, _ := s.Streaming(); !on {
			return false, false
		}
	}
	return len(ss) > 0, false
}

// Backlogs are the tables' backlogs; the first failure to count one is
// the error.
func (ss Sources) Backlogs(ctx context.Context) ([]connector.Backlog, error) {
	var bs []connector.Backlog
	for _, s := range ss {
		b, err := s.Backlogs(ctx)
		if err != nil {
			return nil, err
		}
		bs = append(bs, b...)
	}
	return bs, nil
}
