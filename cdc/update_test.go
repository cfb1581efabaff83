package cdc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/testenv"
)

// TestOnUpdateFailNeedsUpdates: cdc.on_update fail cannot see an UPDATE
// through a publication that publishes only inserts, so such a
// publication is refused at start with the statement that fixes it; one
// the source creates publishes updates.
func TestOnUpdateFailNeedsUpdates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := testenv.Postgres(t)
	admin := connect(ctx, t, url)
	exec(ctx, t, admin,
		createOutbox,
		`CREATE PUBLICATION upd_inserts FOR TABLE outbox WITH (publish = 'insert')`)
	run := func(pub string) error {
		src, err := cdc.New(cdc.Config{URL: url, Slot: "upd_slot", Publication: pub, OnUpdate: cdc.UpdateFail})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		defer stop()
		out := make(chan connector.Batch)
		done := make(chan error, 1)
		go func() { done <- src.Run(runCtx, out) }()
		select {
		case err := <-done:
			return err
		case <-time.After(3 * time.Second):
			stop()
			return <-done
		}
	}
	err := run("upd_inserts")
	if !connector.IsPermanent(err) || !strings.Contains(err.Error(), `ALTER PUBLICATION "upd_inserts" SET (publish = 'insert, update')`) {
		t.Errorf("a publication without updates: error %v, want a permanent one naming the ALTER PUBLICATION", err)
	}
	if err := run("upd_created"); err != nil {
		t.Errorf("a publication the source creates: %v", err)
	}
	var update bool
	if err := admin.QueryRow(ctx, `SELECT pubupdate FROM pg_publication WHERE pubname = 'upd_created'`).Scan(&update); err != nil || !update {
		t.Errorf("the publication the source created publishes updates: %t (%v), want true", update, err)
	}
}
