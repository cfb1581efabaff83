// Command outboxbench measures outboxrelay on this machine: backlog drain
// against pg_recvlogical and the broker's raw ingest, commit-to-Kafka
// latency at steady rates, and the relay's memory and CPU. It starts its own
// PostgreSQL and an in-process broker; see docs/performance.md. The
// server is the one the tests run (internal/localpg): OUTBOXRELAY_TEST_PG=17
// picks PostgreSQL 17 (see docs/operations.md, "Which PostgreSQL").
//
//	go run ./cmd/outboxbench                      # the default run, a few minutes
//	go run ./cmd/outboxbench -events 1000000      # the 1M-event drain
//	go run ./cmd/outboxbench -json report.json    # also write the report as JSON
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/outboxrelay/outboxrelay/cmd/outboxbench/internal/bench"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "outboxbench:", err)
		}
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) > 0 && args[0] == "broker" {
		// kfake in a process of its own (-broker-process).
		return bench.BrokerMain(ctx, args[1:], os.Stdin, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "neighbour" {
		// A busy neighbour (-neighbour), in a process of its own.
		return bench.NeighbourMain(ctx, args[1:], os.Stdin, stderr)
	}

	var cfg bench.Config
	fs := flag.NewFlagSet("outboxbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.Events, "events", 300000, "events in the backlog the drains relay")
	fs.IntVar(&cfg.TxnMax, "txn-max", 100, "backlog transactions have 1 to this many rows")
	fs.IntVar(&cfg.PayloadBytes, "payload", 500, "bytes of JSON payload per event")
	fs.IntVar(&cfg.Aggregates, "aggregates", 10000, "aggregates the events belong to")
	fs.IntVar(&cfg.Partitions, "partitions", 8, "partitions per topic")
	fs.IntVar(&cfg.Writers, "writers", 4, "connections committing events")
	sources := fs.String("sources", "cdc,poll", "sources to measure, comma-separated: cdc, cdc-eos (cdc with kafka.delivery exactly_once), cdc-avro (cdc writing Debezium's records as JSON with schemas, then as Avro through an in-process Schema Registry), poll, poll-eos (poll with exactly_once)")
	rates := fs.String("rates", "1000,5000,20000", "steady-state rates in events/s, comma-separated; empty skips the latency phase")
	fs.DurationVar(&cfg.RateDuration, "rate-duration", 0, "how long each rate is held (default 10s)")
	fs.IntVar(&cfg.LatencyTxnRows, "latency-txn", 10, "rows per transaction at the steady rates")
	fs.StringVar(&cfg.RelayBin, "relay-bin", "", "outboxrelay binary to measure (default: ./cmd/outboxrelay built as docker/Dockerfile builds it, static)")
	fs.StringVar(&cfg.RelayLogDir, "relay-log", "", "keep each relay's output in this directory")
	fs.BoolVar(&cfg.BrokerProcess, "broker-process", false, "run the kfake broker in a process of its own, as a real broker runs apart from the relay")
	fs.DurationVar(&cfg.ProduceDelay, "produce-delay", 0, "hold every produce request this long before the broker answers, as a replicated cluster's acks=all does")
	fs.DurationVar(&cfg.PGDelay, "pg-delay", 0, "the relays reach PostgreSQL through a proxy that holds each direction this long, as a network does (a round trip costs twice as much)")
	fs.Float64Var(&cfg.Neighbour, "neighbour", 0, "while the drains and steady rates run, a process beside the relay burns this many CPUs' worth of time (0.5: half a core), as a busy neighbour on a shared node")
	fs.StringVar(&cfg.RelayCPUs, "relay-cpus", "", "pin each relay to these CPUs, as taskset(1) takes them (0, 0-1); with -neighbour 1 -relay-cpus 0 on two cores, say, the relay shares its core")
	fs.StringVar(&cfg.PollMode, "poll-mode", "mark", "the pollers' poll.mode, mark or delete; their tables are readied for it")
	fs.BoolVar(&cfg.WALDefaults, "wal-defaults", false, "leave full_page_writes, max_wal_size and checkpoint_timeout at PostgreSQL's defaults")
	fs.StringVar(&cfg.Tracing, "tracing", "", "headers: every event has a headers column with a W3C traceparent, which the relays read (routing.headers_column); otlp: also export a span per event over OTLP/HTTP to a receiver in this process; empty: neither")
	jsonPath := fs.String("json", "", "also write the report as JSON to this file (- for stdout, instead of the table)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg.Rates = []int{}
	for f := range strings.SplitSeq(*rates, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("-rates: %q is not a number of events per second", f)
		}
		cfg.Rates = append(cfg.Rates, n)
	}

	for f := range strings.SplitSeq(*sources, ",") {
		if f = strings.TrimSpace(f); f != "" {
			cfg.Sources = append(cfg.Sources, f)
		}
	}
	rep, err := bench.Run(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	if *jsonPath == "-" {
		return rep.WriteJSON(stdout)
	}
	if err := rep.WriteTable(stdout); err != nil {
		return err
	}
	if *jsonPath != "" {
		f, err := os.Create(*jsonPath)
		if err != nil {
			return err
		}
		return errors.Join(rep.WriteJSON(f), f.Close())
	}
	return nil
}
