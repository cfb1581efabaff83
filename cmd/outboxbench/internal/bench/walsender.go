package bench

import (
	"context"
	"time"
)

// walsenderWatch follows the CPU time of the walsender streaming from a
// slot: the server's side of decoding, which competes with the relay and
// the broker for the same cores.
type walsenderWatch struct {
	db   *database
	slot string
	pid  int
	cpu  time.Duration
}

// poll finds the walsender's pid, and reads its CPU time while it lives.
func (w *walsenderWatch) poll(ctx context.Context) {
	if w.pid == 0 {
		var pid *int32
		if err := w.db.conn.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, w.slot).Scan(&pid); err != nil || pid == nil {
			return
		}
		w.pid = int(*pid)
	}
	if u, err := procUsage(w.pid); err == nil {
		w.cpu = u.CPU
	}
}

// follow polls every 10ms until stop is closed, and returns the last
// reading: for a walsender that exits with its client, the reading just
// before. (Not ctx: cancelling a query would close the connection.)
func (w *walsenderWatch) follow(ctx context.Context, stop <-chan struct{}) time.Duration {
	for {
		w.poll(ctx)
		select {
		case <-stop:
			w.poll(ctx)
			return w.cpu
		case <-ctx.Done():
			return w.cpu
		case <-time.After(10 * time.Millisecond):
		}
	}
}
