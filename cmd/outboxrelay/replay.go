package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/app"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/httpserver"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/replay"
)

var replayUsage = commandUsage{
	text: `Usage: outboxrelay replay --config FILE --since TIME [--until TIME] [--aggregate TYPE:ID]
       outboxrelay replay --config FILE (--id ID ... | --ids-file FILE)
       outboxrelay replay --config FILE --aggregate TYPE:ID
       outboxrelay replay --config FILE --resume REPLAY_ID
       outboxrelay replay --debezium-config FILE [--config FILE] ...

Publishes again, beside the running relay and without touching it, the
outbox rows the table still holds that were committed in a range (before
the replay started, without --until), those of the ids given, or those of
one aggregate: in commit order, through the relay's routing, converters
and schema registry, each with its id header and the header
outboxrelay.replay naming the replay. With kafka.delivery exactly_once in
Kafka transactions of its own. Progress goes to stderr (a bar on a
terminal), the counts to stdout. Ctrl-C stops it after the batch under
way; --resume with the id it printed carries on from there. Its progress
is kept in the compacted topic --state-topic.

Rows are read a batch at a time with plain SELECTs, taking no lock the
application waits for. A commit time is read from track_commit_timestamp
when the server keeps it, else from --timestamp-column (the insert time;
default routing.timestamp_column); with the poller from that column, else
from its published column. A selection that reaches rows cleanup or the
poller's retention already deleted is refused, saying what is gone;
--partial publishes what is left.
`,
	docs: "docs/replay.md",
}

// replayCmd is `outboxrelay replay`.
func replayCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("outboxrelay replay", replayUsage)
	cf := addConfigFlags(fs)
	var sel selectionFlags
	var ids, tables stringList
	since := fs.String("since", "", "rows committed at or after this time (RFC 3339, e.g. 2026-11-25T10:00:00Z)")
	until := fs.String("until", "", "rows committed before this time (default: when the replay starts)")
	fs.Var(&ids, "id", "the row of this event id (repeat for more)")
	fs.StringVar(&sel.IDsFile, "ids-file", "", "the rows of the event ids in this file, one a line")
	aggregate := fs.String("aggregate", "", "the rows of one aggregate, TYPE:ID (split at the first colon)")
	fs.Var(&tables, "table", "only this outbox table, schema.table (repeat for more; default every configured one)")
	fs.StringVar(&sel.TimestampColumn, "timestamp-column", "", "column holding each row's insert time (timestamptz, timestamp or bigint milliseconds); default routing.timestamp_column")
	job := replay.Job{}
	fs.StringVar(&job.Resume, "resume", "", "carry on the stopped replay of this id, with its own selection")
	fs.BoolVar(&job.DryRun, "dry-run", false, "count the rows and show the first records; publish nothing")
	fs.IntVar(&job.Show, "show", 10, "records a dry run shows")
	fs.BoolVar(&job.Partial, "partial", false, "publish what the table still holds of a selection that reaches deleted rows")
	fs.IntVar(&job.BatchSize, "batch-size", 500, "rows read and published at a time")
	fs.IntVar(&job.Rate, "rate", 0, "at most this many rows a second (0: as fast as Kafka takes them)")
	fs.StringVar(&job.StateTopic, "state-topic", "", "compacted topic keeping the replay's progress (default kafka.checkpoint_topic + .replay)")
	metricsListen := fs.String("metrics-listen", "", "serve /metrics at this address while the replay runs (e.g. 127.0.0.1:9108)")
	if err := parseFlags(fs, args, 0, stdout, stderr); err != nil {
		return err
	}
	misuse := func(err error) error {
		printUsage(fs, stderr)
		return usageError{fmt.Errorf("%s: %w", fs.Name(), err)}
	}
	sel.IDs, sel.Tables = ids, tables
	if err := parseSelection(&sel, *since, *until, *aggregate); err != nil {
		return misuse(err)
	}
	if job.Resume != "" && (sel.byAny() || job.DryRun) {
		return misuse(errors.New("--resume carries on with the replay's own selection; give no other selection, nor --dry-run"))
	}
	if job.Resume == "" {
		if err := sel.Validate(); err != nil {
			return misuse(err)
		}
	}
	if job.BatchSize < 1 || job.Show < 1 || job.Rate < 0 {
		return misuse(errors.New("--batch-size and --show must be at least 1, --rate at least 0"))
	}
	cfg, log, err := loadForTool(cf, stderr)
	if err != nil {
		return err
	}
	job.Config, job.Log, job.Selection = cfg, log, sel.Selection
	job.Progress, job.Terminal = stderr, replay.IsTerminal(stderr)
	return runReplay(ctx, job, cf, *metricsListen, stdout)
}

// runReplay runs job, serving its metrics, and reports what it did.
func runReplay(ctx context.Context, job replay.Job, cf configFlags, metricsListen string, stdout io.Writer) error {
	var err error
	if job.Router, job.NullKeys, err = app.Router(ctx, job.Config, job.Log, nil); err != nil {
		return err
	}
	stop, m, err := serveMetrics(ctx, metricsListen, job.Log)
	if err != nil {
		return err
	}
	defer stop()
	job.Metrics = m
	res, err := replay.Replay(ctx, job)
	if err != nil {
		return err
	}
	resume := "outboxrelay replay " + strings.Join(append(shellQuoted(cf.args()), "--resume", res.ID), " ")
	switch {
	case job.DryRun:
		fmt.Fprintf(stdout, "outboxrelay replay (dry run): %d rows chosen (%d ids in no table); commit times from %s. The first %d as they would be published:\n",
			res.Chosen, res.Missing, res.TimeFrom, len(res.Shown))
		for i, s := range res.Shown {
			fmt.Fprintf(stdout, "  %d. %s\n", i+1, s)
		}
		fmt.Fprintln(stdout, "Nothing was published.")
	case res.AlreadyFinished:
		fmt.Fprintf(stdout, "outboxrelay replay %s: finished already, %d of %d rows chosen published again (%d to the dead letter topic); nothing to do\n", res.ID, res.Replayed, res.Chosen, res.DeadLettered)
	case res.Finished:
		fmt.Fprintf(stdout, "outboxrelay replay %s: published %d of %d rows chosen again (%d of them to the dead letter topic, %d ids in no table) in %s; each record carries %s=%s\n",
			res.ID, res.Replayed, res.Chosen, res.DeadLettered, res.Missing, res.Elapsed.Round(time.Millisecond), replay.HeaderReplay, res.ID)
	default:
		fmt.Fprintf(stdout, "outboxrelay replay %s: stopped after %d of %d rows chosen (%d to the dead letter topic), where topic %s keeps it; the rest follows with: %s\n",
			res.ID, res.Replayed, res.Chosen, res.DeadLettered, res.StateTopic, resume)
		return fmt.Errorf("replay %s stopped before every row chosen was published; resume it with: %s", res.ID, resume)
	}
	return nil
}

// selectionFlags is a replay's selection as the flags give it.
type selectionFlags struct{ replay.Selection }

func (s selectionFlags) byAny() bool {
	return !s.Since.IsZero() || !s.Until.IsZero() || len(s.IDs) > 0 || s.IDsFile != "" || s.AggregateType != "" || s.AggregateID != ""
}

// parseSelection reads the time and aggregate flags into sel.
func parseSelection(sel *selectionFlags, since, until, aggregate string) error {
	var errs []error
	for _, f := range []struct {
		name, v string
		t       *time.Time
	}{{"--since", since, &sel.Since}, {"--until", until, &sel.Until}} {
		if f.v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, f.v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %q is not an RFC 3339 time such as 2026-11-25T10:00:00Z", f.name, f.v))
		}
		*f.t = t
	}
	if aggregate != "" {
		typ, id, ok := strings.Cut(aggregate, ":")
		if !ok {
			errs = append(errs, fmt.Errorf("--aggregate %q is not TYPE:ID", aggregate))
		}
		sel.AggregateType, sel.AggregateID = typ, id
	}
	return errors.Join(errs...)
}

// stringList is a flag that may be given more than once.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func shellQuoted(words []string) []string {
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = cdc.ShellWord(w)
	}
	return out
}

// loadForTool loads the configuration for a command that works beside
// the relay, and its logger, which keeps the configured secrets out.
func loadForTool(cf configFlags, stderr io.Writer) (*config.Config, *slog.Logger, error) {
	cfg, notes, err := cf.load(os.Environ())
	if err != nil {
		return nil, nil, configProblems(err)
	}
	log := app.NewLogger(stderr, cfg.Log.Level, cfg.Log.Format)
	log = slog.New(config.ScrubSecrets(log.Handler(), cfg.Secrets()))
	logDebeziumNotes(log, notes)
	return cfg, log, nil
}

// serveMetrics serves the replay and redrive metrics at addr (none when
// empty) until stop is called.
func serveMetrics(ctx context.Context, addr string, log *slog.Logger) (stop func(), m *replay.Metrics, err error) {
	if addr == "" {
		return func() {}, nil, nil
	}
	reg := prometheus.NewRegistry()
	if m, err = replay.NewMetrics(reg); err != nil {
		return nil, nil, err
	}
	srv, err := httpserver.Listen(addr, httpserver.Config{Gatherer: reg}, log)
	if err != nil {
		return nil, nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	log.Info("serving metrics", "component", "http", "addr", srv.Addr())
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(sctx); err != nil {
			log.Warn("serving metrics", "component", "http", "err", err)
		}
	}()
	return func() { cancel(); <-done }, m, nil
}
