package integration

import (
	"context"
	"testing"
	"time"
)

// TestBinaryReleasesStartPages runs the built binary. Once Kafka has
// acknowledged its first event, it releases the pages of its binary that
// starting touched, says so, and relays on from the pages it maps again.
func TestBinaryReleasesStartPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, cdcKind)
	p := runBinary(t, e.cdcConfig(""))
	waitSlotActive(ctx, t, e.pool, e.name)
	c := newCollector(t, e.brokers, "outbox.event.order")

	ids := insertEvents(ctx, t, e.pool, 1)
	waitLog(t, p, "released the binary's pages that start touched", time.Minute)
	ids = append(ids, insertEvents(ctx, t, e.pool, 5)...)
	c.readAtLeast(ctx, t, len(ids), time.Minute)
	for _, id := range ids {
		if c.ids[id] != 1 {
			t.Errorf("event %s is in Kafka %d times, want once", id, c.ids[id])
		}
	}
}
