package integration

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// The backfill's flags against a real table, with the built binary: rows
// whose insert time is set around a point in time, and each flag choosing
// exactly the rows its help says. --margin 0s is no margin (it used to
// become the five-minute default), an unset --margin is five minutes, a
// larger one reaches further back, --all takes every row; --since names
// the point. Each run leaves the slot and checkpoint, and the next one
// reads the table again as it is.
func TestBackfillFlags(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	createTimestampedOutbox(t, pool)
	_, brokers := testenv.Kafka(t)
	name := uniqueName(t)
	cfg := writeTemp(t, "outboxrelay.yaml", yamlConfig(url, brokers, cdcYAML(name)))

	since := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	// Rows inserted this long after since (negative: before it).
	offsets := map[string]time.Duration{
		"before-10m": -10 * time.Minute,
		"before-4m":  -4 * time.Minute,
		"before-1ms": -time.Millisecond,
		"at":         0,
		"after-1s":   time.Second,
	}
	for agg, d := range offsets {
		if _, err := pool.Exec(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload, created_at) VALUES ('order', $1, 'Happened', '{"seq": 1}', $2)`,
			agg, since.Add(d)); err != nil {
			t.Fatal(err)
		}
	}
	backfill := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(binary(t), append([]string{"backfill", "--config", cfg}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("backfill %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return lastLines(string(out), 1)
	}
	at := since.Format(time.RFC3339Nano)
	c := newCollector(t, brokers, "outbox.event.order")
	for _, tc := range []struct {
		name string
		args []string
		want []string // the aggregates of the rows chosen
	}{
		{"margin 0s is none", []string{"--since", at, "--timestamp-column", "created_at", "--margin", "0s"}, []string{"at", "after-1s"}},
		{"margin unset is five minutes", []string{"--since", at, "--timestamp-column", "created_at"}, []string{"before-4m", "before-1ms", "at", "after-1s"}},
		{"margin 15m", []string{"--since", at, "--timestamp-column", "created_at", "--margin", "15m"}, []string{"before-10m", "before-4m", "before-1ms", "at", "after-1s"}},
		{"margin 2ms", []string{"--since", at, "--timestamp-column", "created_at", "--margin", "2ms"}, []string{"before-1ms", "at", "after-1s"}},
		{"all", []string{"--all"}, []string{"before-10m", "before-4m", "before-1ms", "at", "after-1s"}},
	} {
		seen := len(c.recs)
		report := backfill(tc.args...)
		if want := fmt.Sprintf("published %d outbox rows", len(tc.want)); !strings.Contains(report, want) {
			t.Errorf("%s: the report does not say %q:\n%s", tc.name, want, report)
		}
		c.readAtLeast(ctx, t, seen+len(tc.want), time.Minute)
		c.settle(300 * time.Millisecond)
		var got []string
		for _, r := range c.recs[seen:] {
			got = append(got, string(r.Key))
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(tc.want))
		if !slices.Equal(got, want) {
			t.Errorf("%s: published the rows of %v, want %v", tc.name, got, want)
		}
	}
}
