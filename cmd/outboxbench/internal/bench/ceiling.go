package bench

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/sink"
)

// recvResult is one pg_recvlogical run.
type recvResult struct {
	took         time.Duration // start to exit
	walsenderCPU time.Duration // the server's decoding
	clientCPU    time.Duration // pg_recvlogical itself
}

// recvlogical runs pg_recvlogical on slot, decoding with pgoutput as the
// relay asks for it (protocol 1, the same publication) into /dev/null,
// until it passes end.
func recvlogical(ctx context.Context, db *database, slot, publication string, end pglogrepl.LSN) (recvResult, error) {
	var res recvResult
	bin, err := db.srv.ClientTool("pg_recvlogical")
	if err != nil {
		return res, err
	}
	conn := "host=127.0.0.1 port=" + strconv.Itoa(db.srv.Port()) + " user=postgres dbname=bench"
	cmd := exec.CommandContext(ctx, bin,
		"-d", conn, "--slot", slot, "--start", "--no-loop",
		"--endpos", end.String(),
		"-o", "proto_version=1", "-o", "publication_names="+publication,
		"--fsync-interval", "0",
		"-f", "/dev/null")
	ww := &walsenderWatch{db: db, slot: slot}
	stop, watched := make(chan struct{}), make(chan time.Duration, 1)
	go func() { watched <- ww.follow(ctx, stop) }()
	start := time.Now()
	out, err := cmd.CombinedOutput()
	res.took = time.Since(start)
	close(stop)
	res.walsenderCPU = <-watched
	if err != nil {
		return res, fmt.Errorf("%s: %w\n%s", bin, err, out)
	}
	res.clientCPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return res, nil
}

// rawIngest sends the backlog's records (the same topics, keys, values and
// id headers, made again by the workload) from a bare franz-go client with
// the sink's settings to a fresh broker, and returns how long it took from
// the first produce until every record was acknowledged. The records are
// made before the clock starts.
// It returns too the CPU time of the producer and the broker.
func (r *run) rawIngest(ctx context.Context) (took, cpu time.Duration, err error) {
	w, events := r.w, r.cfg.Events
	cluster, err := r.startBroker(r.cfg.Partitions, true)
	if err != nil {
		return 0, 0, err
	}
	defer cluster.Close()
	selfBefore, brokerBefore := selfCPU(), cluster.CPU()
	took, err = rawIngestOn(ctx, cluster, w, events)
	return took, selfCPU() - selfBefore + cluster.CPU() - brokerBefore, err
}

func rawIngestOn(ctx context.Context, cluster broker, w *workload, events int) (time.Duration, error) {
	recs := make([]kgo.Record, events)
	arena := make([]byte, 0, events*(w.payload+64))
	var e event
	now := time.Now()
	for i := range recs {
		w.fill(i, &e)
		at := len(arena)
		arena = append(arena, e.aggID...)
		arena = append(arena, e.id...)
		arena = append(arena, e.payload...)
		key := arena[at : at+len(e.aggID)]
		id := arena[at+len(e.aggID) : at+len(e.aggID)+len(e.id)]
		val := arena[at+len(e.aggID)+len(e.id) : len(arena)]
		recs[i] = kgo.Record{
			Topic:     topicPrefix + e.aggType,
			Key:       key,
			Value:     val,
			Headers:   []kgo.RecordHeader{{Key: "id", Value: id}},
			Timestamp: now,
		}
	}

	// The sink's own client: its settings, none of its code.
	snk, err := sink.New(sink.Config{Brokers: cluster.ListenAddrs()})
	if err != nil {
		return 0, err
	}
	defer snk.Close()
	cl := snk.Client()

	var failed atomic.Pointer[error]
	start := time.Now()
	for i := range recs {
		cl.Produce(ctx, &recs[i], func(_ *kgo.Record, err error) {
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return 0, fmt.Errorf("raw ingest: flush: %w", err)
	}
	took := time.Since(start)
	if p := failed.Load(); p != nil {
		return 0, fmt.Errorf("raw ingest: produce: %w", *p)
	}
	n, err := countOn(ctx, cluster.ListenAddrs())
	if err != nil {
		return 0, err
	}
	if n != int64(events) {
		return 0, fmt.Errorf("raw ingest: the broker holds %d records, want %d", n, events)
	}
	return took, nil
}

func countOn(ctx context.Context, brokers []string) (int64, error) {
	c, err := newRecordCounter(brokers)
	if err != nil {
		return 0, err
	}
	defer c.close()
	return c.count(ctx)
}
