package app

import (
	"context"
	"log/slog"

	"github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/config"
	"github.com/outboxrelay/outboxrelay/connector"
	"github.com/outboxrelay/outboxrelay/debezium"
)

// Router is how the relay configured by cfg routes an event: a table's
// own routing (outbox.tables), the Debezium router with its converters and
// schema registry when the Debezium routing keys are set (its topics held
// to routing.topic_pattern), else the routing section. nullKeys says the
// router takes an event whose aggregate id is NULL (Debezium's makes a
// record with a null key of it), as the runner is told with
// connector.WithNullKeys. For the commands that publish beside the relay
// (replay, dead-letters redrive), so that they route as it does.
//
// It reads the outbox tables' column types for the Debezium router; a
// table the configured records cannot be made from is an error, one that
// cannot be read yet is read again with the first event. registryState,
// when not nil, is told the outcome of each request to the schema
// registry.
func Router(ctx context.Context, cfg *config.Config, log *slog.Logger, registryState func(error)) (rt connector.Router, nullKeys bool, err error) {
	rc := cfg.DebeziumRouter()
	if rc == nil {
		return tableRouter(cfg), false, nil
	}
	ropts := []debezium.RouterOption{debezium.WithLogger(log), debezium.WithCatalog(debezium.PostgresCatalog(rc.PostgresURL, rc.Network))}
	if rc.UsesRegistry() && registryState != nil {
		ropts = append(ropts, debezium.WithRegistryState(registryState))
	}
	dr, err := debezium.NewRouter(*rc, ropts...)
	if err != nil {
		return nil, false, err
	}
	if err := dr.Check(ctx); connector.IsPermanent(err) {
		return nil, false, err
	} else if err != nil {
		log.Warn("could not read the outbox table's column types at start; reading them with the first event", "component", "app", "err", err)
	}
	allowed, err := connector.AllowTopics(dr, cfg.Routing.TopicPattern)
	if err != nil {
		return nil, false, err
	}
	return allowed, true, nil
}

// tableRouter is the routing section's router, with the routing of each
// outbox table that sets its own.
func tableRouter(cfg *config.Config) connector.Router {
	def := connector.NewRouting(cfg.RunnerConfig().Routing)
	trs := cfg.TableRoutings()
	if trs == nil {
		return def
	}
	tr := connector.TableRouter{Default: def, Tables: map[string]connector.Router{}}
	for name, r := range trs {
		tr.Tables[name] = connector.NewRouting(r)
	}
	return tr
}

// ClientLogger is the logger of a client library a command opens beside
// the relay (a Kafka client, say), under component, as the relay's own
// clients log: below log.level debug only warnings and errors.
func ClientLogger(log *slog.Logger, level config.LogLevel, component string) *slog.Logger {
	return clientLogger(log, level, component)
}
