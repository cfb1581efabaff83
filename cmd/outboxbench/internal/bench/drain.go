package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/metrics"
)

// drainKind is a way of relaying the backlog: a source and how many relay
// processes run it. Adding a source to the drain is adding one of these to
// the run's list.
type drainKind struct {
	name      string
	instances int
	// prepare readies the backlog for this source and returns the table
	// it is in. CDC's is written after its slot exists; a source that
	// consumes its table (the poller marks or deletes rows) gets its own
	// copy.
	prepare func(ctx context.Context, r *run) (table string, err error)
	// source is the relay configuration's source part for instance i.
	source func(r *run, i int) string
	// slot, when set, is the replication slot whose walsender's CPU time
	// the report shows.
	slot string
	// delivery is the relay's kafka.delivery; empty: the default.
	delivery string
}

// rssSample is how often a drain samples the relays' resident set.
const rssSample = 20 * time.Millisecond

// stallTimeout ends a drain that makes no progress for this long.
const stallTimeout = 2 * time.Minute

// countWait is how long the drain waits before it counts the records
// again, with left of them still to come after done in elapsed. A count is
// a Metadata and a ListOffsets request to the broker, whose CPU, and the
// benchmark's, the relay and PostgreSQL then do not get; pg_recvlogical's
// run has no such load beside it. Counting every 2 ms throughout, the
// broker and the benchmark took 0.30-0.33 of a core in a drain; counting
// so, 0.17-0.19 (docs/performance.md, "Counting the drain"). The drain
// counts every 2 ms only once the rate so far says it ends within 4 ms,
// and every rssSample before, which samples the memory as often as it
// did. It waits at most half of what the rate so far says is left, so
// the end is seen within 2 ms unless the drain more than doubles its
// rate near the end (at worst rssSample late).
func countWait(left, done int64, elapsed time.Duration) time.Duration {
	const near = 2 * time.Millisecond
	if done <= 0 || elapsed <= 0 {
		return rssSample
	}
	eta := time.Duration(float64(left) / float64(done) * float64(elapsed))
	return min(max(eta/2, near), rssSample)
}

// drain starts the kind's relay processes on the backlog in table and
// measures until the broker has acknowledged every event.
func (r *run) drain(ctx context.Context, k drainKind, table string) (Drain, error) {
	d := Drain{Source: k.name, Instances: k.instances}
	cluster, err := r.startBroker(r.cfg.Partitions, true)
	if err != nil {
		return d, err
	}
	defer cluster.Close()
	counter, err := newRecordCounter(cluster.ListenAddrs())
	if err != nil {
		return d, err
	}
	defer counter.close()

	var ws *walsenderWatch
	if k.slot != "" {
		ws = &walsenderWatch{db: r.db, slot: k.slot}
	}
	selfBefore, brokerBefore := selfCPU(), cluster.CPU()
	pgBefore, err := r.db.serverCPU(ctx)
	if err != nil {
		return d, err
	}
	procs, addrs, err := r.startDrainRelays(k, table, cluster.ListenAddrs())
	defer func() {
		for _, p := range procs {
			p.kill()
		}
	}()
	if err != nil {
		return d, err
	}
	want := int64(r.cfg.Events)
	start := procs[0].started
	end, err := r.waitDrained(ctx, k, &d, procs, counter, ws)
	if err != nil {
		return d, err
	}

	d.BrokerCPUSeconds = (selfCPU() - selfBefore + cluster.CPU() - brokerBefore).Seconds()
	pgCPU, err := r.db.serverCPUSince(ctx, pgBefore)
	if err != nil {
		return d, err
	}
	d.PostgresCPUSeconds = pgCPU.Seconds()
	if ws != nil {
		ws.poll(ctx)
		d.WalsenderCPUSeconds = ws.cpu.Seconds()
	}
	if err := r.readDrainUsage(ctx, k, &d, procs, addrs); err != nil {
		return d, err
	}
	d.Seconds = end.Sub(start).Seconds()
	d.Rate = float64(want) / d.Seconds
	d.CPUSecPerMillion = d.CPUSeconds / float64(want) * 1e6
	return d, nil
}

// startDrainRelays starts the kind's relay processes, each with an HTTP
// address of its own whose metrics are read at the end. The processes
// started are returned even with an error, to be killed.
func (r *run) startDrainRelays(k drainKind, table string, brokers []string) (procs []*relayProc, addrs []string, err error) {
	for i := range k.instances {
		name := fmt.Sprintf("%s-%d", k.name, i)
		if k.instances > 1 {
			name = fmt.Sprintf("%s%d-%d", k.name, k.instances, i)
		}
		addr, err := freeAddr()
		if err != nil {
			return procs, addrs, err
		}
		p, err := startRelay(r.relay, relayConfig{
			url: r.relayURL, table: "public." + table, brokers: brokers, source: k.source(r, i), delivery: k.delivery,
			httpAddr: addr, cpus: r.cfg.relayCPUs,
			headers: r.db.headers, otlp: r.otlp,
		}, r.dir, r.cfg.RelayLogDir, name)
		if err != nil {
			return procs, addrs, err
		}
		procs, addrs = append(procs, p), append(addrs, addr)
	}
	return procs, addrs, nil
}

// waitDrained waits until the broker holds every event of the backlog,
// sampling the relays' memory meanwhile into d, and returns when that
// was. A relay that exits, or no progress for stallTimeout, ends it with
// an error.
func (r *run) waitDrained(ctx context.Context, k drainKind, d *Drain, procs []*relayProc, counter *recordCounter, ws *walsenderWatch) (time.Time, error) {
	want := int64(r.cfg.Events)
	start := procs[0].started
	var sampled time.Time
	last, lastProgress := int64(0), time.Now()
	for {
		if time.Since(sampled) >= rssSample {
			sampled = time.Now()
			sampleMemory(d, procs)
		}
		for _, p := range procs {
			if err := p.exited(); err != nil {
				return time.Time{}, err
			}
		}
		n, err := counter.count(ctx)
		if err != nil {
			return time.Time{}, err
		}
		if n >= want {
			d.Events = n
			return time.Now(), nil
		}
		if ws != nil && ws.pid == 0 {
			ws.poll(ctx)
		}
		if n > last {
			last, lastProgress = n, time.Now()
		} else if time.Since(lastProgress) > stallTimeout {
			return time.Time{}, fmt.Errorf("%s drain: no progress for %s at %d of %d events; relay output:\n%s", k.name, stallTimeout, n, want, procs[0].out.String())
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(countWait(want-n, n, time.Since(start))):
		}
	}
}

// sampleMemory raises d's peaks of the relays' own memory (RssAnon) and
// file pages (RssFile). VmHWM has the peak of their sum only, so each part
// is sampled for its own: the relay's own memory peaks during the drain,
// its file pages, its binary's mostly, as it starts.
func sampleMemory(d *Drain, procs []*relayProc) {
	for _, p := range procs {
		if u, err := procMemory(p.cmd.Process.Pid); err == nil {
			d.PeakAnonMiB = max(d.PeakAnonMiB, float64(u.AnonKiB)/1024)
			d.PeakFileMiB = max(d.PeakFileMiB, float64(u.FileKiB)/1024)
		}
	}
}

// readDrainUsage stops the relays and adds to d what they used: CPU,
// context switches and system calls per event, peak RSS, records per
// batch from their metrics; it notes what the broker holds beyond the
// events.
func (r *run) readDrainUsage(ctx context.Context, k drainKind, d *Drain, procs []*relayProc, addrs []string) error {
	want := int64(r.cfg.Events)
	var cpu time.Duration
	var switches, syscalls int64
	for _, p := range procs {
		u, err := p.usage()
		if err != nil {
			return err
		}
		d.PeakRSSMiB = max(d.PeakRSSMiB, float64(u.PeakRSSKiB)/1024)
		cpu += u.CPU
		switches += u.Switches
		syscalls += u.Syscalls
	}
	d.CPUSeconds = cpu.Seconds()
	d.SwitchesPerEvent = float64(switches) / float64(want)
	d.SyscallsPerEvent = float64(syscalls) / float64(want)
	var err error
	if d.RecordsPerBatch, err = recordsPerBatch(ctx, addrs); err != nil {
		return err
	}
	for i, p := range procs {
		if err := p.stop(time.Minute); err != nil {
			return err
		}
		r.noteLog(fmt.Sprintf("%s drain, relay %d", k.name, i), p)
	}
	switch {
	case d.Events != want && k.delivery == "exactly_once":
		r.note("%s drain: the topics' committed offsets reach %d for %d events: each commit's markers take an offset per partition", k.name, d.Events, want)
	case d.Events != want:
		r.note("%s drain: the broker holds %d records for %d events (a restart repeated some)", k.name, d.Events, want)
	}
	return nil
}

// recordsPerBatch reads the relays' outboxrelay_produce_batch_records at
// addrs: the records in a partition batch, on average; 0 when none has
// the metric.
func recordsPerBatch(ctx context.Context, addrs []string) (float64, error) {
	var records float64
	var batches uint64
	for _, addr := range addrs {
		mfs, err := readMetrics(ctx, addr)
		if err != nil {
			return 0, err
		}
		for _, m := range mfs[batchRecordsMetric].GetMetric() {
			records += m.GetHistogram().GetSampleSum()
			batches += m.GetHistogram().GetSampleCount()
		}
	}
	if batches == 0 {
		return 0, nil
	}
	return records / float64(batches), nil
}

// batchRecordsMetric is the relay's histogram of records per batch.
const batchRecordsMetric = metrics.Namespace + "_produce_batch_records"
