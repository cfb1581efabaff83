package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
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
	"github.com/outboxrelay/outboxrelay/debezium"
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

// run relays, or with backfill set, backfills.
func run(ctx context.Context, cfg *config.Config, log *slog.Logger, backfill *cdc.Backfill, configFlags []string) error {
	// The last guard: no configured password reaches the log, whatever a
	// library writes into an error (config/scrub.go).
	log = slog.New(config.ScrubSecrets(log.Handler(), cfg.Secrets()))
	for _, w := range cfg.Warnings() {
		log.Warn(w, "component", "config")
	}
	obs, err := newObserver(cfg, log)
	if err != nil {
		return err
	}
	rc := cfg.DebeziumRouter()
	var observeRegistry func(error)
	if rc != nil && rc.UsesRegistry() {
		// Before serving: the readiness check of the registry is part of
		// the endpoint from its start.
		if observeRegistry, err = obs.watchRegistry(); err != nil {
			return err
		}
	}
	stopHTTP := func() {}
	if backfill == nil {
		// A backfill serves no endpoints: it runs beside the relay's
		// pod or container, whose port it would take.
		// The relay serves before the steps below, which wait for
		// PostgreSQL or Kafka for as long as they are down: a liveness
		// probe finding no endpoint would restart the pod over and over,
		// which brings neither back. Meanwhile /readyz names the step.
		if stopHTTP, err = obs.serve(ctx); err != nil {
			return err
		}
	}
	defer stopHTTP()
	sc := cfg.SinkConfig()
	var inst *poller.Instance
	if cfg.Source == "poll" && sc.TransactionalID != "" {
		obs.starting("taking a poller instance number, which waits for PostgreSQL to answer")
		if inst, err = takeInstance(ctx, cfg, sc.TransactionalID, log); err != nil || inst == nil {
			return err
		}
		defer inst.Release(context.WithoutCancel(ctx))
		sc.TransactionalID = inst.TransactionalID(sc.TransactionalID)
		log.Info("publishing in Kafka transactions of this instance's own", "component", "app", "instance", inst.Number, "transactional_id", sc.TransactionalID, "transaction_timeout", sc.TransactionTimeout)
	}
	tr, err := tracing.FromEnv(ctx, os.Getenv, Build().Version, log)
	if err != nil {
		return err
	}
	if tr != nil {
		log.Info("tracing: a span for each event with a trace context, exported over OTLP", "component", "tracing")
		defer func() {
			// After the sink has closed, so every span has ended.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := tr.Shutdown(sctx); err != nil {
				log.Warn("spans of the last events may be lost", "component", "tracing", "err", err)
			}
		}()
	}
	snk, err := sink.New(sc, append([]sink.Option{sink.WithLogger(log)}, obs.sinkOptions()...)...)
	if err != nil {
		return err
	}
	defer snk.Close()
	// Stop serving before the sink closes, as the Kafka check pings it.
	defer stopHTTP()
	obs.useSink(snk)
	if inst != nil {
		obs.starting("fencing a previous instance's Kafka transaction, which waits for Kafka to answer")
		// A predecessor that died with this number may have left a
		// transaction open, which holds read_committed consumers back
		// until it times out: fence it now rather than at the first
		// transaction, which may be a while in an idle outbox.
		if err := snk.Fence(ctx); err != nil {
			log.Warn("could not fence a previous instance's transactional id at start; the first transaction will", "component", "app", "err", err)
		}
	}

	var src connector.Source
	switch cfg.Source {
	case "cdc":
		var c *cdc.Source
		opts := []cdc.Option{cdc.WithLogger(log), cdc.WithCheckpoints(checkpointStore(sc, cfg.Kafka.CheckpointTopic, log, cfg.Log.Level, snk), Build().Version),
			cdc.WithBackfillAdvice(cdc.BackfillAdvice{ConfigFlags: shellWords(configFlags), TimestampColumn: cfg.Routing.Debezium.TimestampColumn}),
			cdc.WithDrainTimeout(cfg.RunnerConfig().ShutdownTimeout)}
		if backfill != nil {
			opts = append(opts, cdc.WithBackfill(*backfill))
		}
		c, err = cdc.New(cfg.CDCConfig(), opts...)
		if err == nil {
			defer c.Close()
			src = c
		}
	case "poll":
		src, err = newPoller(cfg, log)
	default:
		err = fmt.Errorf("source %q is not supported", cfg.Source)
	}
	if err != nil {
		return err
	}
	runOpts := []connector.Option{connector.WithLogger(log.With("component", "runner"))}
	if trs := cfg.TableRoutings(); trs != nil {
		// outbox.tables with a table that routes its own way.
		tr := connector.TableRouter{Default: connector.NewRouting(cfg.RunnerConfig().Routing), Tables: map[string]connector.Router{}}
		for name, r := range trs {
			tr.Tables[name] = connector.NewRouting(r)
		}
		runOpts = append(runOpts, connector.WithRouter(tr))
	}
	if rc != nil {
		// The router types columns by the outbox tables' catalogs, read
		// with the sources' network settings.
		ropts := []debezium.RouterOption{debezium.WithLogger(log), debezium.WithCatalog(debezium.PostgresCatalog(rc.PostgresURL, rc.Network))}
		if rc.UsesRegistry() {
			// A registry that does not answer holds routing, which asks
			// it again until it answers or the runner's publishing stops.
			ropts = append(ropts, debezium.WithRegistryState(observeRegistry))
		}
		rt, err := debezium.NewRouter(*rc, ropts...)
		if err != nil {
			return err
		}
		// A table the configured records cannot be made from stops the
		// relay now; one that cannot be read yet is read again with the
		// first event.
		obs.starting("reading the outbox table's column types for the Debezium router")
		if err := rt.Check(ctx); connector.IsPermanent(err) {
			return err
		} else if err != nil {
			log.Warn("could not read the outbox table's column types at start; reading them with the first event", "component", "app", "err", err)
		}
		// The Debezium router makes its own topics: routing.topic_pattern
		// is checked on what it makes.
		allowed, err := connector.AllowTopics(rt, cfg.Routing.TopicPattern)
		if err != nil {
			return err
		}
		// Debezium's router makes a record with a null key of a row whose
		// key column is NULL (EventRouterDelegate.defineRecordKey).
		runOpts = append(runOpts, connector.WithRouter(allowed), connector.WithNullKeys())
	}
	obs.m.ExportSource(src)
	r, err := connector.NewRunner(src, obs.m.Sink(tr.Sink(snk)), cfg.RunnerConfig(), append(runOpts, connector.WithObserver(obs.m.Observer()))...)
	if err != nil {
		return err
	}
	build := Build()
	what := "outboxrelay starting"
	if backfill != nil {
		what = "outboxrelay backfill starting"
	}
	tune := tuned.Load()
	const inside = "the process's own (the relay runs inside another program)"
	procs, gc, scheduling := inside, inside, inside
	if tune != nil {
		procs, gc, scheduling = tune.procsFrom, tune.gcFrom, tune.scheduling
	}
	log.Info(what, "component", "app", "version", build.Version, "revision", build.Revision, "go", build.GoVersion, "source", cfg.Source, "table", strings.Join(cfg.Outbox.TableNames(), ", "),
		"postgres", secret.Redact(cfg.Postgres.URL), "brokers", cfg.Kafka.Brokers, "gomaxprocs", runtime.GOMAXPROCS(0), "gomaxprocs_from", procs, "gogc_from", gc, "scheduling", scheduling)
	if tune != nil && tune.memoryLimit > 0 {
		log.Info("memory limit set from the container's: GOMEMLIMIT is not set", "component", "app",
			"gomemlimit_mib", tune.memoryLimit>>20, "share", memoryLimitShare, "from", tune.memoryLimitFrom)
	}
	if tune != nil {
		// A process of the relay's own, whose memory is the relay's.
		pctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go releasePagesAfterStart(pctx, obs.m.FirstAcknowledged(), log)
	}
	obs.starting("")
	if err := r.Run(ctx); err != nil {
		var lost *cdc.SlotLostError
		if errors.As(err, &lost) && ctx.Err() == nil {
			// Restarting finds the same slot and checkpoint, so the relay
			// does not exit into a restart loop: it stays up, not ready,
			// with outboxrelay_replication_slot_lost at 1 and the error on
			// /readyz, until someone acts and stops it.
			obs.halt(err)
			log.Error("relaying stopped on a lost replication slot; staying up, not ready, until stopped: read the error above and docs/guarantees.md#a-lost-replication-slot",
				"component", "app", "slot", lost.Slot, "cause", string(lost.Cause))
			<-ctx.Done()
		}
		return err
	}
	stopHTTP()
	if backfill == nil {
		log.Info("outboxrelay stopped", "component", "app")
	}
	return nil
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
			kgo.WithLogger(kslog.New(clientLogger(log, level, "kafka-checkpoint"))))}
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
