package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/outboxrelay/outboxrelay/cmd/outboxbench/internal/bench"
	"github.com/outboxrelay/outboxrelay/internal/localpg"
)

// TestMain lets this test binary stand in for outboxbench when the
// benchmark re-executes itself as the broker or the neighbour.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == "broker" || os.Args[1] == "neighbour") {
		if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "outboxbench "+os.Args[1]+":", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSmoke runs the whole benchmark on a tiny backlog and checks that the
// report is complete and consistent. It asserts no timing: speed is
// measured by running outboxbench, never decided by a test.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, a broker and the relay")
	}
	var stdout, stderr bytes.Buffer
	err := run([]string{
		"-events", "3000", "-txn-max", "20", "-writers", "2",
		"-rates", "400", "-rate-duration", "1s", "-sources", "cdc,cdc-eos,cdc-avro,poll,poll-eos",
		// The broker in a process of its own, and PostgreSQL's own WAL
		// settings: the paths the plain run does not take.
		"-broker-process", "-wal-defaults", "-produce-delay", "1ms",
		// The pollers delete what they publish (the default marks it), and
		// the relays reach PostgreSQL through the delaying proxy.
		"-poll-mode", "delete", "-pg-delay", "100us",
		// A neighbour burning a fifth of a core, the relays on CPU 0.
		"-neighbour", "0.2", "-relay-cpus", "0",
		"-json", "-",
	}, &stdout, &stderr)
	if errors.Is(err, localpg.ErrNotInstalled) {
		t.Skipf("needs PostgreSQL: %v", err)
	}
	if err != nil {
		t.Fatalf("outboxbench: %v\n%s", err, stderr.String())
	}

	var rep bench.Report
	dec := json.NewDecoder(&stdout)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("the report is not the Report JSON: %v\n%s", err, stdout.String())
	}

	if !strings.Contains(rep.Kafka, "in a process of its own") || !strings.Contains(rep.Kafka, "1ms late") {
		t.Errorf("the report does not say the broker ran in its own process, answering 1ms late: %s", rep.Kafka)
	}
	if !strings.Contains(rep.Relay, "poll.mode delete") || !strings.Contains(rep.Relay, "through a proxy that holds each direction 100µs") {
		t.Errorf("the report does not say the pollers ran in poll.mode delete, through the delaying proxy: %s", rep.Relay)
	}
	if !strings.Contains(rep.Relay, "neighbour process burning 0.2 CPUs") || !strings.Contains(rep.Relay, "pinned to CPUs 0") {
		t.Errorf("the report does not say a neighbour burned 0.2 CPUs and the relays were pinned to CPU 0: %s", rep.Relay)
	}
	if rep.Machine.Cores < 1 || rep.Machine.Go == "" || !strings.HasPrefix(rep.Machine.Postgres, "PostgreSQL ") || rep.Machine.FranzGo == "" || rep.Machine.Kfake == "" {
		t.Errorf("machine and versions incomplete: %+v", rep.Machine)
	}
	if rep.Postgres["fsync"] != "off" || rep.Postgres["synchronous_commit"] != "on" || rep.Postgres["wal_level"] != "logical" ||
		rep.Postgres["full_page_writes"] != "on" || rep.Postgres["checkpoint_timeout"] != "5min" {
		t.Errorf("postgres settings not the benchmark's: %v", rep.Postgres)
	}
	if w := rep.Workload; w.Events != 3000 || w.Transactions < 3000/20 || w.Transactions > 3000 || w.WALBytes <= 0 || w.PayloadBytes != 500 {
		t.Errorf("workload: %+v", w)
	}

	c := rep.Ceilings
	if len(c.RecvlogicalSeconds) != 2 || c.RecvlogicalRate <= 0 || c.RawIngestRate <= 0 {
		t.Errorf("ceilings incomplete: %+v", c)
	}
	var drains []string
	for _, d := range rep.Drains {
		drains = append(drains, fmt.Sprintf("%s x%d", d.Source, d.Instances))
	}
	const wantDrains = "cdc x1, cdc-eos x1, cdc-json+schema x1, cdc-avro x1, poll x1, poll x2, poll-eos x1, poll-eos x2"
	if got := strings.Join(drains, ", "); got != wantDrains {
		t.Fatalf("drains %s, want %s", got, wantDrains)
	}
	for _, d := range rep.Drains {
		// A transactional drain's count holds the commit markers too.
		if d.Events != 3000 && (!strings.HasSuffix(d.Source, "-eos") || d.Events < 3000) {
			t.Errorf("%s drain: the broker holds %d records for 3000 events", d.Source, d.Events)
		}
		if d.Rate <= 0 || d.PeakRSSMiB <= 0 || d.RatioRecvlogical != d.Rate/c.RecvlogicalRate || d.RatioRawIngest != d.Rate/c.RawIngestRate {
			t.Errorf("%s drain: inconsistent figures %+v", d.Source, d)
		}
		if d.RecordsPerBatch < 1 {
			t.Errorf("%s drain: %v records per batch, from the relay's metrics", d.Source, d.RecordsPerBatch)
		}
	}
	var sources []string
	for _, l := range rep.Latency {
		sources = append(sources, l.Source)
	}
	if got, want := strings.Join(sources, ", "), "cdc, cdc-eos, poll, poll-eos"; got != want {
		t.Fatalf("latency of %s, want %s at one rate: %+v", got, want, rep.Latency)
	}
	for _, l := range rep.Latency {
		// The relay's own stage metric: every slow event has a relay and
		// a kafka stage.
		if l.SlowEvents < 0 {
			t.Errorf("%s latency: the relay built from this tree does not export the stage metric", l.Source)
		}
		if _, ok := l.SlowStagesMs["kafka"]; l.SlowEvents > 0 && (!ok || len(l.SlowStagesMs) < 2) {
			t.Errorf("%s latency: %d slow events with stages %v", l.Source, l.SlowEvents, l.SlowStagesMs)
		}
		if l.TargetRate != 400 || l.Events != 400 || l.Rate <= 0 || l.PeakRSSMiB <= 0 {
			t.Errorf("latency: %+v", l)
		}
		if !(0 < l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.Max) {
			t.Errorf("%s latency percentiles out of order: %+v", l.Source, l)
		}
	}

	// The table is printed from the same report.
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"pg_recvlogical", "raw ingest", "backlog drain", "commit-to-Kafka latency", "cdc", "cdc-avro", "cdc-json+schema", "poll"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
}
