package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/outboxrelay/outboxrelay/cdc"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/buildinfo"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/tracing"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/secret"
	"github.com/outboxrelay/outboxrelay/poller"
	"github.com/outboxrelay/outboxrelay/sink"
)

// Version is the release, set at link time with
// -ldflags "-X github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/app.Version=v1.2.3"
// (docker/Dockerfile does). Left empty, the version recorded in the binary's
// build info is used (see Build).
var Version string

// Build describes this binary: Version, else what the toolchain recorded.
// `outboxrelay version`, the start-up log line and outboxrelay_build_info
// all use it, so they name the same version.
func Build() buildinfo.Info { return buildinfo.Read(Version) }

// Run relays until ctx is cancelled (a graceful stop, nil) or an error that
// restarting cannot fix. configFlags are the command-line flags that gave
// the relay its configuration ("--config", "relay.yaml"), so that a
// slot-loss error names the backfill command to run with the same; none
// when the environment alone did.
func Run(ctx context.Context, cfg *config.Config, log *slog.Logger, configFlags ...string) error {
	return run(ctx, cfg, log, nil, configFlags)
}

// Backfill publishes again, through the relay's routing and sink, the
// outbox rows b chooses, which a lost replication slot may have missed,
// and leaves the slot and the checkpoint where the relay's next start
// carries on with no gap (cdc/backfill.go). It returns once Kafka has the
// rows and the checkpoint is saved. The relay must not run meanwhile.
func Backfill(ctx context.Context, cfg *config.Config, log *slog.Logger, b cdc.Backfill) (cdc.BackfillResult, error) {
	if cfg.Source != "cdc" {
		return cdc.BackfillResult{}, fmt.Errorf("source is %q: a backfill recovers what a lost replication slot missed, and the poller has no slot (it publishes every row it has not marked)", cfg.Source)
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var res cdc.BackfillResult
	var finished atomic.Bool
	b.Done = func(r cdc.BackfillResult) {
		res = r
		finished.Store(true)
		stop() // a graceful stop: the last checkpoint is saved
	}
	if err := run(ctx, cfg, log, &b, nil); err != nil {
		return cdc.BackfillResult{}, err
	}
	if !finished.Load() {
		return cdc.BackfillResult{}, errors.New("stopped before Kafka had every row chosen; run the backfill again (rows published twice carry the same id)")
	}
	return res, nil
}

// run relays, or with backfill set, backfills: the steps below in order,
// each closing what it opened when run returns.
func run(ctx context.Context, cfg *config.Config, log *slog.Logger, backfill *cdc.Backfill, configFlags []string) error {
	// The last guard: no configured password reaches the log, whatever a
	// library writes into an error (config/scrub.go).
	log = slog.New(config.ScrubSecrets(log.Handler(), cfg.Secrets()))
	for _, w := range cfg.Warnings() {
		log.Warn(w, "component", "config")
	}
	obs, observeRegistry, stopHTTP, err := startObserving(ctx, cfg, log, backfill == nil, configFlags)
	if err != nil {
		return err
	}
	defer stopHTTP()

	sc := cfg.SinkConfig()
	inst, ok, err := takePollerInstance(ctx, cfg, &sc, obs, log)
	if err != nil || !ok {
		return err
	}
	if inst != nil {
		defer inst.Release(context.WithoutCancel(ctx))
	}
	tr, stopTracing, err := startTracing(ctx, log)
	if err != nil {
		return err
	}
	// After the sink has closed, so that every span has ended.
	defer stopTracing()
	snk, err := openSink(ctx, sc, obs, inst != nil, log)
	if err != nil {
		return err
	}
	defer snk.Close()
	// Stop serving before the sink closes, as the Kafka check pings it.
	defer stopHTTP()
	src, closeSource, err := openSource(cfg, sc, snk, backfill, configFlags, log)
	if err != nil {
		return err
	}
	defer closeSource()
	runOpts, err := runnerOptions(ctx, cfg, obs, observeRegistry, log)
	if err != nil {
		return err
	}
	obs.m.ExportSource(src)
	r, err := connector.NewRunner(src, obs.m.Sink(tr.Sink(snk)), cfg.RunnerConfig(), append(runOpts, connector.WithObserver(obs.m.Observer()))...)
	if err != nil {
		return err
	}
	logStart(cfg, log, backfill != nil)
	obs.starting("")
	if err := relay(ctx, r, obs, log); err != nil {
		return err
	}
	stopHTTP()
	if backfill == nil {
		log.Info("outboxrelay stopped", "component", "app")
	}
	return nil
}

// startObserving makes the relay's metrics and probes, and with serve,
// serves them. observeRegistry is what the Debezium router reports the
// Schema Registry's answers to, nil without one; stopHTTP ends serving,
// and may be called more than once. configFlags, the flags that gave the
// configuration, go into the commands the status page shows.
func startObserving(ctx context.Context, cfg *config.Config, log *slog.Logger, serve bool, configFlags []string) (obs *observer, observeRegistry func(error), stopHTTP func(), err error) {
	if obs, err = newObserver(cfg, log, configFlags); err != nil {
		return nil, nil, nil, err
	}
	if rc := cfg.DebeziumRouter(); rc != nil && rc.UsesRegistry() {
		// Before serving: the readiness check of the registry is part of
		// the endpoint from its start.
		if observeRegistry, err = obs.watchRegistry(); err != nil {
			return nil, nil, nil, err
		}
	}
	if !serve {
		// A backfill serves no endpoints: it runs beside the relay's pod
		// or container, whose port it would take.
		return obs, observeRegistry, func() {}, nil
	}
	// The relay serves before the steps after this one, which wait for
	// PostgreSQL or Kafka for as long as they are down: a liveness probe
	// finding no endpoint would restart the pod over and over, which
	// brings neither back. Meanwhile /readyz names the step.
	if stopHTTP, err = obs.serve(ctx); err != nil {
		return nil, nil, nil, err
	}
	return obs, observeRegistry, stopHTTP, nil
}

// takePollerInstance takes, for a poller in Kafka transactions, this
// instance's number and makes sc's transactional id its own; nothing for
// any other relay. ok is false when ctx was cancelled while PostgreSQL did
// not answer: a stop before the start, no error.
func takePollerInstance(ctx context.Context, cfg *config.Config, sc *sink.Config, obs *observer, log *slog.Logger) (inst *poller.Instance, ok bool, err error) {
	if cfg.Source != "poll" || sc.TransactionalID == "" {
		return nil, true, nil
	}
	obs.starting("taking a poller instance number, which waits for PostgreSQL to answer")
	if inst, err = takeInstance(ctx, cfg, sc.TransactionalID, log); err != nil || inst == nil {
		return nil, false, err
	}
	sc.TransactionalID = inst.TransactionalID(sc.TransactionalID)
	log.Info("publishing in Kafka transactions of this instance's own", "component", "app", "instance", inst.Number, "transactional_id", sc.TransactionalID, "transaction_timeout", sc.TransactionTimeout)
	return inst, true, nil
}

// startTracing sets up tracing as the OTEL_ variables ask (nil when they
// do not), and returns what exports the last spans at the end.
func startTracing(ctx context.Context, log *slog.Logger) (*tracing.Tracing, func(), error) {
	tr, err := tracing.FromEnv(ctx, Build().Version, log)
	if err != nil || tr == nil {
		return nil, func() {}, err
	}
	log.Info("tracing: a span for each event with a trace context, exported over OTLP", "component", "tracing", "protocol", tr.Protocol())
	return tr, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tr.Shutdown(sctx); err != nil {
			log.Warn("spans of the last events may be lost", "component", "tracing", "err", err)
		}
	}, nil
}

// openSink makes the Kafka sink and hands it to the observer's checks.
// fence says the relay took a poller instance's transactional id.
func openSink(ctx context.Context, sc sink.Config, obs *observer, fence bool, log *slog.Logger) (*sink.Sink, error) {
	snk, err := sink.New(sc, append([]sink.Option{sink.WithLogger(log)}, obs.sinkOptions()...)...)
	if err != nil {
		return nil, err
	}
	obs.useSink(snk)
	if fence {
		obs.starting("fencing a previous instance's Kafka transaction, which waits for Kafka to answer")
		// A predecessor that died with this number may have left a
		// transaction open, which holds read_committed consumers back
		// until it times out: fence it now rather than at the first
		// transaction, which may be a while in an idle outbox.
		if err := snk.Fence(ctx); err != nil {
			log.Warn("could not fence a previous instance's transactional id at start; the first transaction will", "component", "app", "err", err)
		}
	}
	return snk, nil
}

// openSource makes the source cfg names, and returns what closes it.
func openSource(cfg *config.Config, sc sink.Config, snk *sink.Sink, backfill *cdc.Backfill, configFlags []string, log *slog.Logger) (connector.Source, func(), error) {
	switch cfg.Source {
	case "cdc":
		opts := []cdc.Option{cdc.WithLogger(log), cdc.WithCheckpoints(checkpointStore(sc, cfg.Kafka.CheckpointTopic, log, cfg.Log.Level, snk), Build().Version),
			cdc.WithBackfillAdvice(cdc.BackfillAdvice{ConfigFlags: shellWords(configFlags), TimestampColumn: cfg.Routing.Debezium.TimestampColumn}),
			cdc.WithDrainTimeout(cfg.RunnerConfig().ShutdownTimeout)}
		if backfill != nil {
			opts = append(opts, cdc.WithBackfill(*backfill))
		}
		c, err := cdc.New(cfg.CDCConfig(), opts...)
		if err != nil {
			return nil, nil, err
		}
		return c, func() { c.Close() }, nil
	case "poll":
		p, err := newPoller(cfg, log)
		return p, func() {}, err
	default:
		return nil, nil, fmt.Errorf("source %q is not supported", cfg.Source)
	}
}

// runnerOptions are the runner's logger and its router: the one the
// commands beside the relay route with too (Router), when the
// configuration asks for more than the routing section, which the runner
// applies by itself.
func runnerOptions(ctx context.Context, cfg *config.Config, obs *observer, observeRegistry func(error), log *slog.Logger) ([]connector.Option, error) {
	opts := []connector.Option{connector.WithLogger(log.With("component", "runner"))}
	if cfg.DebeziumRouter() == nil && cfg.TableRoutings() == nil {
		return opts, nil
	}
	if cfg.DebeziumRouter() != nil {
		obs.starting("reading the outbox table's column types for the Debezium router")
	}
	rt, nullKeys, err := Router(ctx, cfg, log, observeRegistry)
	if err != nil {
		return nil, err
	}
	opts = append(opts, connector.WithRouter(rt))
	if nullKeys {
		// Debezium's router makes a record with a null key of a row whose
		// key column is NULL (EventRouterDelegate.defineRecordKey).
		opts = append(opts, connector.WithNullKeys())
	}
	return opts, nil
}

// logStart writes the start line: what runs, against what, and how the
// Go runtime runs it.
func logStart(cfg *config.Config, log *slog.Logger, backfill bool) {
	build := Build()
	what := "outboxrelay starting"
	if backfill {
		what = "outboxrelay backfill starting"
	}
	limit, from := startLineMemory()
	log.Info(what, "component", "app", "version", build.Version, "revision", build.Revision, "go", build.GoVersion,
		"source", cfg.Source, "table", strings.Join(cfg.Outbox.TableNames(), ", "),
		"postgres", secret.Redact(cfg.Postgres.URL), "brokers", cfg.Kafka.Brokers,
		"gomaxprocs", runtime.GOMAXPROCS(0), "gomemlimit", limit, "gomemlimit_from", from)
}

// relay runs r until ctx is cancelled or an error restarting cannot fix.
func relay(ctx context.Context, r *connector.Runner, obs *observer, log *slog.Logger) error {
	err := r.Run(ctx)
	var lost *cdc.SlotLostError
	if errors.As(err, &lost) && ctx.Err() == nil {
		// Restarting finds the same slot and checkpoint, so the relay
		// does not exit into a restart loop: it stays up, not ready, with
		// outboxrelay_replication_slot_lost at 1 and the error on
		// /readyz, until someone acts and stops it.
		obs.halt(err)
		log.Error("relaying stopped on a lost replication slot; staying up, not ready, until stopped: read the error above and docs/guarantees.md#a-lost-replication-slot",
			"component", "app", "slot", lost.Slot, "cause", string(lost.Cause))
		<-ctx.Done()
	}
	return err
}

// checkpointStore opens the CDC source's checkpoint store: the compacted
// topic kafka.checkpoint_topic, through a client of its own with the
// sink's config sc (its brokers and security).
// With kafka.delivery exactly_once, snk writes the checkpoints, in the
// transactions of the events they cover.
func checkpointStore(sc sink.Config, topic string, log *slog.Logger, level config.LogLevel, snk *sink.Sink) cdc.OpenCheckpoints {
	sc.TransactionalID = "" // the store's own client does not write in transactions
	return func(ctx context.Context, key connector.CheckpointKey) (connector.CheckpointStore, error) {
		opts := []sink.Option{sink.WithLogger(log), sink.WithClientOptions(
			kgo.WithLogger(kslog.New(reportedDials(clientLogger(log, level, "kafka-checkpoint")))))}
		if snk.Transactions() {
			opts = append(opts, sink.WithTransactions(snk))
		}
		return sink.NewCheckpointStore(ctx, sc, topic, key, opts...)
	}
}

// NewLogger builds the logger that log.level and log.format describe.
func NewLogger(w io.Writer, level config.LogLevel, format config.LogFormat) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level)) // validated with the config
	opts := &slog.HandlerOptions{Level: lv, ReplaceAttr: vocabulary}
	if format == config.FormatText {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// shellWords joins words into a command line a POSIX shell splits back.
func shellWords(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = cdc.ShellWord(w)
	}
	return strings.Join(q, " ")
}
