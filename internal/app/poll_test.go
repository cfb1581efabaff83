package app

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"
)

func TestRunRetrying(t *testing.T) {
	counted := errors.New("event failure the poller counted")
	other := errors.New("permanent")
	retry := func(err error) bool { return errors.Is(err, counted) }
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name  string
		errs  []error // what run returns, call by call
		retry func(error) bool
		want  error
		calls int
	}{
		{"stops cleanly", []error{nil}, retry, nil, 1},
		{"runs again after a counted failure", []error{counted, counted, nil}, retry, nil, 3},
		{"returns other errors", []error{counted, other}, retry, other, 2},
		{"no retry for cdc", []error{counted}, nil, counted, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			run := func(context.Context) error {
				calls++
				return tc.errs[calls-1]
			}
			start := time.Now()
			if err := runRetrying(context.Background(), run, tc.retry, log); !errors.Is(err, tc.want) {
				t.Errorf("runRetrying = %v, want %v", err, tc.want)
			}
			if calls != tc.calls {
				t.Errorf("run called %d times, want %d", calls, tc.calls)
			}
			if pauses := time.Duration(tc.calls-1) * retryPause; time.Since(start) < pauses {
				t.Errorf("returned after %s; want a pause of %s before each new run", time.Since(start), retryPause)
			}
		})
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := runRetrying(ctx, func(context.Context) error { return counted }, retry, log); err != nil {
		t.Errorf("cancelled during the pause: %v, want nil", err)
	}
}
