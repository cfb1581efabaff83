package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/httpserver"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/internal/metrics"
	"github.com/outboxrelay/outboxrelay/internal/secret"
	"github.com/outboxrelay/outboxrelay/sink"
)

// kafkaCheckMaxAge is how long a Kafka ping answers readiness probes.
const kafkaCheckMaxAge = time.Second

// observer wires the metrics, the health checks and the HTTP endpoint
// around one relay: the runner tells the metrics what it does
// (metrics.Metrics.Observer), a decorator of the sink counts each message,
// hooks count the Kafka client's work, and the probes judge health from
// what those see.
type observer struct {
	cfg *config.Config
	log *slog.Logger
	reg *prometheus.Registry
	m   *metrics.Metrics
	// halted is the error that stopped relaying for good while the
	// process stays up (a lost slot); nil while it relays.
	halted atomic.Pointer[error]
	// registry follows the Schema Registry of format avro; nil without.
	registry *metrics.SchemaRegistry
	// step is the start-up step the relay waits on, which readiness
	// names; nil once the relay runs. The endpoint is served before
	// these steps, which can wait for PostgreSQL or Kafka without limit,
	// so that liveness passes meanwhile (a restart would not bring them
	// back) and readiness says what is awaited.
	step atomic.Pointer[string]
	// sink is the relay's sink, whose client the Kafka check pings; nil
	// until it is made (with exactly_once, after the instance number).
	sink atomic.Pointer[sink.Sink]
	// started is when the relay started, for the status page; scrub
	// hides the configured secrets in the texts it shows.
	started time.Time
	scrub   *strings.Replacer
	// deadLetters is `outboxrelay dead-letters` with the flags that gave
	// the configuration, to which the status page adds list or redrive.
	deadLetters string
}

// starting records the start-up step the relay now waits on; "" when it
// has started.
func (o *observer) starting(step string) {
	if step == "" {
		o.step.Store(nil)
		return
	}
	o.step.Store(&step)
}

// useSink gives the Kafka readiness check the sink's client to ping.
func (o *observer) useSink(snk *sink.Sink) { o.sink.Store(snk) }

// watchRegistry registers the Schema Registry's metrics and readiness
// check, and returns what the router reports each request's outcome to.
func (o *observer) watchRegistry() (func(error), error) {
	r, err := metrics.NewSchemaRegistry(o.reg)
	if err != nil {
		return nil, err
	}
	o.registry = r
	return r.Observe, nil
}

// halt records that relaying stopped on err and will not restart: the
// readiness probe says so, and liveness no longer asks for a restart that
// cannot help.
func (o *observer) halt(err error) { o.halted.Store(&err) }

func newObserver(cfg *config.Config, log *slog.Logger, configFlags []string) (*observer, error) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.WithBuildInfo(Build().Version), metrics.WithMaxTopics(cfg.Metrics.MaxTopics),
		metrics.WithDeadLetterTopic(cfg.Kafka.DeadLetterTopic))
	if err != nil {
		return nil, err
	}
	var pairs []string
	for _, sec := range cfg.Secrets() {
		if sec != "" {
			pairs = append(pairs, sec, secret.Mask)
		}
	}
	deadLetters := "outboxrelay dead-letters"
	if len(configFlags) > 0 {
		deadLetters += " " + shellWords(configFlags)
	}
	return &observer{cfg: cfg, log: log, reg: reg, m: m, started: time.Now(), scrub: strings.NewReplacer(pairs...), deadLetters: deadLetters}, nil
}

// sinkOptions give the Kafka client its quieter logger and the metric
// hooks. They come after the sink's own options and so override its
// logger.
func (o *observer) sinkOptions() []sink.Option {
	return []sink.Option{sink.WithClientOptions(
		kgo.WithLogger(kslog.New(kafkaLogger(o.log, o.cfg.Log.Level))),
		kgo.WithHooks(o.m.KafkaHooks()),
	)}
}

// serve starts the HTTP endpoint. The endpoint outlives ctx, so that the
// drain after a stop signal can be watched; stop ends it and waits, and
// may be called more than once. Call it before the start-up steps (see
// starting), and watchRegistry before it.
func (o *observer) serve(ctx context.Context) (stop func(), err error) {
	slot := ""
	if o.cfg.Source == "cdc" {
		cc := o.cfg.CDCConfig()
		cc.SetDefaults()
		slot = cc.Slot
	}
	pg, err := metrics.NewPostgresProbe(o.cfg.Postgres.URL, slot, metrics.WithNetwork(o.cfg.Postgres.Network()))
	if err != nil {
		return nil, err
	}
	if err := o.reg.Register(pg); err != nil {
		pg.Close()
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	if slot != "" {
		o.m.WatchSlot(pg.SlotStalled)
	}
	h := o.cfg.HTTP
	ready := []httpserver.Check{
		{Name: "running", Func: func(context.Context) error {
			if ctx.Err() != nil {
				return errors.New("stopping: draining the events in flight")
			}
			if step := o.step.Load(); step != nil {
				return fmt.Errorf("starting: %s", *step)
			}
			return nil
		}},
		{Name: "postgres", Func: pg.Check},
		httpserver.Cached(httpserver.Check{Name: "kafka", Func: func(ctx context.Context) error {
			snk := o.sink.Load()
			if snk == nil {
				return errors.New("no Kafka client yet: it is made once the relay has its poller instance number")
			}
			if err := snk.Client().Ping(ctx); err != nil {
				return fmt.Errorf("no broker of %v answers: %w", o.cfg.Kafka.Brokers, err)
			}
			return nil
		}}, kafkaCheckMaxAge),
		{Name: "source", Func: o.sourceCheck},
		{Name: "progress", Func: o.progressCheck(h.ReadyStallTimeout)},
		{Name: "publishing", Func: o.publishingCheck},
	}
	if o.registry != nil {
		ready = append(ready, httpserver.Check{Name: "schema_registry", Func: o.registry.Check})
	}
	srv, err := httpserver.Listen(h.Listen, httpserver.Config{
		Gatherer: o.reg,
		Live: []httpserver.Check{
			{Name: "progress", Func: o.liveProgressCheck(h.LiveStallTimeout)},
			{Name: "connected", Func: o.connectedCheck(h.LiveStallTimeout)},
		},
		Ready:  ready,
		Status: o.status(pg),
	}, o.log)
	if err != nil {
		pg.Close()
		return nil, err
	}

	srvCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(srvCtx) }()
	// The liveness probe's measure of a source that is down, kept while
	// the endpoint serves it.
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		o.m.Watch(srvCtx)
	}()
	// Say what a stop waits for; the runner says when it gives up.
	rc := o.cfg.RunnerConfig()
	rc.SetDefaults()
	noted := make(chan struct{})
	unwatch := context.AfterFunc(ctx, func() {
		defer close(noted)
		if step := o.step.Load(); step != nil {
			o.log.Info("stop requested while starting", "component", "app", "step", *step)
			return
		}
		o.log.Info("stop requested: finishing the events in flight, then confirming the checkpoint",
			"component", "app", "in_flight", o.m.Progress().InFlight, "shutdown_timeout", rc.ShutdownTimeout)
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			if !unwatch() {
				<-noted // keep the log in order: the stop, then what follows
			}
			cancel()
			if err := <-done; err != nil {
				o.log.Warn("http endpoint stopped with an error", "component", "http", "err", err)
			}
			<-watched
			pg.Close()
		})
	}, nil
}

func (o *observer) sourceCheck(context.Context) error {
	if err := o.halted.Load(); err != nil {
		return fmt.Errorf("relaying stopped and will not restart on its own: %w", *err)
	}
	p := o.m.Progress()
	switch {
	case p.SourceUp:
		return nil
	case p.SourceStandby:
		// Ready: waiting is a standby's job, and a rolling update of two
		// replicas needs both ready (docs/kubernetes.md).
		return httpserver.Note("standby: another session holds the replication slot; this relay takes over within about a second of it letting go")
	case p.SourceRunning:
		return errors.New("the source is connecting")
	}
	if p.SourceErr != nil {
		return fmt.Errorf("the source stopped and waits to restart: %w", p.SourceErr)
	}
	return errors.New("the source has not started")
}

// connectedCheck fails when the source has been neither up nor waiting as
// a standby for longer than bound: it cannot connect, or loses every
// connection it makes. A relay in that state relays nothing, and a
// restart is the one remedy left to it.
func (o *observer) connectedCheck(bound time.Duration) func(context.Context) error {
	return func(context.Context) error {
		p := o.m.Progress()
		if p.DownSince.IsZero() || o.halted.Load() != nil {
			return nil
		}
		down := time.Since(p.DownSince)
		if down < bound {
			return nil
		}
		if p.SourceErr != nil {
			return fmt.Errorf("the source has not been connected for %s; its last run ended with: %w", down.Round(time.Second), p.SourceErr)
		}
		return fmt.Errorf("the source has not been connected for %s", down.Round(time.Second))
	}
}

// liveProgressCheck is progressCheck for liveness, except while the
// Schema Registry does not answer: publishing then waits for it on
// purpose, and a restart would wait the same (readiness says so).
func (o *observer) liveProgressCheck(bound time.Duration) func(context.Context) error {
	progress := o.progressCheck(bound)
	return func(ctx context.Context) error {
		err := progress(ctx)
		if err != nil && o.registry != nil {
			if down := o.registry.Check(ctx); down != nil {
				return httpserver.Note(fmt.Sprintf("%v; waiting for the schema registry, which a restart would not bring back", err))
			}
		}
		return err
	}
}

// progressCheck fails when the relay has had work in hand for longer than
// bound without getting further with it.
func (o *observer) progressCheck(bound time.Duration) func(context.Context) error {
	return func(context.Context) error {
		p := o.m.Progress()
		now := time.Now()
		stalled := p.Stalled(now)
		if stalled < bound {
			return nil
		}
		if !p.OldestSent.IsZero() && now.Sub(p.OldestSent) >= bound {
			return fmt.Errorf("stalled: %d events in flight, the oldest handed to Kafka %s ago and not acknowledged",
				p.InFlight, now.Sub(p.OldestSent).Round(time.Second))
		}
		return fmt.Errorf("stalled: a batch read from the source has waited %s to be published", stalled.Round(time.Second))
	}
}

// publishingCheck fails while publishing is held up by the Kafka side
// (metrics.HeldUp): a topic missing, a grant lacking. The relay restarts
// from its checkpoint meanwhile, and each restart begins the wait for an
// acknowledgement again, which the progress check measures; this one
// fails from the first refusal until a record of the topic is in Kafka.
// Liveness does not: a restart of the process would be held up the same.
func (o *observer) publishingCheck(context.Context) error {
	h := o.m.Progress().HeldUp
	if h == nil {
		return nil
	}
	what := "every topic"
	if h.Topic != "" {
		what = "topic " + h.Topic
	}
	return fmt.Errorf("publishing to %s has been held up for %s, until the Kafka side changes: %w", what, time.Since(h.Since).Round(time.Second), h.Err)
}

// status returns where the relay stands for the status page: what the
// metrics and the probe of the slot pg know, with the configuration's
// names. Texts that may quote a connection string or a secret (errors, a
// dead letter's reason) are redacted and scrubbed.
func (o *observer) status(pg *metrics.PostgresProbe) func(context.Context) httpserver.Status {
	return func(ctx context.Context) httpserver.Status {
		cfg, ms := o.cfg, o.m.Status(ctx)
		s := httpserver.Status{
			Version: Build().Version, Time: time.Now(), StartedAt: o.started,
			Source: string(cfg.Source), Tables: cfg.Outbox.TableNames(), Postgres: secret.Redact(cfg.Postgres.URL), Brokers: cfg.Kafka.Brokers,
			SourceUp: ms.SourceUp, Standby: ms.SourceStandby,
			EventsInFlight: ms.InFlight, EventsAcknowledged: ms.Acknowledged, Restarts: ms.Restarts,
			LastCommitted: statusEvent(ms.LastRead), LastPublished: statusEvent(ms.LastAcknowledged),
			DeadLetters: httpserver.DeadLetters{Topic: cfg.Kafka.DeadLetterTopic, Total: ms.DeadLettered, Command: o.deadLetters},
			Rate:        httpserver.Rate{IntervalSeconds: metrics.RateInterval.Seconds()},
		}
		if !ms.Oldest.IsZero() {
			oldest := ms.Oldest
			s.Lag.OldestUnpublished, s.Lag.Seconds = &oldest, max(s.Time.Sub(oldest), 0).Seconds()
		}
		for _, r := range ms.Rate {
			s.Rate.Samples = append(s.Rate.Samples, httpserver.RateSample{At: r.At, EventsPerSecond: r.PerSecond})
			s.Rate.EventsPerSecond = r.PerSecond
		}
		for _, d := range ms.DeadLetters {
			s.DeadLetters.Recent = append(s.DeadLetters.Recent, httpserver.DeadLetter{ID: d.EventID, Topic: d.Topic, Reason: o.text(d.Reason), At: d.At})
		}
		if f := ms.LastFailure; f != nil {
			s.LastError = &httpserver.TimedText{Message: o.text(secret.RedactError(f.Err).Error()), At: f.At}
		}
		if err := o.halted.Load(); err != nil {
			s.LastError = &httpserver.TimedText{Message: o.text("relaying stopped and will not restart on its own: " + secret.RedactError(*err).Error()), At: s.Time}
		}
		if cfg.Source == "cdc" {
			s.Slot, s.Lag.Bytes = o.slotStatus(pg.Slot(ctx), ms.ConfirmedLSN)
		} else {
			s.Poll = o.pollStatus(ms)
		}
		return s
	}
}

// text is s as the status page may show it.
func (o *observer) text(s string) string { return o.scrub.Replace(secret.Redact(s)) }

func statusEvent(e *metrics.Seen) *httpserver.Event {
	if e == nil {
		return nil
	}
	return &httpserver.Event{ID: e.EventID, Topic: e.Topic, Timestamp: e.Timestamp, At: e.At}
}

// slotStatus is the slot as the probe last saw it, with the position the
// relay confirms, and the WAL it holds back.
func (o *observer) slotStatus(st metrics.SlotState, relayLSN *uint64) (*httpserver.Slot, *uint64) {
	sl := &httpserver.Slot{Name: st.Name}
	if st.Err != nil {
		sl.Error = o.text(fmt.Sprintf("PostgreSQL does not answer: %v", secret.RedactError(st.Err)))
		return sl, nil
	}
	if relayLSN != nil && *relayLSN != 0 {
		sl.RelayConfirmedLSN = connector.FormatLSN(*relayLSN)
	}
	if !st.Found {
		return sl, nil
	}
	h := st.Headroom
	sl.Exists, sl.Active, sl.ActivePID = true, st.Active, h.ActivePID
	sl.WALStatus, sl.SafeWALSizeBytes, sl.MaxWALKeepSizeBytes, sl.Failover, sl.Synced = h.WALStatus, h.SafeWALSize, h.MaxWALKeepSize, h.Failover, h.Synced
	if st.ConfirmedFlushLSN != nil {
		sl.ConfirmedFlushLSN = connector.FormatLSN(*st.ConfirmedFlushLSN)
	}
	return sl, st.LagBytes
}

// pollStatus is the poller's settings and the rows it has not published.
func (o *observer) pollStatus(ms metrics.Status) *httpserver.Poll {
	pc := o.cfg.PollConfig()
	pc.SetDefaults()
	p := &httpserver.Poll{Mode: string(pc.Mode), Interval: pc.Interval.String(), Buckets: pc.Buckets}
	if ms.BacklogErr != nil {
		p.Error = o.text(secret.RedactError(ms.BacklogErr).Error())
	}
	for _, b := range ms.Backlogs {
		t := httpserver.Table{Name: b.Table, Unpublished: b.Events}
		if !b.Oldest.IsZero() {
			oldest := b.Oldest
			t.OldestUnpublished = &oldest
		}
		p.Tables = append(p.Tables, t)
	}
	return p
}
