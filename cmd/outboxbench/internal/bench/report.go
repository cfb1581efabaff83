package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what one run measured. Its JSON form is the -json output.
type Report struct {
	Started  time.Time `json:"started"`
	Seconds  float64   `json:"seconds"` // the whole run
	Machine  Machine   `json:"machine"`
	Workload Workload  `json:"workload"`
	// Postgres holds the server settings that matter here.
	Postgres map[string]string `json:"postgres_settings"`
	Kafka    string            `json:"kafka"`
	Relay    string            `json:"relay"`

	Ceilings Ceilings      `json:"ceilings"`
	Drains   []Drain       `json:"drains"`
	Latency  []Latency     `json:"latency"`
	Notes    []string      `json:"notes,omitempty"`
	Phases   []PhaseTiming `json:"phases"`
}

// Machine is where the figures come from.
type Machine struct {
	Cores      int       `json:"cores"`
	CPU        string    `json:"cpu"`
	MemoryMiB  int64     `json:"memory_mib"`
	OS         string    `json:"os"`
	Go         string    `json:"go"`
	Postgres   string    `json:"postgres"`
	FranzGo    string    `json:"franz_go"`
	Kfake      string    `json:"kfake"`
	LoadBefore []float64 `json:"load_before"` // 1, 5, 15 minute load averages
	LoadAfter  []float64 `json:"load_after"`
}

// Workload is the backlog and the steady load.
type Workload struct {
	Events         int     `json:"events"`
	Transactions   int     `json:"transactions"`
	TxnRows        string  `json:"txn_rows"`
	PayloadBytes   int     `json:"payload_bytes"`
	Aggregates     int     `json:"aggregates"`
	Topics         int     `json:"topics"`
	Partitions     int     `json:"partitions"`
	Writers        int     `json:"writers"`
	BacklogSeconds float64 `json:"backlog_write_seconds"`
	WALBytes       int64   `json:"backlog_wal_bytes"`
}

// Ceilings are the limits the drain is compared with.
type Ceilings struct {
	// RecvlogicalSeconds are the pg_recvlogical runs (one before the
	// relays, one after); the faster one is the ceiling.
	RecvlogicalSeconds []float64 `json:"pg_recvlogical_seconds"`
	RecvlogicalRate    float64   `json:"pg_recvlogical_events_per_sec"`
	// The CPU time of the walsender (the server's decoding) and of
	// pg_recvlogical itself, per run.
	RecvlogicalWalsenderCPU []float64 `json:"pg_recvlogical_walsender_cpu_seconds"`
	RecvlogicalClientCPU    []float64 `json:"pg_recvlogical_client_cpu_seconds"`
	RawIngestSeconds        float64   `json:"raw_ingest_seconds"`
	RawIngestRate           float64   `json:"raw_ingest_events_per_sec"`
	// RawIngestCPU is the producer's and the broker's CPU time together
	// (they share this process).
	RawIngestCPU float64 `json:"raw_ingest_cpu_seconds"`
}

// Drain is one source relaying the backlog.
type Drain struct {
	Source           string  `json:"source"`
	Instances        int     `json:"instances"`
	Events           int64   `json:"events"`
	Seconds          float64 `json:"seconds"`
	Rate             float64 `json:"events_per_sec"`
	RatioRecvlogical float64 `json:"ratio_to_pg_recvlogical"`
	RatioRawIngest   float64 `json:"ratio_to_raw_ingest"`
	// PeakAnonMiB is the largest RssAnon of a relay process, sampled every
	// rssSample: the relay's own memory (heap, stacks, the runtime's),
	// the figure that counts. PeakFileMiB is the largest RssFile, the
	// pages of its binary (and other files) it maps: clean, shared with
	// the page cache, and the kernel's to reclaim. PeakRSSMiB is the
	// largest VmHWM, the peak of the two together.
	PeakRSSMiB  float64 `json:"peak_rss_mib"`
	PeakAnonMiB float64 `json:"peak_rss_anon_mib"`
	PeakFileMiB float64 `json:"peak_rss_file_mib"`
	// CPUSeconds is the relay processes' user+system time, start to stop.
	CPUSeconds       float64 `json:"cpu_seconds"`
	CPUSecPerMillion float64 `json:"cpu_seconds_per_million_events"`
	// What the relay shares the cores with: the walsender decoding for it
	// (CDC), and this process, which is the broker.
	WalsenderCPUSeconds float64 `json:"walsender_cpu_seconds,omitempty"`
	// PostgresCPUSeconds is every server process's CPU time during the
	// drain: the walsender for CDC, the claiming backends for the poller.
	PostgresCPUSeconds float64 `json:"postgres_cpu_seconds"`
	BrokerCPUSeconds   float64 `json:"broker_cpu_seconds"`
	// SwitchesPerEvent is the relays' context switches per event, and
	// SyscallsPerEvent their reads and writes: a relay that wakes and
	// reads for every few events shows in both.
	SwitchesPerEvent float64 `json:"context_switches_per_event"`
	SyscallsPerEvent float64 `json:"read_write_syscalls_per_event"`
	// RecordsPerBatch is the records in a partition batch of a produce
	// request, on average over the drain (outboxrelay_produce_batch_records);
	// 0 for a relay from before the metric.
	RecordsPerBatch float64 `json:"records_per_batch"`
}

// Latency is commit-to-Kafka latency at one steady rate.
type Latency struct {
	Source       string  `json:"source"`
	TargetRate   int     `json:"target_events_per_sec"`
	Rate         float64 `json:"achieved_events_per_sec"`
	Events       int     `json:"events"`
	TxnRows      int     `json:"txn_rows"`
	P50          float64 `json:"p50_ms"`
	P90          float64 `json:"p90_ms"`
	P99          float64 `json:"p99_ms"`
	Max          float64 `json:"max_ms"`
	PeakRSSMiB   float64 `json:"peak_rss_mib"`
	CPUSecPerMil float64 `json:"cpu_seconds_per_million_events"`
	// MachineBusy is the share of the machine's cores that were busy while
	// the rate was held: writers, PostgreSQL, relay, broker and consumer
	// share them.
	MachineBusy float64 `json:"machine_busy"`
	// SlowEvents are the events the relay itself saw take 10 ms or more
	// from commit to Kafka's acknowledgement, and SlowStagesMs the mean
	// milliseconds each stage held them (postgres, network, relay, kafka;
	// outboxrelay_slow_event_stage_seconds); -1 when the relay measured
	// does not export that metric (one built before it).
	SlowEvents   int                `json:"slow_events"`
	SlowStagesMs map[string]float64 `json:"slow_stages_ms,omitempty"`
}

// PhaseTiming says how long each part of the run took.
type PhaseTiming struct {
	Phase   string  `json:"phase"`
	Seconds float64 `json:"seconds"`
}

// WriteJSON writes r as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes r for people.
func (r *Report) WriteTable(w io.Writer) error {
	m := r.Machine
	var b strings.Builder
	fmt.Fprintf(&b, "outboxbench %s, %.0fs\n", r.Started.UTC().Format(time.RFC3339), r.Seconds)
	fmt.Fprintf(&b, "machine:  %d cores (%s), %d MiB, %s, load %s before, %s after\n",
		m.Cores, m.CPU, m.MemoryMiB, m.OS, loads(m.LoadBefore), loads(m.LoadAfter))
	fmt.Fprintf(&b, "versions: %s, %s, franz-go %s, kfake %s\n", m.Go, m.Postgres, m.FranzGo, m.Kfake)
	wl := r.Workload
	fmt.Fprintf(&b, "backlog:  %d events in %d transactions of %s rows, %d-byte JSON payloads, %d aggregates, %d topics x %d partitions; %.1f MiB of WAL, written in %.1fs by %d connections\n",
		wl.Events, wl.Transactions, wl.TxnRows, wl.PayloadBytes, wl.Aggregates, wl.Topics, wl.Partitions,
		float64(wl.WALBytes)/(1<<20), wl.BacklogSeconds, wl.Writers)
	var ps []string
	for _, k := range slices.Sorted(maps.Keys(r.Postgres)) {
		ps = append(ps, k+"="+r.Postgres[k])
	}
	fmt.Fprintf(&b, "postgres: %s\n", strings.Join(ps, " "))
	fmt.Fprintf(&b, "kafka:    %s\n", r.Kafka)
	fmt.Fprintf(&b, "relay:    %s\n\n", r.Relay)

	c := r.Ceilings
	fmt.Fprintf(&b, "ceilings\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "\tevents/s\tseconds\tCPU seconds\t\n")
	fmt.Fprintf(tw, "pg_recvlogical (pgoutput to /dev/null)\t%.0f\t%s\twalsender %s, client %s\t\n",
		c.RecvlogicalRate, floats(c.RecvlogicalSeconds), floats(c.RecvlogicalWalsenderCPU), floats(c.RecvlogicalClientCPU))
	fmt.Fprintf(tw, "raw ingest (bare franz-go producer)\t%.0f\t%.2f\tproducer+broker %.2f\t\n", c.RawIngestRate, c.RawIngestSeconds, c.RawIngestCPU)
	tw.Flush()

	fmt.Fprintf(&b, "\nbacklog drain\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "source\tinstances\tevents/s\tseconds\tx pg_recvlogical\tx raw ingest\town memory MiB (RssAnon peak)\tfile pages MiB (RssFile peak)\tpeak RSS MiB\tCPU s/M events\tCPU s relay/postgres/broker\tswitches/event\tsyscalls/event\trecords/batch\t\n")
	for _, d := range r.Drains {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t%.1f\t%.1f\t%.1f\t%.2f\t%.2f/%.2f/%.2f\t%.2f\t%.2f\t%.1f\t\n",
			d.Source, d.Instances, d.Rate, d.Seconds, d.RatioRecvlogical, d.RatioRawIngest, d.PeakAnonMiB, d.PeakFileMiB, d.PeakRSSMiB, d.CPUSecPerMillion,
			d.CPUSeconds, d.PostgresCPUSeconds, d.BrokerCPUSeconds, d.SwitchesPerEvent, d.SyscallsPerEvent, d.RecordsPerBatch)
	}
	tw.Flush()

	if len(r.Latency) > 0 {
		fmt.Fprintf(&b, "\ncommit-to-Kafka latency (COMMIT returned -> record fetched)\n")
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "source\ttarget/s\tachieved/s\tevents\tp50 ms\tp90 ms\tp99 ms\tmax ms\tpeak RSS MiB\tCPU s/M events\tmachine busy\t\n")
		for _, l := range r.Latency {
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.1f\t%.2f\t%.0f%%\t\n",
				l.Source, l.TargetRate, l.Rate, l.Events, l.P50, l.P90, l.P99, l.Max, l.PeakRSSMiB, l.CPUSecPerMil, 100*l.MachineBusy)
		}
		tw.Flush()
		fmt.Fprintf(&b, "\nslow events: those the relay saw take 10 ms or more from commit to Kafka's acknowledgement, and the mean ms each stage held them\n")
		for _, l := range r.Latency {
			fmt.Fprintf(&b, "  %s at %d/s: %s\n", l.Source, l.TargetRate, formatStages(l.SlowEvents, l.SlowStagesMs))
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\nnote: %s", n)
	}
	if len(r.Notes) > 0 {
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func floats(fs []float64) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = fmt.Sprintf("%.2f", f)
	}
	return strings.Join(s, ", ")
}

func loads(l []float64) string {
	if len(l) == 0 {
		return "?"
	}
	s := make([]string, len(l))
	for i, v := range l {
		s[i] = fmt.Sprintf("%.2f", v)
	}
	return strings.Join(s, "/")
}
