package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// TestBinaryReleasesStartPages runs the built binary. Once Kafka has
// acknowledged its first event, it releases the pages of its binary that
// starting touched, says so, and relays on from the pages it maps again.
func TestBinaryReleasesStartPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.Postgres(t)
	pool := connectPool(t, url)
	createOutbox(t, pool, "outbox")
	_, brokers := testenv.Kafka(t)
	name := uniqueName(t)
	p := runBinary(t, yamlConfig(url, brokers, fmt.Sprintf("cdc:\n  slot: %s\n  publication: %s\n", name, name)))
	waitSlotActive(ctx, t, pool, name)
	c := newCollector(t, brokers, "outbox.event.order")

	ids := insertEvents(ctx, t, pool, 1)
	waitLog(t, p, "released the binary's pages that start touched", time.Minute)
	ids = append(ids, insertEvents(ctx, t, pool, 5)...)
	c.readAtLeast(ctx, t, len(ids), time.Minute)
	for _, id := range ids {
		if c.ids[id] != 1 {
			t.Errorf("event %s is in Kafka %d times, want once", id, c.ids[id])
		}
	}
}
