package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"
)

// liveKind is a source measured at steady rates, on a table of its own.
type liveKind struct {
	name   string
	table  string
	create func(ctx context.Context, r *run, table string) error
	source func(*run) string // the relay configuration's source part
	// ready, when set, waits until events committed from now on are sure
	// to be relayed.
	ready func(ctx context.Context, r *run, p *relayProc) error
	// delivery is the relay's kafka.delivery; empty: the default.
	delivery string
}

// cdcLive makes its own slot and publication, as a user's relay would,
// capturing from the moment the slot exists.
var cdcLive = liveKind{
	name:   "cdc",
	table:  "outbox_live",
	create: func(ctx context.Context, r *run, table string) error { return r.db.createOutbox(ctx, table) },
	source: func(*run) string { return "source: cdc\ncdc:\n  slot: bench_live\n  publication: bench_live\n" },
	ready: func(ctx context.Context, r *run, p *relayProc) error {
		return r.waitSlotActive(ctx, p, "bench_live")
	},
}

// cdcEOSLive is cdcLive publishing in Kafka transactions, measured by a
// read_committed consumer: an event counts once its transaction commits.
var cdcEOSLive = liveKind{
	name:     "cdc-eos",
	table:    "outbox_live_eos",
	create:   func(ctx context.Context, r *run, table string) error { return r.db.createOutbox(ctx, table) },
	source:   func(*run) string { return "source: cdc\ncdc:\n  slot: bench_live_eos\n  publication: bench_live_eos\n" },
	delivery: "exactly_once",
	ready: func(ctx context.Context, r *run, p *relayProc) error {
		return r.waitSlotActive(ctx, p, "bench_live_eos")
	},
}

// pollLive wakes on the trigger's notifications (LISTEN/NOTIFY).
var pollLive = liveKind{
	name:   "poll",
	table:  "outbox_live_poll",
	create: func(ctx context.Context, r *run, table string) error { return r.createPollTable(ctx, table) },
	source: func(r *run) string { return r.pollSource("outbox_live_poll") },
}

// pollEOSLive is pollLive publishing in Kafka transactions, measured by a
// read_committed consumer.
var pollEOSLive = liveKind{
	name:     "poll-eos",
	table:    "outbox_live_poll_eos",
	create:   func(ctx context.Context, r *run, table string) error { return r.createPollTable(ctx, table) },
	source:   func(r *run) string { return r.pollSource("outbox_live_poll_eos") },
	delivery: "exactly_once",
}

// latency runs the kind's relay against a broker that keeps records,
// commits events at each rate in turn and measures, for every event, the
// time from its COMMIT returning to a consumer fetching its record.
func (r *run) latency(ctx context.Context, k liveKind) ([]Latency, error) {
	if err := k.create(ctx, r, k.table); err != nil {
		return nil, err
	}
	cluster, err := r.startBroker(r.cfg.Partitions, false)
	if err != nil {
		return nil, err
	}
	defer cluster.Close()

	command := r.relay
	// The relay's own view of its slow events, read from its metrics.
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	p, err := startRelay(command, relayConfig{
		url: r.relayURL, table: "public." + k.table, brokers: cluster.ListenAddrs(), source: k.source(r), delivery: k.delivery,
		httpAddr: addr, cpus: r.cfg.relayCPUs,
		headers: r.db.headers, otlp: r.otlp,
	}, r.dir, r.cfg.RelayLogDir, k.name+"-live")
	if err != nil {
		return nil, err
	}
	defer p.kill()
	if k.ready != nil {
		if err := k.ready(ctx, r, p); err != nil {
			return nil, err
		}
	}

	arr := &arrivals{epoch: time.Now()}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(cluster.ListenAddrs()...),
		kgo.ConsumeTopics(topics()...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(time.Second),
		// What a consumer of an exactly_once relay reads; the same as
		// read_uncommitted for records written without transactions.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	consumeCtx, stopConsuming := context.WithCancel(ctx)
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		arr.consume(consumeCtx, cl)
	}()
	defer func() {
		stopConsuming()
		<-consumed
	}()

	writers, err := r.openWriters(ctx, k.table, r.cfg.Writers)
	if err != nil {
		return nil, err
	}
	defer closeWriters(writers)

	// Warm up: the consumer's and the producer's first metadata and
	// connections are not part of a steady state.
	if _, err := r.steady(ctx, k.name, p, writers, arr, r.nextSeq, 200, 200, 10); err != nil {
		return nil, fmt.Errorf("%s warm-up: %w", k.name, err)
	}
	r.nextSeq += 200

	var out []Latency
	for _, rate := range r.cfg.Rates {
		events := max(r.cfg.LatencyTxnRows, int(float64(rate)*r.cfg.RateDuration.Seconds()))
		events -= events % r.cfg.LatencyTxnRows
		r.say("latency: %s at %d events/s for %s ...", k.name, rate, r.cfg.RateDuration)
		before, err := readStages(ctx, addr)
		if err != nil {
			return out, err
		}
		l, err := r.steady(ctx, k.name, p, writers, arr, r.nextSeq, events, rate, r.cfg.LatencyTxnRows)
		if err != nil {
			return out, fmt.Errorf("%s latency at %d events/s: %w", k.name, rate, err)
		}
		after, err := readStages(ctx, addr)
		if err != nil {
			return out, err
		}
		l.SlowEvents, l.SlowStagesMs = slowStages(before, after)
		r.nextSeq += events
		r.say("latency: %s at %d events/s: p50 %.2fms p99 %.2fms max %.2fms (achieved %.0f/s); slow events (>= 10ms in the relay's metrics) %s",
			k.name, rate, l.P50, l.P99, l.Max, l.Rate, formatStages(l.SlowEvents, l.SlowStagesMs))
		out = append(out, l)
	}
	if err := p.stop(time.Minute); err != nil {
		return out, err
	}
	r.noteLog(k.name+" latency", p)
	return out, nil
}

func (r *run) waitSlotActive(ctx context.Context, p *relayProc, slot string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		if err := p.exited(); err != nil {
			return err
		}
		active, err := r.db.slotActive(ctx, slot)
		if err != nil {
			return err
		}
		if active {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("slot %s not active a minute after the relay started; its output:\n%s", slot, p.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// steady commits events from, from+1, ..., from+n-1 at rate events per
// second in transactions of txn rows, spread over the writers, and waits
// until all have been fetched.
func (r *run) steady(ctx context.Context, source string, p *relayProc, writers []*txnWriter, arr *arrivals, from, n, rate, txn int) (Latency, error) {
	l := Latency{Source: source, TargetRate: rate, Events: n, TxnRows: txn}
	before, err := p.usage()
	if err != nil {
		return l, err
	}
	done := arr.expect(from, n)
	cpu := readCPUTimes()

	txns := n / txn
	commits := make([]time.Duration, txns)
	interval := time.Duration(float64(time.Second) * float64(txn) / float64(rate))
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(writers))
	for wi, tw := range writers {
		wg.Go(func() {
			for j := wi; j < txns; j += len(writers) {
				if d := time.Until(start.Add(time.Duration(j) * interval)); d > 0 {
					time.Sleep(d)
				}
				if err := tw.commit(ctx, from+j*txn, txn); err != nil {
					errs[wi] = err
					return
				}
				commits[j] = time.Since(arr.epoch)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return l, err
	}
	committed := time.Since(start)

	select {
	case <-done:
	case <-time.After(time.Minute):
		got := arr.received()
		return l, fmt.Errorf("%d of %d committed events not in Kafka a minute later; relay output:\n%s", n-got, n, p.out.String())
	case <-ctx.Done():
		return l, ctx.Err()
	}
	after, err := p.usage()
	if err != nil {
		return l, err
	}

	lat := arr.latencies(commits, txn)
	slices.Sort(lat)
	ms := func(q float64) float64 {
		i := max(0, int(q*float64(len(lat))+0.999999)-1)
		return float64(lat[min(i, len(lat)-1)]) / float64(time.Millisecond)
	}
	l.P50, l.P90, l.P99, l.Max = ms(0.50), ms(0.90), ms(0.99), ms(1)
	l.MachineBusy = busySince(cpu)
	l.Rate = float64(n) / committed.Seconds()
	l.PeakRSSMiB = float64(after.PeakRSSKiB) / 1024
	l.CPUSecPerMil = (after.CPU - before.CPU).Seconds() / float64(n) * 1e6
	return l, nil
}

// arrivals records when each expected event's record was fetched.
type arrivals struct {
	epoch time.Time

	mu   sync.Mutex
	from int
	at   []time.Duration // since epoch; 0 while not fetched
	left int
	done chan struct{}
}

// expect starts a window of n events from from; the channel is closed once
// all have been fetched.
func (a *arrivals) expect(from, n int) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.from, a.at, a.left, a.done = from, make([]time.Duration, n), n, make(chan struct{})
	return a.done
}

func (a *arrivals) received() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.at) - a.left
}

func (a *arrivals) consume(ctx context.Context, cl *kgo.Client) {
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		now := time.Since(a.epoch)
		a.mu.Lock()
		fs.EachRecord(func(rec *kgo.Record) {
			for _, h := range rec.Headers {
				if h.Key != "id" {
					continue
				}
				seq, ok := seqOfID(h.Value)
				i := seq - a.from
				if ok && i >= 0 && i < len(a.at) && a.at[i] == 0 {
					a.at[i] = now
					a.left--
					if a.left == 0 {
						close(a.done)
					}
				}
			}
		})
		a.mu.Unlock()
	}
}

// latencies are the events' fetch times less their transactions' commit
// times.
func (a *arrivals) latencies(commits []time.Duration, txn int) []time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]time.Duration, len(a.at))
	for i, at := range a.at {
		out[i] = at - commits[i/txn]
	}
	return out
}

// openWriters opens n connections that commit generated events into table.
func (r *run) openWriters(ctx context.Context, table string, n int) ([]*txnWriter, error) {
	var ws []*txnWriter
	for range n {
		conn, err := pgconn.Connect(ctx, r.db.url)
		if err != nil {
			closeWriters(ws)
			return nil, fmt.Errorf("connect a writer: %w", err)
		}
		ws = append(ws, &txnWriter{conn: conn, table: table, w: r.w})
	}
	return ws, nil
}

func closeWriters(ws []*txnWriter) {
	for _, w := range ws {
		w.conn.Close(context.Background())
	}
}
