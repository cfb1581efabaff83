package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

// run is one benchmark run's state.
type run struct {
	cfg      Config
	progress io.Writer
	dir      string   // scratch: configuration files, the built binary
	relay    []string // the relay's command, less --config FILE
	self     string   // this program, re-executed as the broker or the neighbour
	db       *database
	relayURL string // the relays' postgres.url: db.url, or the delaying proxy's
	w        *workload
	rep      *Report
	otlp     string        // the OTLP receiver's endpoint (Config.Tracing otlp)
	endLSN   pglogrepl.LSN // the WAL position after the backlog
	nextSeq  int           // the next steady-state event's number
	mu       sync.Mutex
	// closers undo what the run started, last first.
	closers []func()
}

// closeAll runs the closers, last first.
func (r *run) closeAll() {
	for i := len(r.closers) - 1; i >= 0; i-- {
		r.closers[i]()
	}
}

func (r *run) say(format string, args ...any) {
	fmt.Fprintf(r.progress, "outboxbench: "+format+"\n", args...)
}

// noteLog records what a relay logged during a phase, if anything: a
// warning there (a restart after an error, say) explains a figure.
func (r *run) noteLog(phase string, p *relayProc) {
	lines, total := p.logged(3)
	if total == 0 {
		return
	}
	r.note("%s: the relay logged %d warning or error lines, first: %s", phase, total, strings.Join(lines, " | "))
}

func (r *run) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.Notes = append(r.rep.Notes, fmt.Sprintf(format, args...))
}

// phase runs fn and records how long it took.
func (r *run) phase(name string, fn func() error) error {
	start := time.Now()
	err := fn()
	r.rep.Phases = append(r.rep.Phases, PhaseTiming{Phase: name, Seconds: time.Since(start).Seconds()})
	return err
}

// The backlog's table, publication and slots.
const (
	backlogTable = "outbox"
	publication  = "bench"
	cdcSlot      = "bench_cdc"
)

var recvSlots = [2]string{"bench_recv_before", "bench_recv_after"}

// cdcEOSSlot is the slot of the CDC drain with kafka.delivery exactly_once.
const cdcEOSSlot = "bench_cdc_eos"

// cdcEOSDrain is cdcDrain publishing in Kafka transactions.
var cdcEOSDrain = drainKind{
	name:      "cdc-eos",
	instances: 1,
	slot:      cdcEOSSlot,
	delivery:  "exactly_once",
	prepare:   func(context.Context, *run) (string, error) { return backlogTable, nil },
	source: func(*run, int) string {
		return fmt.Sprintf("source: cdc\ncdc:\n  slot: %s\n  publication: %s\n", cdcEOSSlot, publication)
	},
}

// cdcDrain is the CDC relay on the backlog. Its slot is made with the
// pg_recvlogical slots, before the backlog is written.
var cdcDrain = drainKind{
	name:      "cdc",
	instances: 1,
	slot:      cdcSlot,
	prepare:   func(context.Context, *run) (string, error) { return backlogTable, nil },
	source: func(*run, int) string {
		return fmt.Sprintf("source: cdc\ncdc:\n  slot: %s\n  publication: %s\n", cdcSlot, publication)
	},
}

// Run measures what cfg asks for and returns the report; progress gets a
// line per step.
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Report, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, progress: progress, w: newWorkload(cfg.Seed, cfg.Aggregates, cfg.PayloadBytes)}
	r.rep = &Report{Started: time.Now(), Machine: machine()}
	began := time.Now()
	defer r.closeAll()
	if err := r.prepare(ctx); err != nil {
		return nil, err
	}
	if err := r.startServices(ctx); err != nil {
		return nil, err
	}
	if err := r.phase("backlog", func() error { return r.writeBacklog(ctx) }); err != nil {
		return nil, err
	}
	if cfg.Neighbour > 0 {
		n, err := startNeighbour(r.self, cfg.Neighbour)
		if err != nil {
			return nil, err
		}
		r.closers = append(r.closers, n.stop)
		r.rep.Relay += fmt.Sprintf(", beside a neighbour process burning %v CPUs' worth of time while the drains and steady rates run", cfg.Neighbour)
	}
	if cfg.RelayCPUs != "" {
		r.rep.Relay += ", pinned to CPUs " + cfg.RelayCPUs
	}
	if err := r.measureDrains(ctx); err != nil {
		return nil, err
	}
	if err := r.measureLatencies(ctx); err != nil {
		return nil, err
	}
	r.rep.Machine.LoadAfter = loadAverage()
	r.rep.Seconds = time.Since(began).Seconds()
	return r.rep, nil
}

// prepare makes the scratch directory, builds the relay (or takes
// cfg.RelayBin) and says in the report what runs against what.
func (r *run) prepare(ctx context.Context) error {
	cfg := r.cfg
	var err error
	if r.dir, err = os.MkdirTemp("", "outboxbench-"); err != nil {
		return err
	}
	r.closers = append(r.closers, func() { os.RemoveAll(r.dir) })
	if r.self, err = os.Executable(); err != nil {
		return err
	}
	if cfg.RelayLogDir != "" {
		if err := os.MkdirAll(cfg.RelayLogDir, 0o755); err != nil {
			return err
		}
	}
	if cfg.RelayBin == "" {
		r.say("building outboxrelay ...")
		bin, err := buildRelay(ctx, r.dir)
		if err != nil {
			return err
		}
		r.relay = []string{bin, "run"}
		r.rep.Relay = "outboxrelay built from this tree (go build), run as a child process with default settings, log.level=warn and http.listen 127.0.0.1:0 (a free port)"
	} else {
		r.relay = []string{cfg.RelayBin, "run"}
		r.rep.Relay = cfg.RelayBin + ", run as a child process with default settings, log.level=warn and http.listen 127.0.0.1:0 (a free port)"
	}
	if cfg.measures("poll") || cfg.measures("poll-eos") {
		r.rep.Relay += ", poll.mode " + cfg.PollMode
	}
	where := "in this process"
	if cfg.BrokerProcess {
		where = "in a process of its own"
	}
	if cfg.ProduceDelay > 0 {
		where += fmt.Sprintf(", answering each produce request %s late (as followers' replication would)", cfg.ProduceDelay)
	}
	r.rep.Kafka = fmt.Sprintf("kfake %s %s, 1 broker, %d partitions per topic, no client-metrics subscriptions (KIP-714, as a stock broker); the drains and the raw ingest use a fresh cluster each that acknowledges without storing records (BlackholeProduce), the latency phase one that stores them",
		r.rep.Machine.Kfake, where, cfg.Partitions)
	return nil
}

// startServices starts PostgreSQL, the OTLP receiver of Config.Tracing
// otlp and the delaying proxy of Config.PGDelay, and records the server's
// version and settings.
func (r *run) startServices(ctx context.Context) error {
	cfg := r.cfg
	r.say("starting PostgreSQL ...")
	var err error
	if r.db, err = startPostgres(ctx, cfg.WALDefaults); err != nil {
		return err
	}
	r.closers = append(r.closers, r.db.close)
	r.db.headers, r.w.headers = cfg.Tracing != "", cfg.Tracing != ""
	if cfg.Tracing == "otlp" {
		recv, err := startOTLPReceiver()
		if err != nil {
			return err
		}
		r.closers = append(r.closers, func() {
			recv.close()
			r.say("otlp: the receiver got %d export requests, %d bytes", recv.requests.Load(), recv.bytes.Load())
		})
		r.otlp = recv.url
	}
	if cfg.Tracing != "" {
		r.rep.Relay += ", every event with a traceparent in a headers column (routing.headers_column)"
		if cfg.Tracing == "otlp" {
			r.rep.Relay += " and a span exported for it over OTLP/HTTP to a receiver in the benchmark's process"
		}
	}
	r.relayURL = r.db.url
	if cfg.PGDelay > 0 {
		proxy, err := startDelayProxy(net.JoinHostPort("127.0.0.1", strconv.Itoa(r.db.srv.Port())), cfg.PGDelay)
		if err != nil {
			return fmt.Errorf("start the delaying proxy: %w", err)
		}
		r.closers = append(r.closers, proxy.close)
		if r.relayURL, err = proxy.url(r.db.url); err != nil {
			return err
		}
		r.rep.Relay += fmt.Sprintf(", reaching PostgreSQL through a proxy that holds each direction %s (a round trip of %s more)", cfg.PGDelay, 2*cfg.PGDelay)
	}
	if r.rep.Machine.Postgres, err = r.db.version(ctx); err != nil {
		return err
	}
	r.rep.Postgres, err = r.db.settings(ctx)
	return err
}

// measureLatencies runs the latency phase of each live kind measured, at
// each rate; its events are numbered after the backlog's.
func (r *run) measureLatencies(ctx context.Context) error {
	r.nextSeq = r.cfg.Events
	for _, k := range []liveKind{cdcLive, cdcEOSLive, pollLive, pollEOSLive} {
		if len(r.cfg.Rates) == 0 || !r.cfg.measures(k.name) {
			continue
		}
		r.say("latency: starting the %s relay on a live table ...", k.name)
		err := r.phase("latency "+k.name, func() error {
			ls, err := r.latency(ctx, k)
			r.rep.Latency = append(r.rep.Latency, ls...)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// writeBacklog makes the backlog's table, publication and slots, then
// commits the events on several connections.
func (r *run) writeBacklog(ctx context.Context) error {
	db := r.db
	if err := db.createOutbox(ctx, backlogTable); err != nil {
		return err
	}
	if err := db.createPublication(ctx, publication, backlogTable); err != nil {
		return err
	}
	// Every slot that decodes the backlog starts at the same point.
	slots := []string{cdcSlot, recvSlots[0], recvSlots[1]}
	if r.cfg.measures("cdc-eos") {
		slots = append(slots, cdcEOSSlot)
	}
	if r.cfg.measures(formatsSource) {
		slots = append(slots, cdcJSONSlot, cdcAvroSlot)
	}
	if err := db.createSlots(ctx, slots...); err != nil {
		return err
	}
	startLSN, err := db.walLSN(ctx)
	if err != nil {
		return err
	}

	sizes := txnSizes(r.cfg.Seed, r.cfg.Events, r.cfg.TxnMax)
	firsts := make([]int, len(sizes))
	for i, at := 1, sizes[0]; i < len(sizes); i++ {
		firsts[i], at = at, at+sizes[i]
	}
	r.say("backlog: committing %d events in %d transactions of 1 to %d rows on %d connections ...", r.cfg.Events, len(sizes), r.cfg.TxnMax, r.cfg.Writers)
	start := time.Now()
	var next atomic.Int64
	errs := make(chan error, r.cfg.Writers)
	var wg sync.WaitGroup
	for range r.cfg.Writers {
		wg.Go(func() {
			conn, err := pgconn.Connect(ctx, db.url)
			if err != nil {
				errs <- fmt.Errorf("connect a writer: %w", err)
				return
			}
			defer conn.Close(context.Background())
			tw := &txnWriter{conn: conn, table: backlogTable, w: r.w}
			for {
				j := int(next.Add(1) - 1)
				if j >= len(sizes) {
					return
				}
				if err := tw.commit(ctx, firsts[j], sizes[j]); err != nil {
					errs <- err
					next.Store(int64(len(sizes)))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	took := time.Since(start)
	if r.endLSN, err = db.walLSN(ctx); err != nil {
		return err
	}
	r.rep.Workload = Workload{
		Events: r.cfg.Events, Transactions: len(sizes), TxnRows: fmt.Sprintf("1-%d", r.cfg.TxnMax),
		PayloadBytes: r.cfg.PayloadBytes, Aggregates: r.cfg.Aggregates, Topics: len(aggTypes),
		Partitions: r.cfg.Partitions, Writers: r.cfg.Writers,
		BacklogSeconds: took.Seconds(), WALBytes: int64(r.endLSN - startLSN),
	}
	r.say("backlog: written in %.1fs, %.1f MiB of WAL", took.Seconds(), float64(r.endLSN-startLSN)/(1<<20))
	return db.checkPayloads(ctx, backlogTable, r.w, 0, r.cfg.Events/2, r.cfg.Events-1)
}

// measureDrains runs the ceilings and every drain on the backlog.
func (r *run) measureDrains(ctx context.Context) error {
	c := &r.rep.Ceilings
	recv := func(slot string) error {
		r.say("ceiling: pg_recvlogical from slot %s ...", slot)
		res, err := recvlogical(ctx, r.db, slot, publication, r.endLSN)
		if err != nil {
			return err
		}
		c.RecvlogicalSeconds = append(c.RecvlogicalSeconds, res.took.Seconds())
		c.RecvlogicalWalsenderCPU = append(c.RecvlogicalWalsenderCPU, res.walsenderCPU.Seconds())
		c.RecvlogicalClientCPU = append(c.RecvlogicalClientCPU, res.clientCPU.Seconds())
		rate := float64(r.cfg.Events) / res.took.Seconds()
		c.RecvlogicalRate = max(c.RecvlogicalRate, rate)
		r.say("ceiling: pg_recvlogical: %.2fs, %.0f events/s; CPU: walsender %.2fs, pg_recvlogical %.2fs",
			res.took.Seconds(), rate, res.walsenderCPU.Seconds(), res.clientCPU.Seconds())
		return r.db.dropSlot(ctx, slot)
	}
	if err := r.phase("pg_recvlogical", func() error { return recv(recvSlots[0]) }); err != nil {
		return err
	}

	if r.cfg.measures("cdc") {
		if err := r.runDrain(ctx, cdcDrain); err != nil {
			return err
		}
	}
	if err := r.db.dropSlot(ctx, cdcSlot); err != nil {
		return err
	}
	if r.cfg.measures("cdc-eos") {
		if err := r.runDrain(ctx, cdcEOSDrain); err != nil {
			return err
		}
		if err := r.db.dropSlot(ctx, cdcEOSSlot); err != nil {
			return err
		}
	}
	if r.cfg.measures(formatsSource) {
		if err := r.measureFormats(ctx); err != nil {
			return err
		}
	}
	if err := r.phase("pg_recvlogical", func() error { return recv(recvSlots[1]) }); err != nil {
		return err
	}
	r.say("ceiling: raw ingest of the same records from a bare franz-go producer ...")
	err := r.phase("raw ingest", func() error {
		took, cpu, err := r.rawIngest(ctx)
		c.RawIngestSeconds = took.Seconds()
		c.RawIngestCPU = cpu.Seconds()
		c.RawIngestRate = float64(r.cfg.Events) / took.Seconds()
		return err
	})
	if err != nil {
		return err
	}
	r.say("ceiling: raw ingest: %.2fs, %.0f events/s", c.RawIngestSeconds, c.RawIngestRate)

	// The sources that consume their table get copies of the backlog, made
	// now that no slot decodes the WAL the copies write.
	for _, k := range []drainKind{pollDrain(1), pollDrain(2), pollEOSDrain(1), pollEOSDrain(2)} {
		if !r.cfg.measures(k.name) {
			continue
		}
		if err := r.runDrain(ctx, k); err != nil {
			return err
		}
	}
	for i := range r.rep.Drains {
		d := &r.rep.Drains[i]
		d.RatioRecvlogical = d.Rate / c.RecvlogicalRate
		d.RatioRawIngest = d.Rate / c.RawIngestRate
	}
	return nil
}

// runDrain prepares the kind's backlog and measures its drain.
func (r *run) runDrain(ctx context.Context, k drainKind) error {
	table, err := k.prepare(ctx, r)
	if err != nil {
		return err
	}
	r.say("drain: %s with %d relay(s) ...", k.name, k.instances)
	var d Drain
	err = r.phase(fmt.Sprintf("drain %s x%d", k.name, k.instances), func() error {
		var err error
		d, err = r.drain(ctx, k, table)
		return err
	})
	if err != nil {
		return err
	}
	r.say("drain: %s x%d: %.2fs, %.0f events/s, peak RSS %.1f MiB, %.2f CPU s per million events; CPU: relay %.2fs, postgres %.2fs (walsender %.2fs), broker %.2fs",
		k.name, k.instances, d.Seconds, d.Rate, d.PeakRSSMiB, d.CPUSecPerMillion, d.CPUSeconds, d.PostgresCPUSeconds, d.WalsenderCPUSeconds, d.BrokerCPUSeconds)
	r.rep.Drains = append(r.rep.Drains, d)
	return nil
}
